"""BPTT/TBPTT: one window == full BPTT; shorter windows cut the gradient but
carry the state; the TBPTT trainer makes one update per window."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rtrl_problems
from rtrl_problems import rel_err

from rtrl import bptt
from rtrl import cells
from rtrl import online

N, INPUT, OUTPUTS, B, T = 4, 3, 4, 2, 8


def make_problem(cell, seed=0, boundary_reset=False):
  """float64 params and a chunk; example 1 resets mid-way at t=2. With
  `boundary_reset`, every example also resets at t = T/2."""
  resets = [(0, None), (2, 1)] + ([(T // 2, None)] if boundary_reset else [])
  return rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=resets,
    seed=seed,
  )


def halves(chunk):
  return (
    jax.tree_util.tree_map(lambda a: a[: T // 2], chunk),
    jax.tree_util.tree_map(lambda a: a[T // 2 :], chunk),
  )


@pytest.mark.parametrize("cls", [cells.RHN, cells.LSTM], ids=["rhn", "lstm"])
def test_tbptt_one_window_equals_full_bptt(cls, x64):
  """TBPTT with horizon == sequence length (one window) == full BPTT, for
  the cell and the readout, in float64."""
  cell = cls(hidden_size=N)
  params, chunk = make_problem(cell)
  state0 = online.broadcast_state(cell.initial_state(), B)

  @jax.jit
  def compute(params, chunk):
    return (
      bptt.tbptt_gradients(cell, params, state0, chunk, T),
      bptt.bptt_gradient(cell, params, state0, chunk),
    )

  windows, full = compute(params, chunk)
  assert windows["cell"]["W"].shape == (1,) + params["cell"]["W"].shape
  for path in (("cell", "W"), ("readout", "w"), ("readout", "b")):
    got, want = windows[path[0]][path[1]][0], full[path[0]][path[1]]
    assert got.dtype == jnp.float64
    assert rel_err(got, want) < 1e-12


def test_short_horizon_cuts_gradient_and_carries_state(x64):
  """Horizon T/2 (LSTM, tuple state): window 1 == BPTT of the first half;
  window 2 == BPTT of the second half started from the first half's final
  state (carried) and differs from starting fresh; the windows' sum differs
  from full BPTT (the gradient is cut)."""
  cell = cells.LSTM(hidden_size=N)
  params, chunk = make_problem(cell)
  state0 = online.broadcast_state(cell.initial_state(), B)
  first, second = halves(chunk)

  @jax.jit
  def compute(params, chunk):
    windows = bptt.tbptt_gradients(cell, params, state0, chunk, T // 2)
    full = bptt.bptt_gradient(cell, params, state0, chunk)
    _, (carried, _) = bptt.unrolled_loss(cell, params, state0, first)
    g1 = bptt.bptt_gradient(cell, params, state0, first)
    g2 = bptt.bptt_gradient(cell, params, carried, second)
    g2_fresh = bptt.bptt_gradient(cell, params, state0, second)
    return windows, full, g1, g2, g2_fresh, carried

  windows, full, g1, g2, g2_fresh, carried = compute(params, chunk)
  assert isinstance(carried, tuple) and np.abs(carried[1]).max() > 1e-3
  w = windows["cell"]["W"]
  assert w.shape == (2,) + params["cell"]["W"].shape
  assert rel_err(w[0], g1["cell"]["W"]) < 1e-12
  assert rel_err(w[1], g2["cell"]["W"]) < 1e-12
  assert rel_err(windows["readout"]["w"][1], g2["readout"]["w"]) < 1e-12
  assert rel_err(w[1], g2_fresh["cell"]["W"]) > 1e-3
  assert rel_err(w.sum(0), full["cell"]["W"]) > 1e-3
  # The readout gradient is immediate, so no truncation affects it.
  assert rel_err(windows["readout"]["w"].sum(0), full["readout"]["w"]) < 1e-12


def test_short_horizon_equals_bptt_when_all_reset_at_boundary(x64):
  """If every example starts a new sequence at the window boundary, cutting
  the gradient there loses nothing: Σ windows == full BPTT."""
  cell = cells.RHN(hidden_size=N)
  params, chunk = make_problem(cell, boundary_reset=True)
  state0 = online.broadcast_state(cell.initial_state(), B)
  windows, full = jax.jit(
    lambda p, c: (
      bptt.tbptt_gradients(cell, p, state0, c, T // 2),
      bptt.bptt_gradient(cell, p, state0, c),
    )
  )(params, chunk)
  assert rel_err(windows["cell"]["W"].sum(0), full["cell"]["W"]) < 1e-12


def test_tbptt_trainer_one_update_per_window(x64):
  """`make_tbptt_trainer(truncation=T/2).run` with SGD over 2 windows ==
  by hand: p1 = p0 - lr * grad(window-1 mean loss), then window 2 from the
  carried state with p1; the final cell state is carried; step counts steps;
  metrics are per step."""
  lr, h = 0.3, T // 2
  cell = cells.RHN(hidden_size=N)
  params, chunk = make_problem(cell)
  trainer = bptt.make_tbptt_trainer(cell, optax.sgd(lr), truncation=h)
  state0 = online.broadcast_state(cell.initial_state(), B)
  first, second = halves(chunk)

  @jax.jit
  def by_hand(params):
    def mean_loss(p, s, c):
      total, (final, _) = bptt.unrolled_loss(cell, p, s, c)
      return total / h, final

    g1, s1 = jax.grad(mean_loss, has_aux=True)(params, state0, first)
    p1 = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, g1)
    g2, s2 = jax.grad(mean_loss, has_aux=True)(p1, s1, second)
    p2 = jax.tree_util.tree_map(lambda p, g: p - lr * g, p1, g2)
    return p2, s2

  final, metrics = trainer.run(trainer.init(params, None, B), chunk)
  p2, s2 = by_hand(params)
  assert int(final.step) == T
  assert metrics.loss_sum.shape == (T,)
  for a, b in zip(
    jax.tree_util.tree_leaves(final.params), jax.tree_util.tree_leaves(p2)
  ):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(final.cell_state, s2, rtol=1e-12, atol=1e-14)
  assert np.abs(final.params["cell"]["W"] - params["cell"]["W"]).max() > 1e-4
