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

  1. pre-projection: `N ≈ N_c V_cᵀ` with `N_c = N V_c`, `V_c` `(S n, c)`
     the top-`c` right singular basis of `N` (`preprojection='svd'`: the
     paper's exact SVD) or an approximation of it
     (`'subspace_iteration'`: `subspace_iterations` steps of subspace
     iteration warm-started from the previous step's `V_c`), `τ_c = |N -
     N_c V_cᵀ|_F` computed directly, so exact for any `V_c`;
  2. the `r + c` right vectors `X = [R, Q V_c] = Z Θ + Δ` by CholeskyQR2
     on their `(r + c)^2` Gram matrix (`Z` orthonormal to working
     precision; the paper: a Householder QR), so the residual is
     `C Zᵀ + A Δᵀ` with `A = [H L, N_c]` and the core `C = A Θᵀ`
     `(S n, r + c)`; `τ_m = |A|_F |Δ|_F >= |A Δᵀ|_F`, `Δ` measured (it is
     at rounding level unless columns are (nearly) dependent);
  3. truncation: `W_r` the top `r` eigenvectors of `Cᵀ C` `(r + c)^2`,
     `L' = C W_r`, `R' = Z W_r`, `τ_r = |C - C W_r W_rᵀ|_F` computed
     directly.

Each step drops at most `η = τ_c + τ_m + τ_r` in Frobenius norm (`Q`, `Z`
are orthonormal, and each `τ` is measured, not read off a factorisation,
so a poor `V_c` or eigensolver loosens the bound but never breaks it); the
error `E = J - Ĵ` obeys `E' = H E + (dropped)` and the certificate

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
singular value, by a Householder QR and an SVD of the core (the paper's
step, exact for any column dependency): exact RTRL, `e = 0` (Corollary 3
of the paper). Between,
`c` is `preprojection_rank`, by default the paper's
`min(S n, max(4, ⌈r / 4⌉))`.

This file holds the estimator (its tangent and step);
`_sk_rtrl_options.py` its checked hyper-parameters, `_sk_rtrl_sketch.py`
the linear algebra of steps 1-3 and of `ρ̄`.

References:
  "Certified Low-Rank Real-Time Recurrent Learning for Dense Recurrent
  Neural Networks", under review, 2026 (github.com/sonaradarcn/sketched-rtrl,
  MIT), written here from its definition.
  Menick et al., "Practical Real Time Recurrent Learning with a Sparse
  Approximation", ICLR 2021 (SnAp-1, the block-diagonal part).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from rtrl import linalg
from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import _base as base
from rtrl.estimators._sk_rtrl_options import PREPROJECTIONS
from rtrl.estimators._sk_rtrl_options import Sketch
from rtrl.estimators._sk_rtrl_options import append_width
from rtrl.estimators._sk_rtrl_options import check_sketch
from rtrl.estimators._sk_rtrl_options import check_sketch_rank
from rtrl.estimators._sk_rtrl_options import check_subspace_iterations
from rtrl.estimators._sk_rtrl_sketch import exact_sketch_update
from rtrl.estimators._sk_rtrl_sketch import fixed_start
from rtrl.estimators._sk_rtrl_sketch import off_diagonal_mass
from rtrl.estimators._sk_rtrl_sketch import sketch_update
from rtrl.estimators._sk_rtrl_sketch import spectral_norm_bound
from rtrl.estimators._snap1_rflo import snap1_unit_jacobian
from rtrl.estimators._snap1_rflo import unit_blocks_update
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


class SketchedInfluence(NamedTuple):
  """SK-RTRL's tangent, one example.

  Attributes:
    blocks: SnAp-1's per-unit influence, a tuple of `S` arrays `(P, K, n)`
      (`rtrl.estimators.snap1`'s layout).
    left: `(S n, r)`, the sketch's state factor `L` (rows `s n + i`).
    right: `(P, K, n, r)`, the sketch's orthonormal parameter factor `R`
      (`W`'s layout, `W[p, k n + j]`, then the rank).
    certificate: `()`, `e >= |J - Ĵ|_F`.
    preprojection: `(S n, c)`, the last step's pre-projection basis `V_c`,
      the next step's subspace-iteration start (zeros: a fixed random
      start); `(S n, 0)` where nothing is pre-projected (rank 0 or `S n`,
      or `c = S n`).
  """

  blocks: tuple
  left: jax.Array
  right: jax.Array
  certificate: jax.Array
  preprojection: jax.Array


def _residual_update(sketch: Sketch, start, routing):
  """`(tangent, h, mass, basis) -> (left, right, dropped, projection)`:
  the sketch's step at its rank (none at 0, exact at `S n`)."""

  def update(tangent: SketchedInfluence, h, mass, basis):
    projection = tangent.preprojection
    if sketch.rank == 0:  # SnAp-1: all of `N Qᵀ` dropped.
      dropped = jnp.sqrt(jnp.sum(mass * mass))
      return tangent.left, tangent.right, dropped, projection
    if sketch.rank == sketch.state_size:
      left, right = exact_sketch_update(
        tangent.left, tangent.right, h, mass, basis
      )
      return left, right, jnp.zeros((), h.dtype), projection
    if sketch.preprojects and sketch.preprojection == "subspace_iteration":
      # A fresh (or reset: all zero) tangent starts from the fixed basis.
      fresh = jnp.all(projection == 0)
      projection = jnp.where(fresh, start.astype(h.dtype), projection)
    left, right, dropped, new_projection = sketch_update(
      tangent.left,
      tangent.right,
      h,
      mass,
      basis,
      sketch.rank,
      projection if sketch.preprojects else None,
      sketch.iterations,
      routing,
      exact_preprojection=sketch.preprojection == "svd",
    )
    return (
      left,
      right,
      dropped,
      (projection if new_projection is None else new_projection),
    )

  return update


def _update(cell: Cell, sketch: Sketch, routing: routing_lib.Routing):
  """SK-RTRL's tangent step `(tangent, jac, key) -> tangent`."""
  num_rows, n = cell.num_state_rows, cell.hidden_size
  start = fixed_start(
    sketch.state_size, sketch.append if sketch.preprojects else 0
  )
  residual = _residual_update(sketch, start, routing)
  # Per-unit diagonal blocks of the (S n, S n) H, rows and columns s n + j.
  unit_diagonal = jnp.kron(jnp.ones((num_rows, num_rows)), jnp.eye(n)) > 0

  def update(tangent: SketchedInfluence, jac, key):
    del key  # deterministic
    h = tangents.recurrent_jacobian_t(jac, cell.hidden_row).T
    mass, basis = off_diagonal_mass(
      tangent.blocks, jnp.where(unit_diagonal, 0.0, h)
    )
    blocks = unit_blocks_update(
      tangent.blocks, snap1_unit_jacobian(jac, cell.hidden_row), jac
    )
    left, right, dropped, projection = residual(tangent, h, mass, basis)
    # A zero H forgets the old error exactly, even an overflowed (inf) bound.
    rho = spectral_norm_bound(h)
    carried = jnp.where(rho > 0, rho * tangent.certificate, 0.0)
    return SketchedInfluence(blocks, left, right, carried + dropped, projection)

  return update


def sk_rtrl(
  cell: Cell,
  *,
  rank: int,
  preprojection_rank: int | None = None,
  preprojection: Literal["subspace_iteration", "svd"] = "subspace_iteration",
  subspace_iterations: int = 2,
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
  contractive dynamics). `rank=0` is `snap1`, `rank = S n` (`n` for
  RNN/RHN/GRU, `2 n` for the LSTM) exact RTRL with `e = 0`. Its unbiased
  counterpart at a rank is r-OK (`ok`, an optimal unbiased Kronecker sum),
  its biased one r-B-OK.

  Cost per example and step (`P = input_size + n + 1`, `K` gates, `S`
  state rows, `c` the pre-projection rank, `max(4, ⌈r / 4⌉)` by
  default): memory `S P K n + P K n r + S n r + S n c
  ~ (S + r) K n^2`; time `S^2 P K n + P K n (r + c)^2 + (S n)^2 c
  ~ K n^2 (r + c)^2` (SnAp-1's step, the Gram passes over the right
  factor, the subspace iteration; small `(r + c)^2` factorisations), and
  `(S n)^3` more with `preprojection='svd'`; at `rank = S n`, `~ n^4`,
  exact RTRL's order. Measured (docs/benchmarks/sk_rtrl.md): at RHN-64,
  batch 8, 0.2-0.5x exact RTRL's step at `r <= 4`, 0.6-1x at `r = 16`,
  3-6x r-OK's at the same rank.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell` (dense or with a `recurrent_mask`).
    rank: an int in `[0, S n]`, `S n` the cell's state size.
    preprojection_rank: `c`, how many directions of each step's new
      residual (rank up to `S n`) enter the truncation, None or an int in
      `[1, S n]`; None: the paper's `max(4, ⌈r / 4⌉)`. Larger is closer
      to exact RTRL at a cost `~ (r + c)^2` (docs/benchmarks/sk_rtrl.md: at
      `r = 16`, `c = 16` aligns far better than the default 4). Ignored at
      `rank = S n`.
    preprojection: `'subspace_iteration'` or `'svd'`. How the top-`c`
      directions are found: `'svd'` is the paper's step, an exact SVD of
      each step's `(S n, S n)` new residual; `'subspace_iteration'` runs
      `subspace_iterations` steps warm-started from the previous step's
      basis (docs/benchmarks/sk_rtrl.md measures both).
    subspace_iterations: steps of subspace iteration per step with
      `preprojection='subspace_iteration'`, an int >= 0. Any number keeps
      the certificate valid (the dropped mass is measured, not assumed);
      more is tighter, at `~ (S n)^2 c` each.
    routing: speed choices (`rtrl.routing.Routing`: `jacobians_once`, the
      small SVDs); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='sk_rtrl'`), with `metrics(tstate) ->
    {'certificate': e}` per example.

  Raises:
    ValueError: a cell not in the Lemma-1 form, or an argument out of its
      range (named).
  """
  base.require_lemma1_cell(cell, "sk_rtrl")
  sketch = check_sketch(
    cell, rank, preprojection_rank, preprojection, subspace_iterations
  )
  routing = routing_lib.resolve(routing)
  kept_basis = sketch.append if sketch.preprojects else 0

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    dtype = params["W"].dtype
    return SketchedInfluence(
      blocks=tuple(jnp.zeros((p, k, n), dtype) for _ in range(s)),
      left=jnp.zeros((s * n, sketch.rank), dtype),
      right=jnp.zeros((p, k, n, sketch.rank), dtype),
      certificate=jnp.zeros((), dtype),
      preprojection=jnp.zeros((s * n, kept_basis), dtype),
    )

  def readout(tangent: SketchedInfluence, g):
    per_unit = sum(g[s] * tangent.blocks[s] for s in range(len(g)))
    if sketch.rank > 0:
      coefficients = linalg.matmul(g.reshape(-1), tangent.left)  # (r,)
      per_unit = per_unit + linalg.matmul(tangent.right, coefficients)
    return per_unit.reshape(per_unit.shape[0], -1)

  def forget(tangent, keep):
    # Everything, so a folded reset gives the fresh tangent's bits.
    (tangent,) = base.zeroed_where_reset(keep, tangent)
    return tangent

  return base.build(
    "sk_rtrl",
    cell,
    zeros,
    _update(cell, sketch, routing),
    readout,
    implementation="sk_rtrl",
    routing=routing,
    jacobians_once=True,
    forget=forget,
    metrics=lambda tangent: {"certificate": tangent.certificate},
    random=False,
  )


def _tangent_floats(cell, input_size, *, rank, preprojection_rank=None, **_):
  """SnAp-1's blocks, `L`, `R`, `V_c` and the certificate."""
  p, k, s, n = dims(cell, input_size)
  sketch = check_sketch(cell, rank, preprojection_rank, PREPROJECTIONS[0], 0)
  kept = sketch.append if sketch.preprojects else 0
  return s * p * k * n + (p * k * n + s * n) * rank + s * n * kept + 1


def _gemm_flops(cell, input_size, *, rank, preprojection_rank=None, **_):
  """`H L`, and `R`'s recompression by the truncation's right vectors (the
  QR and the SVDs are LAPACK, left out)."""
  p, k, s, n = dims(cell, input_size)
  c = check_sketch(cell, rank, preprojection_rank, PREPROJECTIONS[0], 0).append
  return rank * 2 * (s * n) ** 2 + 2 * p * k * n * (rank + c) * rank


SK_RTRL = EstimatorSpec(
  "sk_rtrl",
  "{rank}-SK-RTRL",
  sk_rtrl,
  # Not in the OK paper's Table 1: the (S n)^3 factorisation of each
  # step's new residual, n^2 r^2 for the sketch; memory (S + r) K n^2.
  Cost("n^3 + r^2 n^2", "r n^2", (3, 2), _tangent_floats, _gemm_flops),
)


__all__ = [
  "PREPROJECTIONS",
  "SK_RTRL",
  "Sketch",
  "SketchedInfluence",
  "append_width",
  "check_sketch",
  "check_sketch_rank",
  "check_subspace_iterations",
  "sk_rtrl",
]
