"""Long online runs stay finite: every estimator trains an RHN-16 (float32,
batch 4, Adam 10^-2.5) on the Copy task with the online trainer, with no NaN
or Inf in the parameters, the optimiser state, the tangents or the metrics.

The 10,000-step runs are marked slow; a 500-step version of each is in the
default suite.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl import readout
from rtrl.readout import LOG2
from rtrl.tasks import copy_task

HIDDEN, BATCH, LR, CHUNK = 16, 4, 10**-2.5, 500
MAX_LENGTH = 40
ESTIMATORS = {
  "rtrl": {},
  "uoro": {},
  "kf": {},
  "kf_avg": {"rank": 8},
  "ok": {"rank": 8},
  "ok_biased": {"rank": 8},
  "ktp": {"rank": 8},
  "kf_approx": {"rank": 8},
}


def assert_finite(tree, what):
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.inexact):
      assert np.all(np.isfinite(leaf)), (
        f"{what}: non-finite values in {jax.tree_util.keystr(path)}"
      )


def run_copy_task(name, num_steps, seed=0):
  """Online training on the Copy task with the curriculum (checked per
  500-step chunk); returns the per-chunk error (bits/char) and lengths."""
  assert jnp.asarray(0.0).dtype == jnp.float32
  cell = cells.RHN(hidden_size=HIDDEN)
  est = estimators.make(name, cell, **ESTIMATORS[name])
  trainer = online.make_online_trainer(cell, est, optax.adam(LR))
  params_key, trainer_key, data_key = jax.random.split(
    jax.random.PRNGKey(seed), 3
  )
  ck, rk = jax.random.split(params_key)
  params = {
    "cell": cell.init(ck, copy_task.VOCAB_SIZE),
    "readout": readout.linear().init(rk, HIDDEN, copy_task.VOCAB_SIZE),
  }
  state = trainer.init(params, trainer_key, BATCH)
  stream = copy_task.stream_init(data_key, BATCH, MAX_LENGTH)
  generate = jax.jit(copy_task.generate, static_argnums=2)
  length = jnp.ones((), jnp.int32)
  errors, lengths = [], []
  for start in range(0, num_steps, CHUNK):
    stream, chunk = generate(stream, length, CHUNK)
    state, metrics = trainer.run(state, chunk)
    where = f"{name}, steps {start}..{start + CHUNK}"
    assert_finite(
      (state.params, state.opt_state, state.tstate, state.cell_state, metrics),
      where,
    )
    loss_sum, weight_sum = jax.device_get(
      (metrics.loss_sum.sum(), metrics.weight_sum.sum())
    )
    error = float(loss_sum / max(weight_sum, 1.0) / LOG2)
    assert np.isfinite(error), where
    errors.append(error)
    lengths.append(int(length))
    length = jnp.minimum(copy_task.curriculum_update(length, error), MAX_LENGTH)
  assert int(state.step) == num_steps
  return errors, lengths


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_500_online_steps_stay_finite(name):
  """500 float32 steps (one jitted chunk) of every estimator: finite
  parameters, optimiser state, tangents, cell state and loss."""
  errors, _ = run_copy_task(name, 500)
  # An untrained net guesses among 4 symbols: about 2 bits/char at most.
  assert errors[0] < 3.0, errors


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_10000_online_steps_stay_finite(name):
  """10,000 float32 steps of every estimator with the curriculum (so T grows
  and the tangents see long sequences): everything stays finite."""
  errors, lengths = run_copy_task(name, 10_000)
  print(
    f"{name}: final error {errors[-1]:.3f} bits/char, "
    f"curriculum length {lengths[-1]}"
  )
