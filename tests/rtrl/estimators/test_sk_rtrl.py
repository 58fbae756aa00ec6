"""SK-RTRL on Lemma-1 cells, in float64: its two ends, its certificate.

* rank 0 is SnAp-1 and rank `S n` exact RTRL (certificate exactly 0), on
  sequences with resets, batched (vmap) and scanned.
* On random problems, the certificate bounds what the paper says it bounds:
  the influence's error `|J - Ĵ|_F`, hence each step's gradient error
  `|ĝ - g_RTRL|_2 <= |dL/dstate|_2 e`.
* A bad rank is a ValueError naming `rank`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rtrl_problems

from rtrl import cells
from rtrl import estimators
from rtrl import online

N, INPUT, OUTPUTS, B, T = 5, 3, 4, 2, 10
RESETS = [(0, None), (6, 1)]


def _per_step(cell, estimator, params, chunk):
  grads, _ = online.frozen_gradients(
    cell, estimator, params, chunk, jax.random.PRNGKey(1)
  )
  return np.asarray(grads["W"])


# Dense, and a sparse recurrence (half the recurrent weights kept).
@pytest.mark.parametrize(
  "cell_name, sparsity",
  [("rnn", {}), ("lstm", {}), ("gru", {}), ("rnn", {"recurrent_density": 0.5})],
)
def test_rank_zero_is_snap1_and_full_rank_is_exact_rtrl(
  cell_name, sparsity, x64
):
  cell = cells.make(cell_name, N, **sparsity)
  params, chunk = rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=RESETS,
    seed=0,
    random_biases=True,
  )
  full = cell.num_state_rows * N
  snap1 = _per_step(cell, estimators.snap1(cell), params, chunk)
  exact = _per_step(cell, estimators.exact_rtrl(cell), params, chunk)
  np.testing.assert_allclose(
    _per_step(cell, estimators.sk_rtrl(cell, rank=0), params, chunk),
    snap1,
    rtol=1e-13,
    atol=1e-15,
  )
  np.testing.assert_allclose(
    _per_step(cell, estimators.make("sk_rtrl", cell, rank=full), params, chunk),
    exact,
    rtol=1e-10,
    atol=1e-12,
  )
  # ...and in between, neither: the sketch keeps some of what SnAp-1 drops.
  between = _per_step(cell, estimators.sk_rtrl(cell, rank=2), params, chunk)
  assert rtrl_problems.rel_err(between, exact) > 1e-4
  assert rtrl_problems.rel_err(between, exact) < rtrl_problems.rel_err(
    snap1, exact
  )


def _dense_sketch(tangent):
  """`Ĵ` `(P, K, n, S n)` from SK-RTRL's tangent."""
  dense = jnp.einsum("pkjr,ar->pkja", tangent.right, tangent.left)
  units = jnp.arange(tangent.blocks[0].shape[2])
  for s, block in enumerate(tangent.blocks):
    dense = dense.at[:, :, units, s * units.size + units].add(block)
  return dense


def _dense_exact(tangent):
  """exact RTRL's `(S n, K, n, P)` influence as `(P, K, n, S n)`."""
  return jnp.transpose(tangent, (3, 1, 2, 0))


def _run_both(
  cell,
  rank,
  params,
  xs,
  gs,
  resets,
  preprojection_rank=None,
  subspace_iterations=2,
  start=None,
  preprojection="subspace_iteration",
):
  """Per step: `(|J - Ĵ|_F, e, |ĝ - g|_2, |dL/dstate|_2)` for one example,
  exact RTRL and SK-RTRL run side by side on the same states (`start`: the
  pre-projection's first start `(S n, c)` in place of the fixed one)."""
  sketch = estimators.sk_rtrl(
    cell,
    rank=rank,
    preprojection_rank=preprojection_rank,
    subspace_iterations=subspace_iterations,
    preprojection=preprojection,
  )
  exact = estimators.exact_rtrl(cell)
  state0 = cell.initial_state()
  key = jax.random.PRNGKey(0)
  sketch_state = sketch.init(params, state0, key)
  if start is not None:
    tangent = sketch_state.tangent._replace(preprojection=start)
    sketch_state = sketch_state._replace(tangent=tangent)
  init = (sketch_state, exact.init(params, state0, key), state0)

  def body(carry, inputs):
    x, g, reset = inputs
    sk_state, ex_state, state = carry
    state = jax.tree_util.tree_map(
      lambda a, b: jnp.where(reset, b, a), state, state0
    )
    sk_state, new_state = sketch.step(params)(sk_state, state, x, reset)
    ex_state, _ = exact.step(params)(ex_state, state, x, reset)
    error = _dense_exact(ex_state.tangent) - _dense_sketch(sk_state.tangent)
    dloss = cell.rows_to_state(g)
    grad_error = (
      sketch.gradient(params, sk_state, dloss)["W"]
      - exact.gradient(params, ex_state, dloss)["W"]
    )
    out = (
      jnp.sqrt(jnp.sum(error**2)),
      sketch.metrics(sk_state)["certificate"],
      jnp.sqrt(jnp.sum(grad_error**2)),
      jnp.sqrt(jnp.sum(g**2)),
    )
    return (sk_state, ex_state, new_state), out

  _, out = jax.lax.scan(body, init, (xs, gs, resets))
  return out


