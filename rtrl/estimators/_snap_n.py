"""SnAp-n: the influence kept where a parameter reaches a unit within `n`
steps of the (masked) recurrence, for Lemma-1 cells, in sparse storage.

Column `k n + j` of `W` feeds gate `k` of unit `j`: in one step it reaches
unit `j`'s state rows, and through the recurrence unit `i` after `m + 1`
steps when unit `j` reaches unit `i` in `m` steps of the mask's graph
(`M[j, i]`: `j` feeds `i`). SnAp-n keeps the influence on the pairs

    (i, j) with j reaching i within n - 1 steps
    (`rtrl.cells.recurrent_mask.reachability(mask, n_units, n - 1)`),

for every state row `s`, every row `p` of `W` and every gate `k`, and drops
the rest at every step (Menick et al. 2021). The pattern is static: it is
computed in NumPy once, when the estimator is built, as `E` kept pairs and
the edges `(i', j) -> (i, j)` between kept pairs with `M[i', i]` along
which `H` carries the influence. The influence is a tuple of `S` arrays
`(E, P, K)`, one per state row,

    J[s][e, p, k] ≈ d state[s, i_e] / d W[p, k n + j_e],

the first `n` pairs being `(j, j)` (so `F = hhat ⊗ D` lands in a slice), and
one step is

    J'[s][e] = Σ_t dfds[i_e, s, t] J[t][e]
             + Σ_{edges e' -> e} A[edge, s] J[h][e'] + [e < n] hhat ⊗ D[e, s],
    A[edge, s] = Σ_k' D[i_e, s, k'] W_h[i_e', k' n + i_e],

the `H` terms times `jac.history` (the folded reset), the edge sum a
gather per in-edge slot over static indices (`lax.scan` over the padded
`in_edges`), and the gradient `dL/dW[p, k n + j] = Σ_s Σ_{e: j_e = j}
g[s, i_e] J[s][e, p, k]` a padded gather per column unit.

Memory `S P K E`, time `~ (S^2 E + S edges) P K` per example and step:
`E = n` and `edges <= n` (the self-loops) at order 1, SnAp-1's pattern
and cost; `E = n^2` and `edges = n^3` on a dense recurrence from order 2
on, exact RTRL's. For those two `snap` builds the faster code of `snap1`
and `exact_rtrl`.

SnAp-n is exact once every pair it drops has zero influence: when `n - 1`
steps reach whatever the recurrence ever reaches (order above the mask
graph's diameter; order 2 on a dense recurrence; every order on a
diagonal one). Order 1 is SnAp-1 (`snap1`, the same numbers).

References:
  Menick, Elsen, Evci, Osindero, Simonyan, Graves, "Practical Real Time
  Recurrent Learning with a Sparse Approximation", ICLR 2021 (SnAp-n).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import routing as routing_lib
from rtrl.cells import Cell
from rtrl.cells import StepJacobians
from rtrl.cells import recurrent_mask as recurrent_mask_lib
from rtrl.estimators import _base as base
from rtrl.estimators._exact import exact_rtrl
from rtrl.estimators._snap1_rflo import snap1
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


class SnapPattern(NamedTuple):
  """SnAp-n's static sparsity pattern (NumPy int arrays).

  Attributes:
    unit: (E,) `i_e`, the unit whose state rows pair `e` holds.
    column_unit: (E,) `j_e`, the unit whose columns of `W` pair `e` holds;
      the first `n` pairs are `(j, j)`, `j = 0..n-1`.
    edge_target: (edges,) the pair `e` each edge feeds, sorted.
    edge_source: (edges,) the pair `e'` it reads: same column unit, and
      `M[i_e', i_e]`.
    in_edges: (E, d) the edges into each pair, padded with `edges` (no
      edge) to `d`, the largest in-degree: the layout of the update's
      gathers.
    column_pairs: (n, r) the pairs of each column unit, padded with `E`
      (no pair) to `r`, the largest `|R_j|`: the readout's gather.
  """

  unit: np.ndarray
  column_unit: np.ndarray
  edge_target: np.ndarray
  edge_source: np.ndarray
  in_edges: np.ndarray
  column_pairs: np.ndarray

  @property
  def num_pairs(self) -> int:
    """`E`, the kept `(unit, column unit)` pairs."""
    return int(self.unit.shape[0])

  @property
  def num_edges(self) -> int:
    """The kept pairs' edges along which `H` propagates."""
    return int(self.edge_target.shape[0])


def check_order(order: Any) -> int:
  """`order` if it is an int >= 1.

  Raises:
    ValueError: anything else, naming `order`.
  """
  if (
    isinstance(order, bool)
    or not isinstance(order, (int, np.integer))
    or order < 1
  ):
    raise ValueError(
      "order must be an int >= 1 (SnAp-n keeps the influence a parameter "
      f"has within order steps; 1 is SnAp-1), got {order!r}"
    )
  return int(order)


