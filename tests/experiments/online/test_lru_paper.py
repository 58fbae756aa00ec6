"""The online LRU paper's settings (the `lru_paper` presets, written in
configs/common.py and configs/seq_cifar.py): the presets' values, the warm-up-cosine schedule, the optimiser that trains λ
and γ at a reduced rate without weight decay and the rest with AdamW,
clear errors for bad fields, and a short Copy run that learns with them."""

from __future__ import annotations

from helpers import copy_config
from helpers import load_config
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import common
from experiments.loop import workdir as workdir_lib
from experiments.online import copy_experiment
from experiments.online import setup as online_setup
from rtrl import optim
from rtrl import stack

# Table 1's network: 4 LRU layers of 64 complex units in blocks of 128.
NETWORK = dict(
  cell="lru",
  estimator="rtrl",
  num_layers=4,
  head="lru_block",
  model_size=128,
  hidden_size=64,
)


@pytest.mark.parametrize("experiment", ["copy_task", "ptb"])
def test_copy_and_ptb_presets_take_table_1s_network_and_optimiser(experiment):
  config = load_config(experiment, "lru_paper")
  official = load_config(experiment, "official")
  assert {k: config[k] for k in NETWORK} == NETWORK
  assert {k: config[k] for k in common.LRU_PAPER_TABLE_1} == (
    common.LRU_PAPER_TABLE_1
  )
  assert config.learning_rates == (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)
  assert config.learning_rate == 1e-3 and config.num_seeds == 3
  assert config.recurrence_learning_rate_factor == 0.5
  assert config.learning_rate_schedule == "warmup_cosine"
  assert (config.warmup_updates, config.weight_decay) == (0, 0.0)
  assert (config.optimizer, config.init_stddev, config.cell_clip_norm) == (
    "adam",
    0.0,
    0.0,
  )
  # The task is the official preset's.
  for field in ("batch_size", "num_steps", "log_every"):
    assert config[field] == official[field]
  online_setup.validate_trainer(config)


def test_seq_cifar_preset_is_table_2s_run():
  config = load_config("seq_cifar", "lru_paper")
  assert (config.num_layers, config.model_size, config.hidden_size) == (
    4,
    256,
    128,
  )
  assert (config.lru_r_min, config.lru_r_max) == (0.9, 0.999)
  assert config.batch_size == 100 and config.learning_rates == (1e-3, 4e-3)
  assert config.weight_decay == 0.1 and config.num_seeds == 2
  assert config.accumulate_steps == 1024  # one update per batch of images
  updates_per_epoch = 50_000 // 100
  assert online_setup.total_updates(config) == 180 * updates_per_epoch
  assert config.warmup_updates == 18 * updates_per_epoch
  online_setup.validate_trainer(config)


def test_warmup_cosine_schedule_values():
  schedule = optim.warmup_cosine_schedule(
    2.0, warmup_updates=4, total_updates=14
  )
  values = np.asarray(jax.vmap(schedule)(jnp.arange(15)))
  np.testing.assert_allclose(values[:4], [0.5, 1.0, 1.5, 2.0], rtol=1e-6)
  np.testing.assert_allclose(values[4], 2.0, rtol=1e-6)  # the peak
  np.testing.assert_allclose(values[9], 1.0, rtol=1e-6)  # half-way down
  np.testing.assert_allclose(values[14], 0.0, atol=1e-6)
  assert np.all(np.diff(values[4:]) < 0)


def test_schedule_takes_a_traced_peak():
  """A vmapped learning-rate axis hands the schedule a traced peak."""
  peaks = jnp.array([1e-3, 4e-3])
  values = jax.vmap(lambda peak: optim.warmup_cosine_schedule(peak, 0, 10)(5))(
    peaks
  )
  np.testing.assert_allclose(values, peaks * 0.5, rtol=1e-5)


def _lru_stack_params():
  config = copy_config(**NETWORK)
  config.update(model_size=8, hidden_size=4, num_layers=2)
  cell = online_setup.make_cell(config)
  params = stack.init_params(cell.layers, jax.random.PRNGKey(0), 5, 5)
  return config, params