@pytest.mark.parametrize("cell_name", ["rnn", "lstm", "gru"])
# (rank, preprojection_rank): the default c = 4, and c = 1, which drops
# most of each step's new residual before the truncation.
@pytest.mark.parametrize("rank, preprojection", [(1, None), (3, 1)])
def test_certificate_bounds_the_error_on_random_problems(
  cell_name, rank, preprojection, x64
):
  cell = cells.make(cell_name, N)
  steps = 14
  resets = jnp.zeros((steps,), bool).at[0].set(True).at[9].set(True)
  run = jax.jit(
    lambda params, xs, gs: _run_both(
      cell, rank, params, xs, gs, resets, preprojection
    )
  )
  for seed in range(3):
    params, xs, gs = rtrl_problems.make_example_problem(
      cell, INPUT, steps, seed=seed
    )
    # Larger recurrent weights for one seed: H expanding, not contracting.
    if seed == 2:
      params = {"W": params["W"] * 2.0}
    influence_error, certificate, grad_error, g_norm = jax.device_get(
      run(params, xs, gs)
    )
    slack = 1e-10 * (1 + certificate)
    assert np.all(influence_error <= certificate + slack), (
      seed,
      influence_error,
      certificate,
    )
    assert np.all(grad_error <= g_norm * certificate + slack), seed
    # The bound is not vacuous: the sketch does drop mass here.
    assert influence_error.max() > 1e-6
    assert np.all(certificate[[0, 9]] == 0), "a reset starts it afresh"


# A poor pre-projection basis, kept for every step (no subspace
# iteration): one direction repeated, and large non-orthonormal columns.
@pytest.mark.parametrize("start_kind", ["repeated", "scaled_gaussian"])
def test_certificate_bounds_the_error_with_a_poor_preprojection(
  start_kind, x64
):
  cell = cells.RNN(N)
  steps, rank, append = 12, 1, 2
  params, xs, gs = rtrl_problems.make_example_problem(cell, INPUT, steps)
  if start_kind == "repeated":
    start = jnp.ones((N, append)) / np.sqrt(N)
  else:
    start = 3.0 * jax.random.normal(jax.random.PRNGKey(5), (N, append))
  run = lambda iterations, start: jax.device_get(
    _run_both(
      cell,
      rank,
      params,
      xs,
      gs,
      jnp.zeros((steps,), bool),  # no reset: the start is never replaced
      preprojection_rank=append,
      subspace_iterations=iterations,
      start=start,
    )
  )
  error, certificate, grad_error, g_norm = run(0, start)
  slack = 1e-10 * (1 + certificate)
  assert np.all(error <= certificate + slack), (error, certificate)
  assert np.all(grad_error <= g_norm * certificate + slack)
  assert error.max() > 1e-6
  # Subspace iteration from the same start tightens it.
  _, iterated, _, _ = run(2, start)
  assert iterated[-1] < certificate[-1]


@pytest.mark.parametrize("cell_name", ["rnn", "lstm"])
def test_the_svd_preprojection_is_the_converged_subspace_iteration(
  cell_name, x64
):
  """`preprojection='svd'` (the paper's step) keeps its certificate, and
  subspace iteration converges to it: with enough iterations the per-step
  gradients agree."""
  cell = cells.make(cell_name, N)
  steps = 10
  params, chunk = rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=steps,
    resets=RESETS,
    seed=3,
  )
  hparams = dict(rank=2, preprojection_rank=1)
  svd = _per_step(
    cell,
    estimators.sk_rtrl(cell, preprojection="svd", **hparams),
    params,
    chunk,
  )
  iterated = _per_step(
    cell,
    estimators.sk_rtrl(cell, subspace_iterations=300, **hparams),
    params,
    chunk,
  )
  assert rtrl_problems.rel_err(iterated, svd) < 1e-6
  example, xs, gs = rtrl_problems.make_example_problem(cell, INPUT, steps)
  error, certificate, grad_error, g_norm = jax.device_get(
    _run_both(
      cell,
      2,
      example,
      xs,
      gs,
      jnp.zeros((steps,), bool).at[0].set(True),
      preprojection_rank=1,
      preprojection="svd",
    )
  )
  slack = 1e-10 * (1 + certificate)
  assert np.all(error <= certificate + slack) and error.max() > 1e-6
  assert np.all(grad_error <= g_norm * certificate + slack)


