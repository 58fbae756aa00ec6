"""SK-RTRL: SnAp-1's exact block-diagonal influence plus a deterministic
rank-r sketch of the rest, with a running bound on the error it makes.

The influence `J = d state / d W` (`S n` state entries by the `P K n`
entries of `W`) is kept as

    J ≈ Ĵ = blockdiag(B) + L Rᵀ,

`B` SnAp-1's per-unit blocks (updated exactly as `rtrl.estimators.snap1`
does), `L` `(S n, r)` and `R` `(P K n, r)` with orthonormal columns. With
`H = H_d + H_o` the step's state Jacobian split into its per-unit diagonal
blocks `H_d` and the rest `H_o`, and `F = hhat ⊗ D`, exact RTRL's
`J' = H J + F` becomes

    blockdiag(B') = H_d blockdiag(B) + F                (SnAp-1, exact)
    L' R'ᵀ       ≈ H L Rᵀ + H_o blockdiag(B)            (the residual)

and the residual's new mass has rank at most `S n`: per unit `j`, the thin
QR `B_jᵀ = Q_j T_j` gives `H_o blockdiag(B) = N Qᵀ` with `N = H_o
blockdiag(T_jᵀ)` `(S n, S n)` and `Q = blockdiag(Q_j)` orthonormal. One
step of the sketch:

  1. pre-projection: `N ≈ N_c V_cᵀ`, its top `c` singular triplets,
     `τ_c` the Frobenius norm of the rest;
  2. the `r + c` right vectors `[R, Q V_c] = Z Θ` (thin QR, `Z`
     orthonormal), so the residual is `C Zᵀ` with the core
     `C = [H L, N_c] Θᵀ` `(S n, r + c)`, exactly;
  3. truncation: `C = U Σ Wᵀ`, `L' = U_r Σ_r`, `R' = Z W_r`, `τ_r` the
     Frobenius norm of the dropped singular values.

Each step drops `η = τ_c + τ_r` in Frobenius norm (`Q`, `Z`, `W` are
orthonormal), so the error `E = J - Ĵ` obeys `E' = H E + (dropped)` and
the certificate

    e' = ρ̄ e + η,    ρ̄ = min(|H|_F, sqrt(|H|_1 |H|_∞)) >= |H|_2,

bounds `|E|_F` at every step. The gradient's error at a step is
`gᵀ E` for `g = dL/dstate`, hence `|ĝ - g_RTRL|_2 <= |g|_2 e`: its bias
(SK-RTRL is deterministic, so bias is all its error) is known as it is
computed (`Estimator.metrics` reports `e` as `'certificate'`).

`ρ̄` is cheap (`O(n^2)`) but loose for a dense `H`: `e` compounds by it
every step, so it is informative where `ρ̄ < 1` (contractive dynamics,
the paper's clipped recurrent weights, short episodes: a reset restarts it
at 0) and valid but astronomically large elsewhere
(docs/benchmarks/sk_rtrl.md).

`r = 0` keeps no sketch: SnAp-1 exactly (`e` then bounds SnAp-1's
error). `r = S n` skips the pre-projection (`c = S n`) and keeps every
singular value: exact RTRL, `e = 0` (Corollary 3 of the paper). Between,
`c` is `preprojection_rank`, by default the paper's
`min(S n, max(4, ⌈r / 4⌉))`.

References:
  "Certified Low-Rank Real-Time Recurrent Learning for Dense Recurrent
  Neural Networks", under review, 2026 (github.com/sonaradarcn/sketched-rtrl,
  MIT), written here from its definition.
  Menick et al., "Practical Real Time Recurrent Learning with a Sparse
  Approximation", ICLR 2021 (SnAp-1, the block-diagonal part).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from rtrl import linalg
from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.cells import StepJacobians
from rtrl.estimators import base
from rtrl.estimators.snap import snap1_unit_jacobian


class SketchedInfluence(NamedTuple):
  """SK-RTRL's tangent, one example.

  Attributes:
    blocks: SnAp-1's per-unit influence, a tuple of `S` arrays `(P, K, n)`
      (`rtrl.estimators.snap`'s layout).
    left: `(S n, r)`, the sketch's state factor `L` (rows `s n + i`).
    right: `(P, K, n, r)`, the sketch's orthonormal parameter factor `R`
      (`W`'s layout, `W[p, k n + j]`, then the rank).
    certificate: `()`, `e >= |J - Ĵ|_F`.
  """

  blocks: tuple
  left: jax.Array
  right: jax.Array
  certificate: jax.Array


def check_sketch_rank(cell: Cell, rank) -> int:
  """`rank` if it is an int in `[0, S n]` (`S n` the cell's state size),
  else a ValueError naming `rank`."""
  state_size = cell.num_state_rows * cell.hidden_size
  if (
    isinstance(rank, bool)
    or not isinstance(rank, int)
    or not 0 <= rank <= state_size
  ):
    raise ValueError(
      f"rank of estimator 'sk_rtrl' must be an int in [0, {state_size}] "
      f"(0: SnAp-1; {state_size} = the state size S n of {cell!r}: exact "
      f"RTRL), got {rank!r}"
    )
  return rank


def append_width(cell: Cell, rank: int, preprojection_rank) -> int:
  """`c`, the columns of each step's new residual the pre-projection keeps:
  all `S n` at full rank (exact); else `preprojection_rank`, or where None
  the paper's `max(4, ⌈r / 4⌉)` (at most `S n`).

  Raises:
    ValueError: `preprojection_rank` not None or an int in `[1, S n]`.
  """
  state_size = cell.num_state_rows * cell.hidden_size
  if preprojection_rank is not None and (
    isinstance(preprojection_rank, bool)
    or not isinstance(preprojection_rank, int)
    or not 1 <= preprojection_rank <= state_size
  ):
    raise ValueError(
      f"preprojection_rank of estimator 'sk_rtrl' must be None or an int "
      f"in [1, {state_size}] (the state size S n of {cell!r}), got "
      f"{preprojection_rank!r}"
    )
  if rank == state_size:
    return state_size
  if preprojection_rank is None:
    return min(state_size, max(4, math.ceil(rank / 4)))
  return preprojection_rank


def snap1_blocks_update(
  blocks: tuple, unit_jacobian: jax.Array, jac: StepJacobians
) -> tuple:
  """SnAp-1's step on the per-unit blocks: `A_j B_j + hhat ⊗ D_j` with
  `unit_jacobian` `(n, S, S)` the `A_j` (as `rtrl.estimators.snap1`)."""
  gates = jnp.transpose(jac.D, (1, 2, 0))  # (S, K, n)
  rows = range(len(blocks))
  return tuple(
    sum(unit_jacobian[:, s, t] * blocks[t] for t in rows)
    + jac.hhat[:, None, None] * gates[s]
    for s in rows
  )


def spectral_norm_bound(matrix: jax.Array) -> jax.Array:
  """`min(|M|_F, sqrt(|M|_1 |M|_∞)) >= |M|_2`, in `O(size)` work."""
  absolute = jnp.abs(matrix)
  frobenius = jnp.sqrt(jnp.sum(matrix * matrix))
  max_column = jnp.max(jnp.sum(absolute, axis=0))
  max_row = jnp.max(jnp.sum(absolute, axis=1))
  return jnp.minimum(frobenius, jnp.sqrt(max_column * max_row))


def off_diagonal_mass(
  blocks: tuple, h_off: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """`H_o blockdiag(B) = N Qᵀ` in factored form.

  Args:
    blocks: SnAp-1's blocks before the step, `S` arrays `(P, K, n)`.
    h_off: `(S n, S n)`, `H` with its per-unit diagonal blocks zeroed.

  Returns:
    `N` `(S n, S n)` (columns `t n + j`) and `Q` `(P, K, n, S)`, unit `j`'s
    orthonormal basis `Q[:, :, j, :]` of its block's rows.
  """
  num_rows = len(blocks)
  p, k, n = blocks[0].shape
  per_unit = jnp.stack(blocks, axis=-1).transpose(2, 0, 1, 3)  # (n, P, K, S)
  basis, coords = jnp.linalg.qr(per_unit.reshape(n, p * k, num_rows))
  # B_j = T_jᵀ Q_jᵀ, so column (t, j) of N is Σ_s H_o[:, (s, j)] T_j[t, s].
  h_units = h_off.reshape(num_rows * n, num_rows, n)  # [a, s, j]
  mass = jnp.einsum("asj,jts->atj", h_units, coords)
  basis = basis.reshape(n, p, k, num_rows).transpose(1, 2, 0, 3)
  return mass.reshape(num_rows * n, num_rows * n), basis


def sketch_update(
  left: jax.Array,
  right: jax.Array,
  h: jax.Array,
  mass: jax.Array,
  basis: jax.Array,
  rank: int,
  append: int,
  routing: routing_lib.Routing,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`L' R'ᵀ ≈ H L Rᵀ + N Qᵀ`, rank `rank`: returns `(L', R', η)`, `η`
  the Frobenius norm of what was dropped (pre-projection + truncation).

  Shapes: `left (S n, r)`, `right (P, K, n, r)`, `h (S n, S n)`, `mass
  (S n, S n)`, `basis (P, K, n, S)`."""
  state_size = h.shape[0]
  p, k, n, num_rows = basis.shape
  if append == state_size:  # nothing pre-projected: V_c = I
    kept, projection, dropped_c = mass, None, jnp.zeros((), mass.dtype)
  else:
    u, s, vt = linalg.small_svd(mass, routing=routing)
    kept = u[:, :append] * s[:append]
    projection = vt[:append].T  # (S n, c), rows t n + j
    dropped_c = jnp.sqrt(jnp.sum(s[append:] ** 2))
  if projection is None:
    eye = jnp.eye(n, dtype=basis.dtype)
    new_right = jnp.einsum("pkjt,jJ->pkjtJ", basis, eye)
  else:
    per_unit = projection.reshape(num_rows, n, append)  # [t, j, c]
    new_right = jnp.einsum("pkjt,tjc->pkjc", basis, per_unit)
  columns = jnp.concatenate(
    [right.reshape(-1, rank), new_right.reshape(-1, append)], axis=1
  )
  orthonormal, theta = jnp.linalg.qr(columns)  # (P K n, r + c)
  core = linalg.matmul(
    jnp.concatenate([linalg.matmul(h, left), kept], axis=1), theta.T
  )
  u, s, vt = linalg.small_svd(core, routing=routing)
  new_left = u[:, :rank] * s[:rank]
  new_right = linalg.matmul(orthonormal, vt[:rank].T).reshape(p, k, n, rank)
  dropped_r = jnp.sqrt(jnp.sum(s[rank:] ** 2))
  return new_left, new_right, dropped_c + dropped_r


def sk_rtrl(
  cell: Cell,
  *,
  rank: int,
  preprojection_rank: int | None = None,
  routing: routing_lib.Routing | None = None,
) -> base.Estimator:
  """SK-RTRL ("Certified Low-Rank Real-Time Recurrent Learning for Dense
  Recurrent Neural Networks", under review, 2026) for a Lemma-1 cell.

  The influence as SnAp-1's exact per-unit blocks plus a deterministic
  rank-`rank` sketch `L Rᵀ` of the residual (the paths SnAp-1 drops),
  recompressed every step by a pre-projected two-sided SVD, with a
  running certificate `e >= |J - Ĵ|_F` (module docstring: the equations).
  Deterministic and biased for `0 <= rank < S n`; its gradient error at a
  step is at most `|dL/dstate|_2 e` (`metrics(tstate)['certificate']` is
  `e`; it compounds by a bound on `|H|_2` and is informative only on
  contractive dynamics). `rank=0` is `snap1`, `rank = S n` (`n` for RNN/RHN/GRU, `2 n` for
  the LSTM) exact RTRL with `e = 0`. Its unbiased counterpart at a rank is
  r-OK (`ok`, an optimal unbiased Kronecker sum), its biased one r-B-OK.

  Cost per example and step (`P = input_size + n + 1`, `K` gates, `S`
  state rows, `c` the pre-projection rank, `max(4, ⌈r / 4⌉)` by
  default): memory `S P K n + P K n r + S n r
  ~ (S + r) K n^2`; time `S^2 P K n + P K n (r + c)^2 + (S n)^3
  ~ K n^2 r^2 + S^3 n^3` (SnAp-1's step, the QR and the recompression of
  `R`, the SVD of the `(S n, S n)` new residual; at `rank = S n`, `~ n^4`,
  exact RTRL's order).

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell` (dense or with a `recurrent_mask`).
    rank: an int in `[0, S n]`, `S n` the cell's state size.
    preprojection_rank: `c`, how many directions of each step's new
      residual (rank up to `S n`) enter the truncation; None: the paper's
      `max(4, ⌈r / 4⌉)`. Larger is closer to exact RTRL at a cost
      `~ (r + c)^2` (docs/benchmarks/sk_rtrl.md: at `r = 16`, `c = 16`
      aligns far better than the default 4). Ignored at `rank = S n`.
    routing: speed choices (`rtrl.routing.Routing`: `jacobians_once`, the
      small SVDs); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='sk_rtrl'`), with `metrics(tstate) ->
    {'certificate': e}` per example.

  Raises:
    ValueError: a cell not in the Lemma-1 form, `rank` not an int in
      `[0, S n]`, or `preprojection_rank` not None or an int in `[1, S n]`.
  """
  base.require_lemma1_cell(cell, "sk_rtrl")
  rank = check_sketch_rank(cell, rank)
  routing = routing_lib.resolve(routing)
  num_rows, n = cell.num_state_rows, cell.hidden_size
  append = append_width(cell, rank, preprojection_rank)
  # Per-unit diagonal blocks of the (S n, S n) H, rows and columns s n + j.
  unit_diagonal = jnp.kron(jnp.ones((num_rows, num_rows)), jnp.eye(n)) > 0

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    dtype = params["W"].dtype
    return SketchedInfluence(
      blocks=tuple(jnp.zeros((p, k, n), dtype) for _ in range(s)),
      left=jnp.zeros((s * n, rank), dtype),
      right=jnp.zeros((p, k, n, rank), dtype),
      certificate=jnp.zeros((), dtype),
    )

  def update(tangent: SketchedInfluence, jac, key):
    del key  # deterministic
    h = tangents.recurrent_jacobian_t(jac, cell.hidden_row).T
    h_off = jnp.where(unit_diagonal, 0.0, h)
    mass, basis = off_diagonal_mass(tangent.blocks, h_off)
    blocks = snap1_blocks_update(
      tangent.blocks, snap1_unit_jacobian(jac, cell.hidden_row), jac
    )
    if rank == 0:
      left, right = tangent.left, tangent.right
      dropped = jnp.sqrt(jnp.sum(mass * mass))  # |N Qᵀ|_F, all of it
    else:
      left, right, dropped = sketch_update(
        tangent.left, tangent.right, h, mass, basis, rank, append, routing
      )
    certificate = spectral_norm_bound(h) * tangent.certificate + dropped
    return SketchedInfluence(blocks, left, right, certificate)

  def readout(tangent: SketchedInfluence, g):
    per_unit = sum(g[s] * tangent.blocks[s] for s in range(num_rows))
    if rank > 0:
      coefficients = linalg.matmul(g.reshape(-1), tangent.left)  # (r,)
      per_unit = per_unit + linalg.matmul(tangent.right, coefficients)
    return per_unit.reshape(per_unit.shape[0], -1)

  def forget(tangent, keep):
    # Everything, so a folded reset gives the fresh tangent's bits.
    (tangent,) = base.zeroed_where_reset(keep, tangent)
    return tangent

  def metrics(tangent: SketchedInfluence):
    return {"certificate": tangent.certificate}

  return base.build(
    "sk_rtrl",
    cell,
    zeros,
    update,
    readout,
    implementation="sk_rtrl",
    routing=routing,
    jacobians_once=True,
    forget=forget,
    metrics=metrics,
  )


__all__ = [
  "SketchedInfluence",
  "append_width",
  "check_sketch_rank",
  "off_diagonal_mass",
  "sk_rtrl",
  "sketch_update",
  "snap1_blocks_update",
  "spectral_norm_bound",
]
