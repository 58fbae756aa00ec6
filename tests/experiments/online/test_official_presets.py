"""The `official` presets are the official OK code's logged configurations:
their values, the clip-unit conversion, the initialisation, and PTB's logged
loss moving average."""

from __future__ import annotations

from helpers import load_config
import jax
import numpy as np
import optax
import pytest

from configs import common
from experiments.online import ptb_experiment
from experiments.online import setup as online_setup
from rtrl import cells
from rtrl import optim
from rtrl.online import StepMetrics
from rtrl.readout import LOG2

OFFICIAL = {
  "copy_task": dict(
    estimator="ok",
    rank=16,
    cell="rhn",
    hidden_size=128,
    batch_size=16,
    init_stddev=0.01,
    cell_clip_norm=16.0,
    clip_norm=0.0,
    optimizer="tf1_adam",
    curriculum="official",
    length_rule="clipped",
    error_threshold=0.15,
    log_every=1000,
  ),
  "ptb": dict(
    estimator="ok",
    rank=8,
    cell="rhn",
    hidden_size=256,
    batch_size=32,
    init_stddev=0.01,
    cell_clip_norm=3200.0,
    clip_norm=0.0,
    optimizer="tf1_adam",
    reset_every=100,
    reset_probability=0.0,
    text_layout="official",
    stream_offsets="official",
    log_every=1000,
    eval_every=10_000,
  ),
}


@pytest.mark.parametrize("experiment", sorted(OFFICIAL))
def test_official_preset_values(experiment):
  """The logged configurations (the clips: 1.0 and 100 in the official
  code's units, times the batch size in ours)."""
  config = load_config(experiment, "official")
  assert {k: config[k] for k in OFFICIAL[experiment]} == OFFICIAL[experiment]
  assert config.learning_rate == pytest.approx(10**-3.5)


def test_unknown_preset_is_named():
  with pytest.raises(ValueError, match="'bogus'.*'official'"):
    load_config("copy_task", "bogus")


@pytest.mark.parametrize("scale", [0.1, 10.0])  # below and above the clip
def test_official_clip_equals_ours_times_batch(scale):
  """The official code clips 1/B of our batch-mean gradient at c; clipping
  ours at c * B gives the same update direction and relative size."""
  batch, threshold = 16, 1.0
  gradient = {"w": scale * jax.random.normal(jax.random.PRNGKey(0), (5, 7))}
  theirs, _ = optax.clip_by_global_norm(threshold).update(
    jax.tree_util.tree_map(lambda g: g / batch, gradient), None
  )
  ours, _ = optax.clip_by_global_norm(
    common.official_cell_clip(threshold, batch)
  ).update(gradient, None)
  np.testing.assert_allclose(theirs["w"] * batch, ours["w"], rtol=1e-6)
  clipped = np.linalg.norm(np.asarray(gradient["w"]) / batch) > threshold
  assert clipped == (scale == 10.0)


def test_init_stddev_draws_every_weight_normal():
  cell = cells.make("rhn", 128)
  params = online_setup.init_params(
    cell, jax.random.PRNGKey(0), 4, 4, init_stddev=0.01
  )
  for leaf in jax.tree_util.tree_leaves(params):
    values = np.asarray(leaf).ravel()
    # Sample std of m normal draws: relative error about 1/sqrt(2m).
    tolerance = 5 / np.sqrt(2 * values.size)
    assert abs(values.std() / 0.01 - 1) < tolerance
    assert abs(values.mean()) < 5 * 0.01 / np.sqrt(values.size)


def test_ptb_loss_moving_average_is_the_official_recursion(x64):
  del x64
  rng = np.random.default_rng(0)
  loss_sum = rng.uniform(50.0, 150.0, 37)
  weight_sum = np.full(37, 32.0)
  average = 1.0
  for loss, weight in zip(loss_sum, weight_sum):
    average = 0.999 * average + 0.001 * (loss / weight / LOG2)
  got = ptb_experiment.loss_moving_average(
    jax.numpy.ones(()), StepMetrics(loss_sum, weight_sum)
  )
  assert float(got) == pytest.approx(average, rel=1e-13)


def test_tf1_adam_optimizer_feeds_adam_the_cell_gradient_over_batch(x64):
  del x64
  config = load_config("ptb", "official", cell_clip_norm=0.0)
  params = {
    "cell": {"w": jax.numpy.ones(3)},
    "readout": {"w": jax.numpy.ones(2)},
  }
  gradient = {
    "cell": {"w": jax.numpy.asarray([1e-7, 2e-6, -3e-5])},
    "readout": {"w": jax.numpy.asarray([1e-7, -4e-6])},
  }
  ours = online_setup.make_optimizer(config, 1e-3)
  update, _ = ours.update(gradient, ours.init(params), params)
  theirs = optim.tf1_adam(1e-3)
  expected, _ = theirs.update(
    {"cell": {"w": gradient["cell"]["w"] / 32}, "readout": gradient["readout"]},
    theirs.init(params),
  )
  for a, b in zip(
    jax.tree_util.tree_leaves(update), jax.tree_util.tree_leaves(expected)
  ):
    np.testing.assert_allclose(a, b, rtol=1e-12)
  with pytest.raises(ValueError, match="config.optimizer"):
    online_setup.validate_trainer(load_config("ptb", optimizer="sgd"))


def test_paper_default_is_the_official_clip_and_init():
  """char-PTB's paper setting clips and initialises as the official code
  (its 100 in our units at batch 32)."""
  paper, official = load_config("ptb"), load_config("ptb", "official")
  for field in ("cell_clip_norm", "init_stddev", "learning_rate"):
    assert paper[field] == official[field]
  assert paper.cell_clip_norm == 3200.0
