"""SnAp-n (`rtrl.estimators.snap(cell, order=n)`) on dense and sparse
Lemma-1 cells, in float64.

* Order 1 is today's SnAp-1 (`snap1`), dense and sparse, resets included.
* Order above the recurrence graph's diameter is exact RTRL (order 2 on a
  dense recurrence, where `snap` builds exact RTRL's code), and every
  order is on a diagonal recurrence.
* On a sparse 6-unit ring RNN the deviation from BPTT falls as the order
  grows and vanishes at order 6 (the ring's diameter is 5): the shape of
  braintrace's published ladder.
* The influence holds exactly the kept entries, `Σ_j |R_j| S P K`.
"""

import jax
import numpy as np
import pytest
import rtrl_problems

from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl.cells import recurrent_mask
from rtrl.estimators import _snap_n as snap_n

N, INPUT, OUTPUTS, B, T = 5, 3, 4, 2, 8


_problem = rtrl_problems.pattern_problem  # N = 5 units: the cells' size


_per_step = rtrl_problems.frozen_cell_gradients


def _ring(n, self_loops=False):
  """`(n, n)` bool: unit `j` feeds unit `j + 1 mod n` (diameter `n - 1`)."""
  mask = np.zeros((n, n), bool)
  mask[np.arange(n), (np.arange(n) + 1) % n] = True
  return mask | np.eye(n, dtype=bool) if self_loops else mask


SPARSE = {"recurrent_density": 0.4, "mask_seed": 3}


def _sparse(cell, order):
  """SnAp-`order` in the sparse storage, whatever the pattern (`snap`
  builds faster code for order 1 and for a full pattern)."""
  pattern = snap_n.snap_pattern(cell.recurrent_mask, cell.hidden_size, order)
  return snap_n._sparse_snap(cell, pattern, None)  # pylint: disable=protected-access


@pytest.mark.parametrize(
  "cell_name, sparsity",
  [
    ("rnn", {}),
    ("rhn", {}),
    ("lstm", {}),
    ("gru", {}),
    ("lstm", SPARSE),
    ("gru", SPARSE),
  ],
)
def test_order_one_equals_snap1(cell_name, sparsity, x64):
  """`snap` builds `snap1`'s code at order 1; the sparse storage on the
  order-1 pattern gives the same gradients."""
  cell = cells.make(cell_name, N, **sparsity)
  public = estimators.snap(cell, order=1)
  assert (public.name, public.implementation) == ("snap", "snap1")
  sparse = _sparse(cell, 1)
  assert sparse.implementation == "snap"
  params, chunk = _problem(cell)
  np.testing.assert_allclose(
    _per_step(cell, sparse, params, chunk),
    _per_step(cell, estimators.snap1(cell), params, chunk),
    rtol=1e-12,
    atol=1e-15,
  )


def _chain(n, self_loops=False):
  """`(n, n)` bool: unit `j` feeds unit `j + 1` (no wrap: diameter
  `n - 1`, and unit `j` never reaches a unit below it)."""
  mask = np.eye(n, k=1, dtype=bool)
  return mask | np.eye(n, dtype=bool) if self_loops else mask


def _two_rings():
  """Units 0-2 and 3-4 in two separate rings (diameter 2)."""
  mask = np.zeros((N, N), bool)
  mask[[0, 1, 2], [1, 2, 0]] = True
  mask[[3, 4], [4, 3]] = True
  return mask


