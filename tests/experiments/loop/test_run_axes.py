"""Seeds and learning rates as array axes (`experiments/loop/run_axes.py`):
S x L runs train as one vmapped program, and run r equals the single run with
its seed and learning rate."""

from __future__ import annotations

import json

from helpers import copy_config
import jax
import ml_collections
import numpy as np
import pytest

from experiments.loop import checkpoints
from experiments.loop import run_axes
from experiments.loop import workdir as workdir_lib
from experiments.online import copy_experiment

# KF-AVG and r-OK: a vmapped program rounds differently from a single
# run's (XLA's reductions depend on the batch shape), so this also checks
# that r-OK's discrete choices (the SVD's signs, CholeskyQR2's basis) are
# continuous in their inputs; when they were not, its runs left each other
# within 20 steps (tests/rtrl/online/test_batch_position.py).
TINY = dict(
  estimator="kf_avg",
  rank=2,
  cell="rhn",
  hidden_size=4,
  batch_size=2,
  seed=7,
  num_steps=100,
  chunk_steps=50,
  log_every=50,
  checkpoint_every=50,
)


def final_state(workdir):
  _, raw = checkpoints.read_latest_checkpoint(str(workdir))
  return raw["state"]


def test_run_grid_order_and_validation():
  config = ml_collections.ConfigDict(
    dict(seed=3, num_seeds=2, learning_rate=0.1, learning_rates=(1.0, 2.0))
  )
  assert run_axes.run_grid(config, ("learning_rate",)) == [
    {"seed": 3, "learning_rate": 1.0},
    {"seed": 4, "learning_rate": 1.0},
    {"seed": 3, "learning_rate": 2.0},
    {"seed": 4, "learning_rate": 2.0},
  ]
  config.learning_rates = ()
  assert run_axes.run_grid(config, ("learning_rate",)) == [
    {"seed": 3, "learning_rate": 0.1},
    {"seed": 4, "learning_rate": 0.1},
  ]
  config.num_seeds = 0
  with pytest.raises(ValueError, match="num_seeds"):
    run_axes.run_grid(config, ())
  config.num_seeds = 1
  config.learning_rates = ("fast",)
  with pytest.raises(ValueError, match="learning_rates"):
    run_axes.run_grid(config, ("learning_rate",))


@pytest.mark.parametrize("estimator", ["kf_avg", "ok"])
def test_vmapped_runs_equal_single_runs(tmp_path, x64, estimator):
  """2 seeds x 2 learning rates in one program; each run's parameters,
  optimiser state, tangents, stream and curriculum, and its metrics, equal
  the single run with that seed and learning rate (float64, 1e-10)."""
  tiny = {**TINY, "estimator": estimator}
  stacked_dir = tmp_path / "stacked"
  copy_experiment.train(
    copy_config(num_seeds=2, learning_rates=(0.02, 0.005), **tiny),
    str(stacked_dir),
  )
  saved = json.loads((stacked_dir / "config.json").read_text())
  assert [r["seed"] for r in saved["runs"]] == [7, 8, 7, 8]
  stacked_state = final_state(stacked_dir)
  stacked_records = workdir_lib.read_metrics(str(stacked_dir))
  assert len(stacked_records[-1]["loss_bits"]) == 4

  for r in (1, 2):  # Seed offset 1 at the first rate, 0 at the second.
    run = saved["runs"][r]
    single_dir = tmp_path / f"single{r}"
    copy_experiment.train(
      copy_config(
        **{**tiny, "seed": run["seed"]}, learning_rate=run["learning_rate"]
      ),
      str(single_dir),
    )
    single_state = final_state(single_dir)
    got = jax.tree_util.tree_map(lambda a, r=r: np.asarray(a)[r], stacked_state)
    jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12),
      got,
      single_state,
    )
    single_records = workdir_lib.read_metrics(str(single_dir))
    for stacked, single in zip(stacked_records, single_records):
      assert stacked["curriculum_length"][r] == single["curriculum_length"]
      np.testing.assert_allclose(
        stacked["loss_bits"][r], single["loss_bits"], rtol=1e-10
      )