def test_labels_pick_lambda_and_gamma_of_every_layer():
  _, params = _lru_stack_params()
  labels = online_setup.recurrence_labels(params)
  flat = jax.tree_util.tree_flatten_with_path(labels)[0]
  recurrence = sorted(
    {path[-1].key for path, label in flat if label == "recurrence"}
  )
  assert recurrence == ["gamma_log", "nu_log", "theta_log"]
  assert sum(label == "recurrence" for _, label in flat) == 2 * 3
  assert {path[-1].key for path, label in flat if label == "regular"} >= {
    "B_re",
    "B_im",
    "C",
    "D",
  }


def test_recurrence_at_the_factor_and_the_rest_with_adamw():
  """One update: ν, θ, γ step by half of Adam's step and do not decay;
  every other leaf steps as AdamW with the decay (float32, from the same
  gradient)."""
  config, params = _lru_stack_params()
  config.update(
    recurrence_learning_rate_factor=0.5,
    weight_decay=0.1,
    learning_rate_schedule="constant",
  )
  grads = jax.tree_util.tree_map(
    lambda p: jnp.cos(jnp.arange(p.size, dtype=p.dtype).reshape(p.shape) + 1.0),
    params,
  )
  tx = online_setup.make_optimizer(config, 1e-2)
  updates, _ = tx.update(grads, tx.init(params), params)
  adam, _ = optax.adam(1e-2).update(grads, optax.adam(1e-2).init(params))
  adamw_tx = optax.adamw(1e-2, weight_decay=0.1)
  adamw, _ = adamw_tx.update(grads, adamw_tx.init(params), params)
  labels = online_setup.recurrence_labels(params)
  for path, label in jax.tree_util.tree_flatten_with_path(labels)[0]:
    get = lambda tree: _at(tree, path)
    expected = 0.5 * get(adam) if label == "recurrence" else get(adamw)
    np.testing.assert_allclose(
      get(updates), expected, rtol=1e-6, atol=1e-9, err_msg=str(path)
    )


def _at(tree, path):
  for key in path:
    tree = tree[getattr(key, "key", getattr(key, "idx", None))]
  return tree


def test_defaults_are_plain_adam():
  config, params = _lru_stack_params()
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  tx = online_setup.make_optimizer(config, 1e-2)
  ours, _ = tx.update(grads, tx.init(params), params)
  adam, _ = optax.adam(1e-2).update(grads, optax.adam(1e-2).init(params))
  jax.tree_util.tree_map(np.testing.assert_array_equal, ours, adam)


@pytest.mark.parametrize(
  "fields, message",
  [
    (dict(weight_decay=-0.1), "config.weight_decay"),
    (
      dict(recurrence_learning_rate_factor=0.0),
      "recurrence_learning_rate_factor",
    ),
    (dict(learning_rate_schedule="linear"), "config.learning_rate_schedule"),
    (
      dict(learning_rate_schedule="warmup_cosine", warmup_updates=6000),
      "config.warmup_updates",
    ),
    (dict(optimizer="tf1_adam", weight_decay=0.1), "optimizer='adam' only"),
  ],
)
def test_bad_optimizer_fields_are_named(fields, message):
  config = copy_config(cell="lru", estimator="rtrl", num_steps=6000)
  config.update(fields)
  with pytest.raises(ValueError, match=message):
    online_setup.validate_trainer(config)


def test_online_lru_learns_copy_with_the_papers_optimiser(tmp_path):
  """Two LRU-16 layers in blocks of 32 under the paper's optimiser (λ, γ at
  half the rate, AdamW decay 0.05, a cosine from 3e-3 over the run), batch
  16, seed 0, official curriculum, 6000 steps. Observed: T = 5 (plain Adam
  at 3e-3 throughout: 6);
  asked: T >= 4."""
  config = copy_config(
    **NETWORK,
    curriculum="official",
    num_steps=6000,
    log_every=1000,
    chunk_steps=100,
  )
  config.update(
    num_layers=2,
    hidden_size=16,
    model_size=32,
    learning_rate=3e-3,
    recurrence_learning_rate_factor=0.5,
    weight_decay=0.05,
    learning_rate_schedule="warmup_cosine",
    warmup_updates=0,
  )
  copy_experiment.train(config, str(tmp_path))
  records = workdir_lib.read_metrics(str(tmp_path))
  assert records[-1]["curriculum_length"] >= 4, records