@pytest.mark.parametrize(
  "cell_name, mask, order",
  [
    ("lstm", _chain(N), N),
    ("gru", _chain(N, self_loops=True), N),
    ("rhn", _two_rings(), 3),
  ],
)
def test_order_above_diameter_is_exact_rtrl(cell_name, mask, order, x64):
  """The kept pattern (not every pair: some units never reach others)
  holds every nonzero influence, at every step."""
  cell = cells.make(cell_name, N, recurrent_mask=mask)
  estimator = estimators.make("snap", cell, order=order)
  assert estimator.implementation == "snap"  # the sparse storage
  params, chunk = _problem(cell, seed=1)
  exact = _per_step(cell, estimators.exact_rtrl(cell), params, chunk)
  np.testing.assert_allclose(
    _per_step(cell, estimator, params, chunk), exact, rtol=1e-12, atol=1e-15
  )
  # ...and one order less is not: the test can fail.
  below = _per_step(cell, estimators.snap(cell, order=order - 1), params, chunk)
  assert rtrl_problems.rel_err(below, exact) > 1e-6


@pytest.mark.parametrize(
  "cell_name, mask, order",
  [
    ("rnn", None, 2),
    ("rhn", None, 2),
    ("lstm", None, 3),
    ("gru", None, 2),
    ("gru", _ring(N), N),  # diameter N - 1: every unit reaches every other
  ],
)
def test_a_full_pattern_is_exact_rtrl(cell_name, mask, order, x64):
  """Every pair kept: `snap` builds exact RTRL's dense code, and the
  sparse storage on the same pattern gives the same gradients."""
  cell = cells.make(cell_name, N, recurrent_mask=mask)
  public = estimators.snap(cell, order=order)
  assert (public.name, public.implementation) == ("snap", "exact_rtrl")
  assert snap_n.snap_pattern(cell.recurrent_mask, N, order).num_pairs == N**2
  sparse = _sparse(cell, order)
  params, chunk = _problem(cell, seed=1)
  np.testing.assert_allclose(
    _per_step(cell, sparse, params, chunk),
    _per_step(cell, estimators.exact_rtrl(cell), params, chunk),
    rtol=1e-12,
    atol=1e-15,
  )


@pytest.mark.parametrize("cell_name", ["rnn", "lstm"])
def test_every_order_is_exact_on_a_diagonal_recurrence(cell_name, x64):
  cell = cells.make(cell_name, N, recurrent_mask=np.eye(N, dtype=bool))
  params, chunk = _problem(cell, seed=2)
  exact = _per_step(cell, estimators.exact_rtrl(cell), params, chunk)
  for order in (1, 2, 3):
    np.testing.assert_allclose(
      _per_step(cell, _sparse(cell, order), params, chunk),
      exact,
      rtol=1e-12,
      atol=1e-15,
    )


def test_deviation_from_bptt_falls_with_order_on_a_ring(x64):
  """A 6-unit ring RNN, T = 8 (braintrace's ladder setting): the relative
  deviation of the summed gradient from BPTT's falls at every order and is
  rounding at order 6 (the ring's diameter is 5)."""
  n = 6
  cell = cells.RNN(n, recurrent_mask=_ring(n))
  params, chunk = rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=8,
    resets=[(0, None)],
    seed=1,
    random_biases=True,
  )
  deviations = []
  for order in range(1, 7):
    total, reference = rtrl_problems.summed_online_and_bptt(
      cell, _sparse(cell, order), params, chunk
    )
    deviations.append(rtrl_problems.rel_err(total["W"], reference["W"]))
  assert all(a > 3 * b for a, b in zip(deviations[:4], deviations[1:5])), (
    deviations
  )
  assert deviations[4] > 1e-8, deviations  # order 5 still drops a pair
  assert deviations[5] < 1e-12, deviations


