"""SK-RTRL's linear algebra (`rtrl.estimators.sk_rtrl`: the equations): the
residual's new mass `N Qᵀ` in factored form, its pre-projection by subspace
iteration, the CholeskyQR2 merge of the right factors, the truncation of
the core, one sketch step at rank `r < S n` and its exact full-rank
counterpart, and the certificate's bound on `|H|_2`. Each step measures
what it drops (`τ_c`, `τ_m`, `τ_r`), so the certificate holds whatever the
accuracy of its factorisations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import linalg
from rtrl import routing as routing_lib


def fixed_start(state_size: int, append: int) -> np.ndarray:
  """A fixed orthonormal `(S n, c)` start for the subspace iteration
  (Gaussian, seed 0): generic, so no direction of `N` is missed by
  construction."""
  gaussian = np.random.default_rng(0).standard_normal((state_size, append))
  return np.linalg.qr(gaussian)[0]


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
  # `mass` goes on to a batched QR or SVD: not beside the QR's `basis`
  # (two batched LAPACK calls at once can deadlock: `linalg.after`).
  mass = linalg.after(mass, basis)
  basis = basis.reshape(n, p, k, num_rows).transpose(1, 2, 0, 3)
  return mass.reshape(num_rows * n, num_rows * n), basis


def preproject(
  mass: jax.Array, start: jax.Array, iterations: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`N ≈ N_c V_cᵀ` by subspace iteration from `start`: `(N_c, V_c, τ_c)`.

  `iterations` steps `V <- orth(Nᵀ N V)` (a Householder QR, which completes
  the basis where `N` has rank below `c`); `τ_c = |N - N V_c V_cᵀ|_F` is
  computed directly, so it is the exact dropped mass for any `V_c` (even a
  non-orthonormal `start` at `iterations = 0`): `V_c` only decides how
  tight the certificate is, never whether it holds.

  Args:
    mass: `N` `(S n, S n)`.
    start: `(S n, c)`, e.g. the previous step's `V_c`.
    iterations: how many subspace-iteration steps, `>= 0`.
  """
  projection = start
  for _ in range(iterations):
    product = linalg.matmul(mass.T, linalg.matmul(mass, projection))
    projection, _ = jnp.linalg.qr(product)
  return _projected(mass, projection)


