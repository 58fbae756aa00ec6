"""SnAp-1 and RFLO: the influence kept only where a parameter reaches a unit
within one step, for Lemma-1 cells.

In a Lemma-1 cell, column `k n + j` of `W` feeds gate `k` of unit `j` only,
so within one step it reaches the state rows of unit `j` and nothing else:
`F = hhat ⊗ D` is zero outside those entries. Both estimators keep the
influence on exactly that pattern, one `(S, P, K)` block per unit,

    J[s, p, k, j] ≈ d state[s, j] / d W[p, k n + j],

stored as a tuple of `S` arrays `(P, K, n)`, one per state row (so the
gradient `Σ_s g[s, j] J[s][:, :, j]` is `W`'s layout with no transpose), and
differ only in the `(S, S)` per-unit block
`A_j` that propagates it, `J'[:, :, :, j] = A_j J[:, :, :, j] + hhat ⊗ D_j`:

  * SnAp-1 (Menick et al. 2021): `A_j` is unit `j`'s diagonal block of the
    full state Jacobian `H`, the direct path plus the path through the
    recurrent weights' own diagonal `W_h[j, k n + j]`. Exact when `W_h` is
    diagonal (then `H` is block-diagonal and nothing is dropped).
  * RFLO (Murray 2019): `A_j` is the direct path only, `dfds[j]` (the leak of
    a leaky RNN, the carry `1 - t` of an RHN, the cell path of an LSTM, the
    update gate of a GRU); every path through `W_h` is dropped. Exact when
    `W_h = 0`. RFLO's random feedback is a readout option
    (`rtrl.readout.feedback_alignment`), not part of the trace.

The pattern is the unit's: every state row of unit `j` keeps every column
feeding unit `j`. For one-row cells (RNN, RHN, GRU) that is exactly the
pattern of the one-step Jacobian, which the autodiff SnAp-1 of a
`CustomCell` reads; for the LSTM it is larger by the output gate's columns
on the `c` row (the gate reaches `c` only through `h`, after two steps):
the unit pattern keeps that path, the strict one-step pattern drops it.

Both are deterministic and biased; memory `S P K n ~ K n^2` and time
`~ S^2 K n^2` per example, UORO's order.

References:
  Menick, Elsen, Evci, Osindero, Simonyan, Graves, "Practical Real Time
  Recurrent Learning with a Sparse Approximation", ICLR 2021 (SnAp-n).
  Murray, "Local online learning in recurrent networks with random
  feedback", eLife 2019 (RFLO).
"""

from __future__ import annotations

from collections.abc import Callable
import warnings

import jax
import jax.numpy as jnp

from rtrl import routing as routing_lib
from rtrl.cells import Cell
from rtrl.cells import StepJacobians
from rtrl.estimators import _base as base
from rtrl.estimators._autodiff import autodiff_snap1
from rtrl.estimators._lru_exact import diagonal_rtrl
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


def snap1_unit_jacobian(jac: StepJacobians, hidden_row: int) -> jax.Array:
  """`(n, S, S)` diagonal blocks of `H`: `dfds[j] + [t = hidden_row]
  Σ_k D[j, s, k] W_h[j, k n + j]` (the unit's own recurrent weights)."""
  n, num_rows, num_gates = jac.D.shape
  own_weights = jnp.diagonal(
    jac.recurrent_weights.reshape(n, num_gates, n), axis1=0, axis2=2
  )  # (K, n)
  through_gates = jnp.einsum("jsk,kj->js", jac.D, own_weights)  # (n, S)
  is_hidden = jnp.arange(num_rows) == hidden_row
  return jac.history * (
    jac.dfds
    + jnp.where(is_hidden[None, None, :], through_gates[:, :, None], 0.0)
  )


def rflo_unit_jacobian(jac: StepJacobians, hidden_row: int) -> jax.Array:
  """`(n, S, S)`: the direct path `dfds` alone."""
  del hidden_row
  return jac.history * jac.dfds


def unit_blocks_update(
  influence: tuple, unit_jacobian: jax.Array, jac: StepJacobians
) -> tuple:
  """One step on the per-unit influence blocks, `A_j J_j + hhat ⊗ D_j`.

  Args:
    influence: a tuple of `S` arrays `(P, K, n)`, one per state row.
    unit_jacobian: `(n, S, S)`, the `A_j` (`snap1_unit_jacobian`,
      `rflo_unit_jacobian`).
    jac: the step's `StepJacobians`.

  Returns:
    The new influence, in the same layout.
  """
  gates = jnp.transpose(jac.D, (1, 2, 0))  # (S, K, n)
  # One `(P, K, n)` array per state row, each new row S (at most 2)
  # elementwise products: stacking the rows into one array made XLA:CPU
  # transpose the whole influence inside the step (LSTM-128, batch 16).
  rows = range(len(influence))
  return tuple(
    sum(unit_jacobian[:, s, t] * influence[t] for t in rows)
    + jac.hhat[:, None, None] * gates[s]
    for s in rows
  )