@pytest.mark.parametrize("cell_name", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_influence_holds_exactly_the_kept_entries(cell_name, order):
  cell = cells.make(cell_name, 8, recurrent_density=0.15, mask_seed=1)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  tangent = (
    _sparse(cell, order)
    .init(params, cell.initial_state(), jax.random.PRNGKey(1))
    .tangent
  )
  reach = recurrent_mask.reachability(cell.recurrent_mask, 8, order - 1)
  p, k, s = INPUT + 8 + 1, cell.num_gates, cell.num_state_rows
  assert sum(a.size for a in tangent) == reach.sum() * s * p * k
  pattern = snap_n.snap_pattern(cell.recurrent_mask, 8, order)
  kept = np.zeros((8, 8), bool)
  kept[pattern.column_unit, pattern.unit] = True
  np.testing.assert_array_equal(kept, reach)
  assert pattern.num_pairs == reach.sum() < 64  # sparse, not n^2
  np.testing.assert_array_equal(pattern.unit[:8], np.arange(8))
  np.testing.assert_array_equal(pattern.column_unit[:8], np.arange(8))


def test_edges_follow_the_mask():
  """Edge `(i', j) -> (i, j)` exactly where both pairs are kept and
  `M[i', i]`."""
  mask = recurrent_mask.random_pattern(7, 0.2, seed=4)
  pattern = snap_n.snap_pattern(mask, 7, 3)
  pairs = set(zip(pattern.unit.tolist(), pattern.column_unit.tolist()))
  expected = {
    ((i2, j), (i, j))
    for (i, j) in pairs
    for i2 in range(7)
    if mask[i2, i] and (i2, j) in pairs
  }
  got = {
    (
      (pattern.unit[src], pattern.column_unit[src]),
      (pattern.unit[dst], pattern.column_unit[dst]),
    )
    for src, dst in zip(pattern.edge_source, pattern.edge_target)
  }
  assert got == expected
  assert np.all(np.diff(pattern.edge_target) >= 0)  # sorted for segment_sum


@pytest.mark.parametrize("order", [0, -1, 1.5, True, "2", None])
def test_bad_order_raises(order):
  cell = cells.RNN(4)
  with pytest.raises(ValueError, match="order must be an int >= 1"):
    estimators.snap(cell, order=order)
  with pytest.raises(ValueError, match="order must be an int >= 1"):
    estimators.make("snap", cell, order=order)


def test_make_needs_order_and_a_lemma1_cell():
  with pytest.raises(ValueError, match="'snap' needs order"):
    estimators.make("snap", cells.RNN(4))
  with pytest.raises(ValueError, match="diagonal_rtrl"):
    estimators.snap(cells.LRU(4), order=2)
  with pytest.raises(ValueError, match="autodiff_snap1"):
    estimators.snap(cells.as_custom(cells.RNN(4)), order=2)
  sparse = cells.RNN(4, recurrent_mask=_chain(4))
  for cell, order, implementation in [
    (sparse, 2, "snap"),
    (sparse, 1, "snap1"),
    (cells.RNN(4), 2, "exact_rtrl"),  # every pair kept
  ]:
    estimator = estimators.make("snap", cell, order=order)
    assert (estimator.name, estimator.implementation) == (
      "snap",
      implementation,
    )
    assert estimator.folds_reset


def test_batch_gradient_equals_the_summed_per_example_gradients(x64):
  cell = cells.make("lstm", N, **SPARSE)
  estimator = estimators.snap(cell, order=2)
  params, chunk = _problem(cell, seed=4)
  cell_params = params["cell"]
  keys = jax.random.split(jax.random.PRNGKey(0), B)
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    cell_params, cell.initial_state(), keys
  )
  state = online.broadcast_state(cell.initial_state(), B)
  step = jax.vmap(estimator.step(cell_params))
  for x in chunk.inputs[:4]:
    tstate, state = step(tstate, state, x)
  errors = jax.tree_util.tree_map(
    lambda s: jax.random.normal(jax.random.PRNGKey(2), s.shape, s.dtype), state
  )
  per_example = jax.vmap(estimator.gradient, in_axes=(None, 0, 0))(
    cell_params, tstate, errors
  )["W"].sum(0)
  assert np.abs(np.asarray(per_example)).max() > 1e-3  # not vacuous
  np.testing.assert_allclose(
    estimator.batch_gradient(cell_params, tstate, errors)["W"],
    per_example,
    rtol=1e-12,
    atol=1e-14,
  )
