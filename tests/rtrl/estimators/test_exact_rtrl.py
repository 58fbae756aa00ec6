"""Exact RTRL equals BPTT (float64, rel. error < 1e-9) for RNN, RHN, LSTM over
20 steps, batch 3, with resets in the middle at different times per example."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rtrl_problems
from rtrl_problems import rel_err

from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import online

N, INPUT, OUTPUTS, B, T = 5, 3, 4, 3, 20
CELL_CLASSES = [cells.RNN, cells.RHN, cells.LSTM, cells.GRU]
IDS = ["rnn", "rhn", "lstm", "gru"]
# (t, b) where example b starts a new sequence: different times per example,
# example 1 does not flag t=0 (the initial state is fresh anyway).
RESETS = [(0, 0), (11, 0), (14, 1), (0, 2), (5, 2), (9, 2), (17, 2)]


def make_problem(cell, seed=0):
  """float64 params (random biases) and a time-major chunk with resets."""
  return rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=RESETS,
    seed=seed,
    keep_probability=0.75,
    random_biases=True,
  )


def hand_unrolled_loss(cell, params, chunk):
  """Σ_t mean_b weight * CE, by a plain Python loop over time that calls
  `cell.step` (vmapped over the batch) and resets with a NumPy mask."""
  resets = np.asarray(chunk.resets)
  step = jax.vmap(cell.step, in_axes=(None, 0, 0))
  fresh = jax.tree_util.tree_map(
    lambda a: jnp.stack([a] * B), cell.initial_state()
  )
  state = fresh
  total = 0.0
  for t in range(T):
    state = jax.tree_util.tree_map(
      lambda f, s: jnp.where(resets[t][:, None], f, s), fresh, state
    )
    state = step(params["cell"], state, chunk.inputs[t])
    h = jax.vmap(cell.output)(state)
    logits = h @ params["readout"]["w"] + params["readout"]["b"]
    nll = -jnp.take_along_axis(
      jax.nn.log_softmax(logits), chunk.targets[t][:, None], axis=1
    )[:, 0]
    total = total + jnp.sum(chunk.weights[t] * nll) / B
  return total


@pytest.mark.parametrize("cls", CELL_CLASSES, ids=IDS)
def test_exact_rtrl_equals_bptt(cls, x64):
  """RTRL (frozen_gradients, summed over time) == jax.grad through
  `bptt.unrolled_loss` == jax.grad through a hand-written Python unroll;
  per step, RTRL's gradient at t == BPTT's gradient of L_t alone."""
  cell = cls(hidden_size=N)
  est = estimators.make("rtrl", cell)
  params, chunk = make_problem(cell)
  concrete = chunk  # the hand unroll branches on resets in Python
  state0 = online.broadcast_state(cell.initial_state(), B)

  @jax.jit
  def compute(params, chunk):
    rtrl_steps, metrics = online.frozen_gradients(
      cell, est, params, chunk, jax.random.PRNGKey(1)
    )
    full = bptt.bptt_gradient(cell, params, state0, chunk)
    hand = jax.grad(lambda p: hand_unrolled_loss(cell, p, concrete))(params)
    no_reset = bptt.bptt_gradient(
      cell, params, state0, chunk._replace(resets=jnp.zeros_like(chunk.resets))
    )

    def grad_of_step(mask):  # dL_t/dθ for L_t alone, by BPTT
      masked = chunk._replace(weights=chunk.weights * mask[:, None])
      return bptt.bptt_gradient(cell, params, state0, masked)["cell"]["W"]

    per_step = jax.vmap(grad_of_step)(jnp.eye(T))
    loss = bptt.unrolled_loss(cell, params, state0, chunk)[0]
    return rtrl_steps["W"], metrics, full, hand, no_reset, per_step, loss

  rtrl_steps, metrics, full, hand, no_reset, per_step, loss = compute(
    params, chunk
  )
  assert rtrl_steps.dtype == jnp.float64
  assert rtrl_steps.shape == (T,) + params["cell"]["W"].shape
  rtrl_sum = rtrl_steps.sum(0)
  assert rel_err(rtrl_sum, full["cell"]["W"]) < 1e-9
  assert rel_err(rtrl_sum, hand["cell"]["W"]) < 1e-9
  assert rel_err(full["cell"]["W"], hand["cell"]["W"]) < 1e-9
  assert rel_err(full["readout"]["w"], hand["readout"]["w"]) < 1e-9
  assert rel_err(rtrl_steps, per_step) < 1e-9
  # Per-step metrics: Σ_t loss_sum / B is the unrolled loss.
  np.testing.assert_allclose(metrics.loss_sum.sum() / B, loss, rtol=1e-12)
  np.testing.assert_allclose(metrics.weight_sum, chunk.weights.sum(1))
  # The resets matter: ignoring them gives a clearly different gradient.
  assert rel_err(no_reset["cell"]["W"], full["cell"]["W"]) > 1e-3


def test_tangent_is_reset_and_contract_shapes(x64):
  """A reset zeroes the tangent but keeps the key; `gradient` has the params'
  tree structure; the first step's tangent is exactly `dh_1/dW = hhat ⊗ D`
  and `gradient` contracts it with `dL/dh`."""
  cell = cells.RHN(hidden_size=N)
  est = estimators.make("rtrl", cell)
  assert est.name == "rtrl"
  params, chunk = make_problem(cell)
  w, x, g = params["cell"]["W"], chunk.inputs[0, 0], jnp.arange(1.0, N + 1)

  @jax.jit
  def compute(w):
    ts = est.init({"W": w}, cell.initial_state(), jax.random.PRNGKey(7))
    ts1, _ = est.step({"W": w})(ts, cell.initial_state(), x)
    jw = jax.jacfwd(lambda w: cell.step({"W": w}, cell.initial_state(), x))(w)
    grads = est.gradient({"W": w}, ts1, g)
    return ts, ts1, est.reset(ts1), jw, grads

  ts, ts1, reset, jw, grads = compute(w)  # jw: (n, P, K n)
  assert not np.any(np.asarray(ts.tangent))
  assert np.abs(np.asarray(ts1.tangent)).max() > 1e-3
  p_dim = w.shape[0]
  # (S n, K, n, P) with S = 1 for RHN -> (n, P, K n), jw's layout.
  tangent = np.asarray(ts1.tangent).reshape(N, -1, p_dim)
  np.testing.assert_allclose(
    np.transpose(tangent, (0, 2, 1)), jw, rtol=1e-12, atol=1e-14
  )
  assert not np.any(np.asarray(reset.tangent))
  np.testing.assert_array_equal(reset.key, ts1.key)
  assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(
    params["cell"]
  )
  np.testing.assert_allclose(
    grads["W"], np.einsum("i,ipq->pq", g, jw), rtol=1e-12, atol=1e-14
  )
