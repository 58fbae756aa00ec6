"""`Estimator.batch_gradient`: the batch contracted inside the estimator's
products equals each example's `gradient` summed (float64), for every
estimator that has one; the trainers use it (`rtrl.online.summed_gradient`).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from rtrl import cells
from rtrl import estimators
from rtrl import online

BATCH, HIDDEN, INPUT, STEPS = 5, 4, 3, 4


def _batched_states(cell, estimator, params, key):
  """Tangent and cell states of a batch after a few random steps."""
  keys = jax.random.split(key, BATCH + 1)
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    params, cell.initial_state(), keys[1:]
  )
  state = online.broadcast_state(cell.initial_state(), BATCH)
  step = jax.vmap(estimator.step(params))
  inputs = jax.random.normal(keys[0], (STEPS, BATCH, INPUT))
  for x in inputs:
    tstate, state = step(tstate, state, x)
  return tstate, state


CASES = [("uoro", name) for name in ("rnn", "rhn", "lstm", "gru")] + [
  ("rtrl", "lru")
]


@pytest.mark.parametrize("estimator_name,cell_name", CASES)
def test_batch_gradient_equals_the_summed_per_example_gradients(
  estimator_name, cell_name, x64
):
  cell = cells.make(cell_name, HIDDEN)
  estimator = estimators.make(estimator_name, cell)
  assert estimator.batch_gradient is not None
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  tstate, state = _batched_states(
    cell, estimator, params, jax.random.PRNGKey(1)
  )
  errors = jax.tree_util.tree_map(
    lambda s: jax.random.normal(jax.random.PRNGKey(2), s.shape, s.dtype), state
  )
  batched = estimator.batch_gradient(params, tstate, errors)
  per_example = jax.vmap(estimator.gradient, in_axes=(None, 0, 0))(
    params, tstate, errors
  )
  summed = jax.tree_util.tree_map(lambda a: a.sum(0), per_example)
  assert set(batched) == set(summed)
  for name in summed:
    assert np.abs(np.asarray(summed[name])).max() > 1e-3, name  # not vacuous
    np.testing.assert_allclose(
      batched[name], summed[name], rtol=1e-12, atol=1e-13, err_msg=name
    )


def test_summed_gradient_falls_back_to_the_per_example_sum(x64):
  """An estimator without `batch_gradient` (SnAp-1) gets `gradient`
  vmapped and summed."""
  cell = cells.make("rhn", HIDDEN)
  estimator = estimators.make("snap1", cell)
  assert estimator.batch_gradient is None
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  tstate, state = _batched_states(
    cell, estimator, params, jax.random.PRNGKey(3)
  )
  errors = jax.random.normal(jax.random.PRNGKey(4), state.shape)
  summed = online.summed_gradient(estimator, params, tstate, errors)
  expected = sum(
    estimator.gradient(
      params, jax.tree_util.tree_map(lambda a: a[b], tstate), errors[b]
    )["W"]
    for b in range(BATCH)
  )
  np.testing.assert_allclose(summed["W"], expected, rtol=1e-12)