def snap_pattern(
  recurrent_mask: np.ndarray | None, hidden_size: int, order: int
) -> SnapPattern:
  """The kept pairs and their edges for SnAp-`order` on `recurrent_mask`.

  Args:
    recurrent_mask: `(n, n)` bool, `M[j, i]` True when unit `j` feeds unit
      `i`; None: dense.
    hidden_size: `n`.
    order: SnAp's `n`, an int >= 1.

  Returns:
    The `SnapPattern`: pair `(i, j)` kept when `j` reaches `i` within
    `order - 1` steps.

  Raises:
    ValueError: a bad `order`.
  """
  order = check_order(order)
  n = hidden_size
  feeds = (
    np.ones((n, n), bool)
    if recurrent_mask is None
    else np.asarray(recurrent_mask, bool)
  )
  reach = recurrent_mask_lib.reachability(feeds, n, order - 1)  # [j, i]
  off_diagonal = reach & ~np.eye(n, dtype=bool)
  column_unit, unit = np.nonzero(off_diagonal)  # sorted by column unit
  unit = np.concatenate([np.arange(n), unit]).astype(np.int32)
  column_unit = np.concatenate([np.arange(n), column_unit]).astype(np.int32)
  pair_index = np.full((n, n), -1, np.int64)  # [i, j] -> e
  pair_index[unit, column_unit] = np.arange(unit.shape[0])
  # For each kept pair e = (i, j), every i' feeding i whose (i', j) is kept.
  sources = pair_index[:, column_unit].T  # (E, n): [e, i'] -> (i', j_e)
  valid = (sources >= 0) & feeds[:, unit].T  # M[i', i_e]
  edge_target, feeder = np.nonzero(valid)
  return SnapPattern(
    unit=unit,
    column_unit=column_unit,
    edge_target=edge_target.astype(np.int32),
    edge_source=sources[edge_target, feeder].astype(np.int32),
    in_edges=_padded_groups(edge_target, unit.shape[0]),
    column_pairs=_padded_groups(column_unit, n),
  )


def _padded_groups(group: np.ndarray, num_groups: int) -> np.ndarray:
  """`(num_groups, d)` int32: row `g` lists the indices `x` with
  `group[x] == g` in order, then `len(group)` (none) up to the largest
  group's size `d` (at least 1)."""
  size = np.bincount(group, minlength=num_groups)
  members = np.argsort(group, kind="stable")
  first = np.cumsum(size) - size
  slot = np.arange(group.shape[0]) - first[group[members]]
  padded = np.full((num_groups, max(1, size.max())), group.shape[0], np.int32)
  padded[group[members], slot] = members
  return padded


def _propagate(
  pattern: SnapPattern, influence: tuple, jac: StepJacobians, hidden_row: int
) -> tuple:
  """`H J` on the pattern, one `(E, P, K)` array per state row."""
  n, num_rows, num_gates = jac.D.shape
  rows = range(num_rows)
  direct = jac.history * jac.dfds[pattern.unit]  # (E, S, S)
  target_unit = pattern.unit[pattern.edge_target]
  source_unit = pattern.unit[pattern.edge_source]
  weights = jac.recurrent_weights.reshape(n, num_gates, n)
  through = jac.history * jnp.einsum(
    "esk,ek->es",
    jac.D[target_unit],
    weights[source_unit, :, target_unit],
  )  # (edges, S)
  # The padding slots read pair 0 with coefficient 0.
  through = jnp.concatenate([through, jnp.zeros((1, num_rows), through.dtype)])
  sources = np.append(pattern.edge_source, 0)[pattern.in_edges]  # (E, d)
  carried = influence[hidden_row]

  def add_slot(acc, slot):
    # One in-edge of every pair: a gather of `(E, P, K)` rows, no scatter
    # (XLA:CPU's scatter-add was 10x slower: docs/benchmarks/estimators.md).
    source, coefficient = slot  # (E,), (E, S)
    picked = carried[source]
    return tuple(
      a + coefficient[:, s, None, None] * picked for s, a in enumerate(acc)
    ), None

  start = tuple(
    sum(direct[:, s, t, None, None] * influence[t] for t in rows) for s in rows
  )
  slots = (sources.T, jnp.moveaxis(through[pattern.in_edges], 1, 0))
  return jax.lax.scan(add_slot, start, slots, unroll=8)[0]


