"""`rtrl.estimators.truncated_bptt`: each step's gradient is BPTT's through
the last T steps (float64), exact RTRL's once T covers the sequence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rtrl
from rtrl.estimators import truncated_bptt


def _sequence(cell, length, key):
  params = cell.init(key, 3)
  xs = jax.random.normal(jax.random.fold_in(key, 1), (length, 3))
  resets = jnp.zeros((length,), bool).at[0].set(True).at[5].set(True)
  g = jax.random.normal(jax.random.fold_in(key, 2), (length, cell.hidden_size))
  return params, xs, resets, g


def _estimates(cell, estimator, params, xs, resets, g):
  """Per step: the estimator's gradient of `g_t . h_t`."""
  state = cell.initial_state()
  tstate = estimator.init(params, state, jax.random.PRNGKey(0))
  grads = []
  for t in range(xs.shape[0]):
    if resets[t]:
      state = cell.initial_state()
    if estimator.folds_reset:
      tstate, state = estimator.step(params)(tstate, state, xs[t], resets[t])
    else:
      if resets[t]:
        tstate = estimator.reset(tstate)
      tstate, state = estimator.step(params)(tstate, state, xs[t])
    dstate = jax.vjp(cell.output, state)[1](g[t])[0]
    grads.append(estimator.gradient(params, tstate, dstate)["W"])
  return grads


def _truncated_reference(cell, params, xs, resets, g, t, truncation):
  """BPTT of `g_t . h_t` through steps t-T+1..t, from the trajectory's
  state before step t-T+1 (held fixed)."""
  start = max(0, t - truncation + 1)
  state = cell.initial_state()
  for s in range(start):
    state = cell.initial_state() if resets[s] else state
    state = cell.step(params, state, xs[s])

  def objective(p):
    h = state
    for s in range(start, t + 1):
      h = cell.initial_state() if resets[s] else h
      h = cell.step(p, h, xs[s])
    return jnp.dot(g[t], cell.output(h))

  return jax.grad(objective)(params)["W"]


@pytest.mark.parametrize("truncation", [1, 3, 20])
def test_each_step_is_bptt_through_the_window(x64, truncation):
  cell = rtrl.cells.CTRNN(5, tau_seed=2)
  params, xs, resets, g = _sequence(cell, 12, jax.random.PRNGKey(3))
  grads = _estimates(
    cell, truncated_bptt(cell, truncation), params, xs, resets, g
  )
  for t, grad in enumerate(grads):
    expected = _truncated_reference(cell, params, xs, resets, g, t, truncation)
    np.testing.assert_allclose(grad, expected, rtol=1e-10, atol=1e-13)


def test_a_window_longer_than_the_sequence_is_exact_rtrl(x64):
  cell = rtrl.cells.GRU(4)
  params, xs, resets, g = _sequence(cell, 10, jax.random.PRNGKey(5))
  grads = _estimates(cell, truncated_bptt(cell, 16), params, xs, resets, g)
  exact = _estimates(
    cell, rtrl.estimators.make("rtrl", cell), params, xs, resets, g
  )
  for a, b in zip(grads, exact):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_truncation_must_be_positive():
  with pytest.raises(ValueError, match="truncation must be a positive"):
    truncated_bptt(rtrl.cells.RNN(4), 0)