def test_preprojection_must_be_svd_or_subspace_iteration():
  with pytest.raises(ValueError, match="preprojection of estimator 'sk_rtrl'"):
    estimators.sk_rtrl(cells.RNN(N), rank=1, preprojection="exact")


def test_subspace_iterations_must_be_a_non_negative_int():
  for bad in (-1, 1.0, True, None):
    with pytest.raises(ValueError, match="subspace_iterations"):
      estimators.sk_rtrl(cells.RNN(N), rank=1, subspace_iterations=bad)


def test_certificate_is_zero_at_full_rank_and_bounds_snap1(x64):
  cell = cells.LSTM(N)
  params, xs, gs = rtrl_problems.make_example_problem(cell, INPUT, 8)
  resets = jnp.zeros((8,), bool).at[0].set(True)
  full = cell.num_state_rows * N
  run = lambda rank: jax.device_get(
    _run_both(cell, rank, params, xs, gs, resets)
  )
  error, certificate, _, _ = run(full)
  assert np.all(certificate == 0)
  assert error.max() < 1e-12
  error, certificate, _, _ = run(0)
  assert np.all(error <= certificate + 1e-12) and error.max() > 1e-3


def test_metrics_are_per_example_and_vmap_over_a_batch(x64):
  cell = cells.RNN(N)
  params, chunk = rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=3,
    steps=4,
    resets=[(0, None)],
  )
  estimator = estimators.make("sk_rtrl", cell, rank=2)
  assert estimators.snap1(cell).metrics is None
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    params["cell"], cell.initial_state(), jax.random.split(jax.random.key(0), 3)
  )
  state = online.broadcast_state(cell.initial_state(), 3)
  for t in range(4):
    tstate, state = online.step_resetting(
      estimator, params["cell"], tstate, state, chunk.inputs[t], chunk.resets[t]
    )
  certificates = jax.vmap(estimator.metrics)(tstate)["certificate"]
  assert certificates.shape == (3,)
  assert np.all(np.asarray(certificates) > 0)
  assert estimator.implementation == "sk_rtrl" and estimator.folds_reset


@pytest.mark.parametrize("rank", [-1, 6, 1.5, True, "2", None])
def test_rank_outside_zero_to_state_size_raises(rank):
  cell = cells.RNN(N)  # state size 5
  with pytest.raises(ValueError, match=r"rank.*\[0, 5\]"):
    estimators.make("sk_rtrl", cell, rank=rank)
  with pytest.raises(ValueError, match="rank"):
    estimators.sk_rtrl(cell, rank=rank)


@pytest.mark.parametrize("preprojection_rank", [0, 6, 2.0, True])
def test_preprojection_rank_outside_one_to_state_size_raises(
  preprojection_rank,
):
  with pytest.raises(ValueError, match=r"preprojection_rank.*\[1, 5\]"):
    estimators.sk_rtrl(
      cells.RNN(N), rank=2, preprojection_rank=preprojection_rank
    )


def test_lstm_rank_counts_both_state_rows():
  estimators.sk_rtrl(cells.LSTM(N), rank=2 * N)
  with pytest.raises(ValueError, match=rf"rank.*\[0, {2 * N}\]"):
    estimators.sk_rtrl(cells.LSTM(N), rank=2 * N + 1)


def test_needs_rank_and_a_lemma1_cell():
  with pytest.raises(ValueError, match="needs rank"):
    estimators.make("sk_rtrl", cells.RNN(N))
  with pytest.raises(ValueError, match="Lemma-1"):
    estimators.sk_rtrl(cells.LRU(N), rank=1)


def test_a_zero_jacobian_clears_even_an_overflowed_certificate():
  """`H = 0` (no recurrent weights): the old error is forgotten exactly,
  so an infinite bound (float32 overflow on a long sequence) becomes 0,
  never `0 * inf = nan`."""
  cell = cells.RNN(N)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  params = {"W": params["W"].at[INPUT : INPUT + N].set(0.0)}
  estimator = estimators.sk_rtrl(cell, rank=2)
  state = cell.initial_state()
  tstate = estimator.init(params, state, jax.random.PRNGKey(0))
  tangent = tstate.tangent._replace(certificate=jnp.asarray(jnp.inf))
  tstate, _ = estimator.step(params)(
    tstate._replace(tangent=tangent), state, jnp.ones((INPUT,)), False
  )
  assert float(estimator.metrics(tstate)["certificate"]) == 0.0