def _sparse_snap(
  cell: Cell, pattern: SnapPattern, routing: routing_lib.Routing | None
) -> base.Estimator:
  """SnAp-n on `pattern`, in its sparse storage."""

  def zeros(params):
    p, k, s, _ = base.sizes(cell, params)
    dtype = params["W"].dtype
    return tuple(jnp.zeros((pattern.num_pairs, p, k), dtype) for _ in range(s))

  def update(influence, jac, key):
    del key  # deterministic
    n = cell.hidden_size
    propagated = _propagate(pattern, influence, jac, cell.hidden_row)
    return tuple(
      new.at[:n].add(jac.hhat[None, :, None] * jac.D[:, s, None, :])
      for s, new in enumerate(propagated)
    )

  def by_column_unit(per_pair):
    """`(E, P, K)` -> `dL/dW (P, K n)`: the pairs of each column unit
    summed (a padded gather, no scatter)."""
    padded = jnp.concatenate([per_pair, jnp.zeros_like(per_pair[:1])])
    per_unit = padded[pattern.column_pairs].sum(axis=1)  # (n, P, K)
    return jnp.transpose(per_unit, (1, 2, 0)).reshape(per_unit.shape[1], -1)

  def readout(influence, g):
    return by_column_unit(
      sum(
        g[s][pattern.unit][:, None, None] * influence[s]
        for s in range(len(influence))
      )
    )

  def batch_readout(influences, g):
    # The batch contracted before the column sum: one gather per step.
    return by_column_unit(
      sum(
        jnp.einsum("be,bepk->epk", g[:, s][:, pattern.unit], influences[s])
        for s in range(len(influences))
      )
    )

  return base.build(
    "snap",
    cell,
    zeros,
    update,
    readout,
    implementation="snap",
    routing=routing_lib.resolve(routing),
    jacobians_once=True,
    forget=base.forget_nothing,
    batch_readout=batch_readout,
    random=False,
  )


def snap(
  cell: Cell, *, order: int, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """SnAp-n (Menick et al., "Practical Real Time Recurrent Learning with a
  Sparse Approximation", ICLR 2021) for a Lemma-1 cell, dense or sparse.

  The influence kept where a parameter reaches a unit within `order` steps
  of the cell's (masked) recurrence, the pattern computed once here and
  stored sparsely (`E` kept `(unit, column unit)` pairs, `snap_pattern`).
  Deterministic, biased; exact once `order - 1` steps reach everything the
  recurrence reaches (above the mask graph's diameter; order 2 on a dense
  recurrence; any order on a diagonal one). Two patterns have faster
  code, which `snap` builds (the name stays 'snap', `make`'s;
  `implementation` says which code): order 1 is SnAp-1, `snap1`'s
  per-unit blocks (`'snap1'`); a pattern keeping every `(unit, column
  unit)` pair (every unit reaches every other within `order - 1` steps:
  order >= 2 on a dense recurrence) drops nothing and is exact RTRL's
  dense code (`'exact_rtrl'`). Cost per example and step:
  memory `S P K E`, time `~ (S^2 E + S edges) P K`, with `E` the kept pairs
  (`n` at order 1, up to `n^2`) and `edges` the recurrence's edges between
  them (up to `n^3`, exact RTRL's cost).

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`, with or without `recurrent_mask`.
      A `CustomCell` takes `autodiff_snap1` (order 1) or `autodiff_rtrl`;
      an `LRU` `diagonal_rtrl` (exact at every order).
    order: SnAp's `n`, an int >= 1.
    routing: speed choices (`rtrl.routing.Routing`: `jacobians_once`);
      None: `Routing.auto()`.

  Returns:
    The `Estimator`: `name='snap'`, `implementation='snap'` (`'snap1'` at
    order 1, `'exact_rtrl'` for a full pattern).

  Raises:
    ValueError: `order` not an int >= 1, or a cell not in the Lemma-1 form.
  """
  order = check_order(order)
  base.require_lemma1_cell(
    cell,
    "snap",
    custom_instead="autodiff_snap1 (order 1) or autodiff_rtrl (exact)",
    lru_instead="diagonal_rtrl (SnAp-n of a diagonal recurrence is exact)",
  )
  if order == 1:  # The unit-diagonal pattern: SnAp-1's per-unit blocks.
    return snap1(cell, routing=routing)._replace(name="snap")
  pattern = snap_pattern(cell.recurrent_mask, cell.hidden_size, order)
  if pattern.num_pairs == cell.hidden_size**2:
    # Nothing dropped: exact RTRL, whose dense GEMM beats the gathers (7x
    # at n = 64: docs/benchmarks/estimators.md).
    return exact_rtrl(cell, routing=routing)._replace(name="snap")
  return _sparse_snap(cell, pattern, routing)


def _tangent_floats(cell, input_size, *, order) -> int:
  """`S P K E`, `E` the kept pairs of the cell's pattern."""
  p, k, s, n = dims(cell, input_size)
  pattern = snap_pattern(cell.recurrent_mask, n, order)
  return s * p * k * pattern.num_pairs


def _gemm_flops(cell, input_size, *, order) -> float:
  """`2 (S^2 E + S edges) P K`, the propagation's multiply-adds."""
  p, k, s, n = dims(cell, input_size)
  pattern = snap_pattern(cell.recurrent_mask, n, order)
  return 2 * (s * s * pattern.num_pairs + s * pattern.num_edges) * p * k


SNAP = EstimatorSpec(
  "snap",
  "SnAp-{order}",
  snap,
  # Order >= 2 on a dense recurrence: E = n^2 pairs, n^3 edges (exact
  # RTRL's cost); order 1 is SnAp-1's n^2 / n^2.
  Cost(
    "(S^2 E + S edges) P K",
    "S P K E",
    (4, 3),
    _tangent_floats,
    _gemm_flops,
  ),
)

__all__ = ["SNAP", "SnapPattern", "check_order", "snap", "snap_pattern"]