def exact_preproject(
  mass: jax.Array, append: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`N ≈ N_c V_cᵀ` with `V_c` the top-`append` right singular vectors of
  `N` by an SVD (the paper's pre-projection): `(N_c, V_c, τ_c)`, `τ_c`
  computed directly as in `preproject`."""
  _, _, vt = jnp.linalg.svd(mass, full_matrices=False)
  return _projected(mass, vt[:append].T)


def _projected(mass, projection):
  """`(N V, V, |N - N V Vᵀ|_F)`."""
  kept = linalg.matmul(mass, projection)
  rest = mass - linalg.matmul(kept, projection.T)
  return kept, projection, jnp.sqrt(jnp.sum(rest * rest))


def mix_columns(
  columns: jax.Array, coefficients: jax.Array, routing: routing_lib.Routing
) -> jax.Array:
  """`columns @ coefficients` for tall `columns` `(M, m)` and a small
  `coefficients` `(m, o)`: `m` multiply-adds in one loop where
  `routing.elementwise_mix(m)` (XLA:CPU's GEMM is slow on such shapes),
  else one GEMM. In the loop the coefficients are written once first
  where `routing.jacobians_once` (`linalg.computed_once`): XLA would fuse
  their small products into the loop and redo them per entry."""
  if routing.elementwise_mix(columns.shape[1]):
    if routing.jacobians_once:  # else XLA recomputes them per output entry
      coefficients = linalg.computed_once(coefficients)
    return linalg.matmul_unrolled(columns, coefficients)
  return linalg.matmul(columns, coefficients)


def merge_right_factors(
  columns: jax.Array, routing: routing_lib.Routing
) -> tuple[jax.Array, jax.Array]:
  """`columns ≈ Z Θ`, `Z` orthonormal, by CholeskyQR2 on the Gram matrix.

  Returns `(T, Θ)` `(m, m)` with `Z = columns Tᵀ` (not formed). The second
  pass makes `Z` orthonormal to working precision; the representation
  error `columns - Z Θ` (directions of (nearly) dependent columns the Gram
  factorisation drops) is left to the caller to measure (`sketch_update`
  adds its effect to the certificate).

  Args:
    columns: `(M, m)`, `M = P K n` rows, `m = r + c`.
    routing: the route of the `(m, m)` factorisations (`linalg.small_svd`).
  """
  return linalg.gram_qr(
    lambda t: linalg.gram_of_columns(
      columns if t is None else mix_columns(columns, t.T, routing)
    ),
    True,
    routing=routing,
  )


def truncate_core(
  core: jax.Array, rank: int, routing: routing_lib.Routing
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Rank-`rank` truncation of the core `C` `(S n, m)` through its `(m, m)`
  Gram matrix: `(C W_r, W_r, τ_r)`, `W_r` its top right singular vectors
  and `τ_r = |C - C W_r W_rᵀ|_F` computed directly (a bound on the dropped
  mass whatever the eigensolver's accuracy)."""
  _, _, vt = linalg.small_svd(linalg.gram_of_columns(core), routing=routing)
  kept_vectors = vt[:rank].T  # (m, r)
  new_left = linalg.matmul(core, kept_vectors)
  rest = core - linalg.matmul(new_left, kept_vectors.T)
  return new_left, kept_vectors, jnp.sqrt(jnp.sum(rest * rest))


def sketch_update(
  left: jax.Array,
  right: jax.Array,
  h: jax.Array,
  mass: jax.Array,
  basis: jax.Array,
  rank: int,
  start: jax.Array | None,
  iterations: int,
  routing: routing_lib.Routing,
  exact_preprojection: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
  """`L' R'ᵀ ≈ H L Rᵀ + N Qᵀ`, rank `rank` `< S n`: returns `(L', R', η,
  V_c)`, `η` a bound on the Frobenius norm of what was dropped
  (pre-projection, merge, truncation) and `V_c` for the next step's start.

  Shapes: `left (S n, r)`, `right (P, K, n, r)`, `h (S n, S n)`, `mass
  (S n, S n)`, `basis (P, K, n, S)`, `start (S n, c)` or None (no
  pre-projection: `c = S n`, `V_c = I`). With `exact_preprojection`, `V_c`
  is `N`'s top-`c` right singular basis (`exact_preproject`; `start` only
  gives `c`), else `iterations` steps of subspace iteration from `start`."""
  p, k, n, num_rows = basis.shape
  if start is None:
    kept, projection = mass, None
    dropped_c = jnp.zeros((), mass.dtype)
    new_right = jnp.einsum("pkjt,jJ->pkjtJ", basis, jnp.eye(n, dtype=h.dtype))
  elif exact_preprojection:
    kept, projection, dropped_c = exact_preproject(mass, start.shape[1])
  else:
    kept, projection, dropped_c = preproject(mass, start, iterations)
  if projection is not None:
    per_unit = projection.reshape(num_rows, n, -1)  # [t, j, c]
    new_right = jnp.einsum("pkjt,tjc->pkjc", basis, per_unit)
  columns = jnp.concatenate(
    [right.reshape(-1, rank), new_right.reshape(p * k * n, -1)], axis=1
  )
  transform, theta = merge_right_factors(columns, routing)
  factors = jnp.concatenate([linalg.matmul(h, left), kept], axis=1)
  core = linalg.matmul(factors, theta.T)
  new_left, kept_vectors, dropped_r = truncate_core(core, rank, routing)
  # One pass over the columns for R' = Z W_r (Z = columns Tᵀ, not formed)
  # and the representation error Δ = columns (I - Tᵀ Θ).
  m = columns.shape[1]
  eye = jnp.eye(m, dtype=columns.dtype)
  both = mix_columns(
    columns,
    jnp.concatenate(
      [transform.T @ kept_vectors, eye - transform.T @ theta], axis=1
    ),
    routing,
  )
  new_right, lost = both[:, :rank], both[:, rank:]
  merge_error = jnp.sqrt(jnp.sum(factors * factors)) * jnp.sqrt(
    jnp.sum(lost * lost)
  )
  dropped = dropped_c + merge_error + dropped_r
  return new_left, new_right.reshape(p, k, n, rank), dropped, projection


def exact_sketch_update(
  left: jax.Array,
  right: jax.Array,
  h: jax.Array,
  mass: jax.Array,
  basis: jax.Array,
) -> tuple[jax.Array, jax.Array]:
  """Full rank (`r = S n`): `L' R'ᵀ = H L Rᵀ + N Qᵀ` exactly, by a
  Householder QR of the `2 S n` right vectors and an SVD of the core (rank
  at most `S n`, so no singular value is dropped: exact RTRL)."""
  p, k, n, num_rows = basis.shape
  rank = left.shape[1]
  new_right = jnp.einsum("pkjt,jJ->pkjtJ", basis, jnp.eye(n, dtype=h.dtype))
  columns = jnp.concatenate(
    [right.reshape(-1, rank), new_right.reshape(p * k * n, -1)], axis=1
  )
  orthonormal, theta = jnp.linalg.qr(columns)
  core = linalg.matmul(
    jnp.concatenate([linalg.matmul(h, left), mass], axis=1), theta.T
  )
  core = linalg.after(core, orthonormal)  # its SVD not beside the QR's Q
  u, s, vt = jnp.linalg.svd(core, full_matrices=False)
  new_left = u[:, :rank] * s[:rank]
  new_right = linalg.matmul(orthonormal, vt[:rank].T)
  return new_left, new_right.reshape(p, k, n, rank)