def _unit_diagonal(
  name: str,
  cell: Cell,
  unit_jacobian: Callable[[StepJacobians, int], jax.Array],
  routing: routing_lib.Routing | None,
) -> base.Estimator:
  """An estimator whose influence is kept on the one-step pattern and
  propagated by `unit_jacobian(jac, hidden_row) -> (n, S, S)`."""

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    return tuple(jnp.zeros((p, k, n), params["W"].dtype) for _ in range(s))

  def update(influence, jac, key):
    del key  # deterministic
    return unit_blocks_update(
      influence, unit_jacobian(jac, cell.hidden_row), jac
    )

  def readout(influence, g):
    per_unit = sum(
      g[s] * influence[s]  # (P, K, n)
      for s in range(len(influence))
    )
    return per_unit.reshape(per_unit.shape[0], -1)

  # No `batch_readout`: contracting the batch inside one einsum per state
  # row was slower on XLA:CPU (docs/benchmarks/routing.md).
  return base.build(
    name,
    cell,
    zeros,
    update,
    readout,
    implementation=name,
    routing=routing_lib.resolve(routing),
    jacobians_once=True,
    forget=base.forget_nothing,
    random=False,
  )


def snap1(
  cell: Cell, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """SnAp-1 (Menick et al., "Practical Real Time Recurrent Learning with a
  Sparse Approximation", ICLR 2021) for a Lemma-1 cell.

  The influence kept where a parameter reaches a unit within one step,
  propagated by the unit's own diagonal block of `H`. Deterministic,
  biased; exact when the recurrent weights are diagonal. Cost per example
  and step: memory `S P K n ~ K n^2`, time `~ S^2 K n^2`.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`. A `CustomCell` takes
      `autodiff_snap1`; an `LRU` `diagonal_rtrl` (its SnAp-1 is exact).
    routing: speed choices (`rtrl.routing.Routing`: `jacobians_once`);
      None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='snap1'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form.
  """
  base.require_lemma1_cell(
    cell,
    "snap1",
    custom_instead="autodiff_snap1",
    lru_instead="diagonal_rtrl (SnAp-1 of a diagonal recurrence is exact)",
  )
  return _unit_diagonal("snap1", cell, snap1_unit_jacobian, routing)


def rflo(
  cell: Cell, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """RFLO's eligibility trace (Murray, "Local online learning in recurrent
  networks with random feedback", eLife 2019) for a Lemma-1 cell.

  SnAp-1's pattern propagated through the cell's direct state path only
  (every path through the recurrent weights dropped). Deterministic,
  biased; exact when there are no recurrent weights. RFLO's random
  feedback is a readout option (`rtrl.readout.feedback_alignment`). Cost
  per example and step: memory `S P K n ~ K n^2`, time `~ S^2 K n^2`.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell` (a general step function does not
      separate its direct path from the recurrent one).
    routing: speed choices (`rtrl.routing.Routing`: `jacobians_once`);
      None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='rflo'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form.

  Warns:
    UserWarning: a cell without a direct state path (`Cell.has_direct_path`
      False: the tanh `RNN`, Flax's `SimpleCell` without `residual`), on
      which the trace is the current step's term only.
  """
  base.require_lemma1_cell(cell, "rflo")
  if not cell.has_direct_path:
    warnings.warn(
      f"RFLO is memoryless on {cell!r}: its unit map has no direct state "
      f"path (dfds = 0), so the eligibility trace is the current step's "
      f"term only; RFLO is defined on a leaky RNN, "
      f"rtrl.cells.LeakyRNN(hidden_size, leak=...)",
      UserWarning,
      stacklevel=2,
    )
  return _unit_diagonal("rflo", cell, rflo_unit_jacobian, routing)


def _tangent_floats(cell, input_size) -> int:
  p, k, s, n = dims(cell, input_size)
  return s * p * k * n


def _gemm_flops(cell, input_size) -> float:
  """No GEMM: the step's own `[x, h, 1] @ W` (a GEMV) and the element-wise
  propagation `A_j J_j + hhat ⊗ D_j`, memory-bound, so a ratio to a GEMM
  roofline overstates how far it is from its own floor."""
  p, k, s, n = dims(cell, input_size)
  return 2 * p * k * n + 2 * (s * s + s) * p * k * n


_UNIT_BLOCKS = Cost("n^2", "n^2", (2, 2), _tangent_floats, _gemm_flops)
SNAP1 = EstimatorSpec(
  "snap1",
  "SnAp-1",
  snap1,
  _UNIT_BLOCKS,
  lru=diagonal_rtrl,
  custom=autodiff_snap1,
)
RFLO = EstimatorSpec("rflo", "RFLO", rflo, _UNIT_BLOCKS)

__all__ = [
  "RFLO",
  "SNAP1",
  "rflo",
  "rflo_unit_jacobian",
  "snap1",
  "snap1_unit_jacobian",
  "unit_blocks_update",
]
