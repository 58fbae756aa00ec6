"""Online trainer: `run` (lax.scan) == Python loop of `step`; the vmapped batch
== per-example runs (with the 1/B of `online.batch_loss`); accumulate_steps=k
updates only every k steps, with the mean of the k exact gradients."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rtrl_problems

from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import online

N, INPUT, OUTPUTS, B, T = 4, 3, 4, 3, 7


def make_problem(cell, seed=0):
  """float64 params and a time-major chunk with per-example resets."""
  return rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=[(0, None), (3, 0), (5, 1)],
    seed=seed,
    keep_probability=0.8,
  )


def take(chunk, t=None, b=None):
  """Step `t` and/or example `b` (kept as a batch of one) of a chunk."""

  def sel(a):
    if t is not None:
      a = a[t]
      if b is not None:
        a = a[b : b + 1]
    elif b is not None:
      a = a[:, b : b + 1]
    return a

  return jax.tree_util.tree_map(sel, chunk)


def assert_trees_close(a, b, rtol, atol=0.0):
  chex.assert_trees_all_close(a, b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("cls", [cells.RHN, cells.LSTM], ids=["rhn", "lstm"])
def test_scan_run_equals_python_loop_of_steps(cls, x64):
  """`trainer.run` over T steps == T calls of `trainer.step` (Adam, float64):
  params, optimiser state, cell state, tangents, step counter and metrics."""
  cell = cls(hidden_size=N)
  trainer = online.make_online_trainer(
    cell, estimators.make("rtrl", cell), optax.adam(3e-2)
  )
  params, chunk = make_problem(cell)
  state0 = jax.jit(trainer.init, static_argnums=2)(
    params, jax.random.PRNGKey(0), B
  )
  scanned, scan_metrics = trainer.run(state0, chunk)

  step = jax.jit(trainer.step)
  state, loop_metrics = state0, []
  for t in range(T):
    state, m = step(state, take(chunk, t))
    loop_metrics.append(m)
  assert int(scanned.step) == int(state.step) == T
  assert scanned.params["cell"]["W"].dtype == jnp.float64
  assert_trees_close(scanned.params, state.params, rtol=1e-11, atol=1e-13)
  assert_trees_close(scanned.opt_state, state.opt_state, rtol=1e-11, atol=1e-13)
  assert_trees_close(
    scanned.cell_state, state.cell_state, rtol=1e-11, atol=1e-13
  )
  assert_trees_close(
    scanned.tstate.tangent, state.tstate.tangent, rtol=1e-11, atol=1e-13
  )
  np.testing.assert_allclose(
    scan_metrics.loss_sum, [m.loss_sum for m in loop_metrics], rtol=1e-11
  )
  np.testing.assert_allclose(scan_metrics.weight_sum, chunk.weights.sum(1))
  # The parameters really moved (the comparison is not vacuous).
  assert np.abs(scanned.params["cell"]["W"] - params["cell"]["W"]).max() > 1e-3


def test_batch_equals_per_example_runs(x64):
  """Batch of B == B single-example runs: per-step cell gradients of the
  batch-mean loss are (1/B) Σ_b of the single-example ones, loss sums add up,
  and with SGD the first update is the mean of the single-example updates;
  with the parameters frozen (lr 0) every example's state and tangent
  trajectory equals its own single-example run."""
  cell = cells.RHN(hidden_size=N)
  est = estimators.make("rtrl", cell)
  params, chunk = make_problem(cell)
  key = jax.random.PRNGKey(0)
  frozen = jax.jit(lambda c: online.frozen_gradients(cell, est, params, c, key))
  grads, metrics = frozen(chunk)
  singles = [frozen(take(chunk, b=b)) for b in range(B)]
  mean_single = sum(g["W"] for g, _ in singles) / B
  np.testing.assert_allclose(grads["W"], mean_single, rtol=1e-11, atol=1e-14)
  np.testing.assert_allclose(
    metrics.loss_sum, sum(m.loss_sum for _, m in singles), rtol=1e-12
  )

  lr = 0.1
  sgd = online.make_online_trainer(cell, est, optax.sgd(lr))
  first = take(chunk, t=0)
  sgd_step, sgd_init = jax.jit(sgd.step), jax.jit(sgd.init, static_argnums=2)
  batch_state, _ = sgd_step(sgd_init(params, key, B), first)
  deltas = []
  for b in range(B):
    one = jax.tree_util.tree_map(lambda a: a[b : b + 1], first)
    s, _ = sgd_step(sgd_init(params, key, 1), one)
    deltas.append(
      jax.tree_util.tree_map(lambda new, old: new - old, s.params, params)
    )
  batch_delta = jax.tree_util.tree_map(
    lambda new, old: new - old, batch_state.params, params
  )
  mean_delta = jax.tree_util.tree_map(lambda *d: sum(d) / B, *deltas)
  assert_trees_close(batch_delta, mean_delta, rtol=1e-10, atol=1e-14)
  assert np.abs(batch_delta["cell"]["W"]).max() > 1e-4

  still = online.make_online_trainer(cell, est, optax.sgd(0.0))
  still_init = jax.jit(still.init, static_argnums=2)
  batch_final, _ = still.run(still_init(params, key, B), chunk)
  for b in range(B):
    single_final, _ = still.run(still_init(params, key, 1), take(chunk, b=b))
    assert_trees_close(
      jax.tree_util.tree_map(lambda a: a[b], batch_final.cell_state),
      jax.tree_util.tree_map(lambda a: a[0], single_final.cell_state),
      rtol=1e-12,
      atol=1e-14,
    )
    np.testing.assert_allclose(
      batch_final.tstate.tangent[b],
      single_final.tstate.tangent[0],
      rtol=1e-11,
      atol=1e-14,
    )


def test_accumulate_steps_updates_every_k_with_mean_exact_gradient(x64):
  """accumulate_steps=3 with SGD: params unchanged after steps 1, 2, 4, 5;
  after step 3 they equal `p0 - lr/3 * Σ_{t<3} dL_t/dθ` (the BPTT gradient:
  exact RTRL for the cell, the exact immediate gradient for the readout);
  step 6 updates again."""
  k, lr = 3, 0.5
  cell = cells.RHN(hidden_size=N)
  params, chunk = make_problem(cell)
  trainer = online.make_online_trainer(
    cell, estimators.make("rtrl", cell), optax.sgd(lr), accumulate_steps=k
  )
  step = jax.jit(trainer.step)
  state = jax.jit(trainer.init, static_argnums=2)(
    params, jax.random.PRNGKey(0), B
  )
  history = []
  for t in range(2 * k):
    state, _ = step(state, take(chunk, t))
    history.append(state.params)

  def same(a, b):
    return all(
      np.array_equal(x, y)
      for x, y in zip(
        jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
      )
    )

  assert same(history[0], params) and same(history[1], params)
  assert not same(history[2], params)
  assert same(history[3], history[2]) and same(history[4], history[2])
  assert not same(history[5], history[2])

  state0 = online.broadcast_state(cell.initial_state(), B)
  first_k = jax.tree_util.tree_map(lambda a: a[:k], chunk)
  reference = jax.jit(lambda c: bptt.bptt_gradient(cell, params, state0, c))(
    first_k
  )
  expected = jax.tree_util.tree_map(
    lambda p, g: p - lr / k * g, params, reference
  )
  # float64 end to end: an accumulator kept in float32 (optax.MultiSteps'
  # default accumulator_dtype) shows up here as ~1e-9 errors.
  assert_trees_close(history[2], expected, rtol=1e-10, atol=1e-13)
