"""The optimal unbiased low-rank approximation of a diagonal matrix.

Theorem 6 (which entries are kept, the minimum variance `s1**2 / k - s2`),
Lemma 6 (orthonormal `Z` whose projection has a prescribed diagonal) and
Theorem 7 / Lemma 5 (the random-sign construction), the heart of Algorithm 5
of Benzing et al., "Optimal Kronecker-Sum Approximation of Real Time
Recurrent Learning", ICML 2019.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl.kronecker._common import Array
from rtrl.kronecker._common import _check_vector
from rtrl.kronecker._common import _random_signs
from rtrl.kronecker._common import _safe_divide
from rtrl.kronecker._common import _static_rank

# --------------------------------------------------------------------------
# Theorem 6: which singular values are kept and how much the rest are mixed.
# --------------------------------------------------------------------------


def _split_sorted(d_sorted: Array, rank: int):
  """Theorem 6's split of a non-increasing, non-negative `d` (q > rank).

  Args:
    d_sorted: (q,) non-negative, non-increasing.
    rank: the target rank r, with q > r.

  Returns:
    `(num_kept, k, s1, s2)`: the first `num_kept = m - 1` entries are kept
    exactly, the remaining `q - num_kept` are mixed into rank `k = r - m + 1`,
    and `s1`, `s2` are the sum and the sum of squares of the mixed entries.
    `m = min{i : (r - i + 1) d_i <= sum_{j=i}^{q} d_j}` (1-based, sum over ALL
    remaining entries as in Theorem 6; Algorithm 5's pseudo-code stops the sum
    at r, which is a typo).
  """
  q = d_sorted.shape[0]
  index = jnp.arange(q)
  # sum_{j >= i} d_j: a sum of non-negative terms, so in floating point it is
  # never below d_i and the condition below always holds at i = r.
  remaining_sum = jnp.cumsum(d_sorted[::-1])[::-1]
  free_slots = (rank - index).astype(d_sorted.dtype)  # r - i + 1, 1-based i
  mixes_from_here = (free_slots * d_sorted <= remaining_sum) | (
    index >= rank - 1
  )
  num_kept = jnp.argmax(mixes_from_here)  # first True: m - 1
  k = (rank - num_kept).astype(d_sorted.dtype)
  mixed = index >= num_kept
  s1 = jnp.sum(jnp.where(mixed, d_sorted, 0))
  s2 = jnp.sum(jnp.where(mixed, d_sorted**2, 0))
  return num_kept, k, s1, s2


def _sorted_variance(d_sorted: Array, rank: int) -> Array:
  """`s1**2 / k - s2` for non-increasing d with q > rank.

  Computed on `d / max(d)` and rescaled, so squares of tiny (or huge) entries
  cannot underflow (overflow) in float32.
  """
  largest = d_sorted[0]
  positive = largest > 0
  normalised = d_sorted / jnp.where(positive, largest, 1)
  _, k, s1, s2 = _split_sorted(normalised, rank)
  # s1^2 / k - s2 >= 0 mathematically (d_i <= s1 / k on the mixed entries);
  # clip the rounding error.
  variance = jnp.maximum(s1 * s1 / k - s2, 0)
  return jnp.where(positive, variance * largest * largest, 0)


def optimal_diagonal_variance(
  d, rank: int, *, pairwise_sort_max: int | None = None
) -> Array:
  """Minimum variance of an unbiased rank-`rank` approximator of `diag(d)`.

  Args:
    d: (q,) non-negative entries, in any order.
    rank: static Python int >= 1.
    pairwise_sort_max: how `d` is ordered (`descending_positions`; the same
      result either way, and the same program as the mixing's, which XLA
      then computes once).

  Returns:
    Scalar `s1**2 / k - s2` (Theorem 6); exactly 0 when `q <= rank`.

  References:
    Benzing et al. 2019, appendix Theorem 6.
  """
  d = _check_vector(d)
  rank = _static_rank(rank)
  if d.shape[0] <= rank:
    return jnp.zeros((), d.dtype)
  return _sorted_variance(_sorted_descending(d, pairwise_sort_max), rank)


# --------------------------------------------------------------------------
# Lemma 6: orthonormal z_1..z_r whose projection has a prescribed diagonal.
# --------------------------------------------------------------------------


def projection_with_diagonal_householder(p: Array) -> Array:
  """Lemma 6 for q = r + 1 (Algorithm 5's z0 construction).

  `z0 = sqrt(1 - p)` is a unit vector (sum p = r = q - 1). The Householder
  reflection `H = I - 2 v v^T / (v^T v)` with `v = z0 + e_q` maps `e_q` to
  `-z0`, so its other `r` columns are an orthonormal basis of `z0`'s
  orthogonal complement and `Z Z^T = I - z0 z0^T` has diagonal `p`.
  `v^T v = 2 + 2 z0_q >= 2`, so nothing is ever divided by a small number.

  Args:
    p: (r + 1,) entries in [0, 1] summing to r.

  Returns:
    Z: (r + 1, r) with orthonormal columns and `diag(Z Z^T) = p`.
  """
  q = p.shape[0]
  z0 = jnp.sqrt(jnp.clip(1 - p, 0, 1))
  v = z0.at[q - 1].add(1)
  scale = 2 / jnp.dot(v, v)
  # Columns 0..q-2 of H; column q-1 (= -z0) is the one dropped.
  return jnp.eye(q, q - 1, dtype=p.dtype) - scale * jnp.outer(v, v[: q - 1])


def projection_with_diagonal_givens(p: Array, rank: int) -> Array:
  """Lemma 6 for any q >= r (the Israel 2011 construction), fixed shapes.

  Unrolled form of the induction in the proof of Lemma 6. With `c_j` the
  cumulative sums of `p` (1-based) and, for each stage `t = 1..r-1`,
  `m_t = max{j : c_j <= t}` (so `c_{m_t} <= t < c_{m_t + 1}`):

  1. Stage t moves `alpha_t = t - c_{m_t}` from entry `m_t + 1` to entry
     `m_t`, so that the modified entries form `r` consecutive blocks
     (block t = entries `m_{t-1}+1 .. m_t`), each summing to exactly 1.
  2. `X` (q, r) has column t equal to `sqrt(modified p)` on block t: disjoint
     supports, so the columns are orthonormal and `diag(X X^T)` is the
     modified `p`.
  3. `Z = R_1 R_2 ... R_{r-1} X` with `R_t` the plane rotation of rows
     `(m_t, m_t + 1)` by the angle with `sin^2 = alpha / (2 alpha + a - b)`
     (`a`, `b` the entries before stage t modified them). When `R_t` is
     applied, rows `m_t` (in block t) and `m_t + 1` (in later blocks) are
     orthogonal, so the rotation turns the diagonal pair `(a + alpha,
     b - alpha)` back into `(a, b)` and leaves every other diagonal entry
     alone. Rotations keep the columns orthonormal.

  The entry at `m_t` before stage t is `min(c_{m_t} - (t - 1), p_{m_t})`
  (it was cut at the boundary t-1 by stage t-1 exactly when it is the first
  of its block), so all stage quantities are computed at once; only the
  rotations run in a short `lax.scan` over r - 1 stages. `p` must be
  non-increasing: this guarantees `a + alpha >= b - alpha` (the angle
  exists), as in the paper's proof.

  Args:
    p: (q,) non-increasing entries in [0, 1] summing to `rank`.
    rank: static int r >= 1, r <= q.

  Returns:
    Z: (q, r) with orthonormal columns and `diag(Z Z^T) = p`.

  References:
    Benzing et al. 2019, proof of Lemma 6; R. Israel (2011).
  """
  q = p.shape[0]
  dtype = p.dtype
  cumulative = jnp.cumsum(p)  # c_1..c_q
  stages = jnp.arange(1, rank, dtype=dtype)  # t = 1..r-1
  # 1-based m_t, clipped so that (m_t, m_t + 1) is a valid pair of rows even
  # if rounding pushes a cumulative sum across an integer.
  m = jnp.sum(cumulative[None, :] <= stages[:, None], axis=1)
  m = jnp.clip(m, 1, q - 1)
  last = m - 1  # 0-based row m_t
  c_last = cumulative[last]
  before = p[last + 1]  # b: p_{m_t + 1}
  alpha = jnp.clip(stages - c_last, 0, before)
  current = jnp.minimum(c_last - (stages - 1), p[last])  # a
  current = jnp.clip(current, 0, 1)
  denominator = 2 * alpha + current - before
  sin_sq = jnp.clip(_safe_divide(alpha, denominator), 0, 1)
  sin = jnp.sqrt(sin_sq)
  cos = jnp.sqrt(1 - sin_sq)

  # Modified diagonal and block structure of X.
  modified = p.at[last].add(alpha).at[last + 1].add(-alpha)
  modified = jnp.clip(modified, 0, 1)
  block = jnp.sum(last[None, :] < jnp.arange(q)[:, None], axis=1)  # 0..r-1
  x = jax.nn.one_hot(block, rank, dtype=dtype) * jnp.sqrt(modified)[:, None]
  # Each block sums to 1 up to rounding; renormalise so the columns are
  # orthonormal to working precision (guards an all-zero column).
  column_norm = jnp.linalg.norm(x, axis=0)
  x = x / jnp.where(column_norm > 0, column_norm, 1)

  def rotate(z, stage):
    row, c, s = stage
    pair = jax.lax.dynamic_slice_in_dim(z, row, 2, axis=0)
    rotated = jnp.stack([c * pair[0] + s * pair[1], c * pair[1] - s * pair[0]])
    return jax.lax.dynamic_update_slice_in_dim(z, rotated, row, axis=0), None

  # Z = R_1 (R_2 (... (R_{r-1} X))): apply the last stage first.
  z, _ = jax.lax.scan(rotate, x, (last, cos, sin), reverse=True)
  return z


def _projection_with_diagonal(p: Array, rank: int) -> Array:
  """Orthonormal (q, rank) Z with diag(Z Z^T) = p (Lemma 6); p sorted."""
  q = p.shape[0]
  if q == rank:
    return jnp.eye(q, dtype=p.dtype)
  if q == rank + 1:
    return projection_with_diagonal_householder(p)
  return projection_with_diagonal_givens(p, rank)


# --------------------------------------------------------------------------
# Theorem 7 / Lemma 5: the optimal unbiased approximator of a diagonal.
# --------------------------------------------------------------------------


def _diagonal_factor_sorted(d_sorted: Array, rank: int, signs: Array) -> Array:
  """Factor F (q, rank) with E[F F^T] = diag(d_sorted), minimum variance.

  Construction (proof of Theorem 7, written without the block split): let
  `p_i = 1` for the `m - 1` kept entries and `p_i = k d_i / s1` for the mixed
  ones. `p` is non-increasing, lies in [0, 1] (definition of m) and sums to
  `(m - 1) + k = rank`, so Lemma 6 gives an orthonormal `Z` (q, rank) with
  `diag(Z Z^T) = p`. `P = Z Z^T` is an orthogonal projection, and a unit
  diagonal entry `P_ii = 1` forces `P e_i = e_i`: P is block diagonal,
  `I_{m-1}` on the kept entries and a rank-k projection `P_2` with diagonal
  `k d_i / s1` on the mixed ones. With random signs `s` and weights
  `w_i = sqrt(d_i)` (kept) or `sqrt(s1 / k)` (mixed), `F = diag(s w) Z` gives

    F F^T = diag(d_1..d_{m-1}) (+) (s1 / k) S P_2 S,

  which is Theorem 6's form (6) with `D_2' = (s1/k) S P_2 S`. Lemma 5:
  `E[S P_2 S] = diag(P_2)`, so it is unbiased, and `(k/s1) D_2'` is a rank-k
  projection, which is Condition 2. Its squared error is even deterministic:
  `||F F^T - D||^2 = (s1/k)^2 k - 2 (s1/k) sum(P_ii d_i) + s2
  = s1^2/k - s2` for every sign vector. If `s1 = 0` (nothing to mix) the
  mixed weights are 0 and a uniform valid `p` keeps Z finite.

  Args:
    d_sorted: (q,) non-negative, non-increasing.
    rank: static int >= 1.
    signs: (q,) entries +-1.

  Returns:
    F: (q, rank); F F^T has rank <= rank.
  """
  q = d_sorted.shape[0]
  dtype = d_sorted.dtype
  if q <= rank:
    # Nothing to approximate: diag(d) = F F^T exactly.
    return jnp.eye(q, rank, dtype=dtype) * jnp.sqrt(d_sorted)[:, None]
  num_kept, k, s1, _ = _split_sorted(d_sorted, rank)
  kept = jnp.arange(q) < num_kept
  has_mass = s1 > jnp.finfo(dtype).tiny
  safe_s1 = jnp.where(has_mass, s1, 1)
  uniform = k / (q - num_kept).astype(dtype)
  mixed_p = jnp.where(has_mass, k * d_sorted / safe_s1, uniform)
  p = jnp.where(kept, 1, jnp.clip(mixed_p, 0, 1))
  z = _projection_with_diagonal(p, rank)
  mixed_weight = jnp.where(has_mass, jnp.sqrt(safe_s1 / k), 0)
  weight = jnp.where(kept, jnp.sqrt(d_sorted), mixed_weight)
  return (signs * weight)[:, None] * z


def diagonal_mixing_with_signs(
  d: Array, rank: int, signs: Array, *, pairwise_sort_max: int | None = None
):
  """`optimal_diagonal_mixing` with its random sign vector given: a
  deterministic function of `signs`, so expectations are exact averages over
  all `2^q` sign vectors.

  Args:
    d: (q,) non-negative, any order.
    rank: static int >= 1.
    signs: (q,) +-1, indexed like the sorted (non-increasing) d.
    pairwise_sort_max: as for `descending_positions`.

  Returns:
    (q, rank) factor F in `d`'s coordinate order, E[F F^T] = diag(d).
  """
  d = jnp.maximum(d, 0)
  position = descending_positions(d, pairwise_sort_max=pairwise_sort_max)
  d_sorted = _sorted_descending(d, pairwise_sort_max, position)
  factor_sorted = _diagonal_factor_sorted(d_sorted, rank, signs)
  return factor_sorted[position]


# The default of `descending_positions`' `pairwise_sort_max`: up to this many
# entries all pairwise comparisons (q^2 work, one fused pass and a GEMV) beat
# a sort on XLA:CPU (docs/benchmarks/routing.md). The estimators take it from
# their `rtrl.routing.Routing` (0 on GPUs: XLA:GPU compiled the pairwise
# count for minutes in KF-APPROX's batch-256 program, docs/benchmarks/gpu.md).
PAIRWISE_SORT_MAX = 256


def _sorted_descending(d: Array, pairwise_sort_max, position=None) -> Array:
  """`max(d, 0)` in non-increasing order, placed by `descending_positions`."""
  d = jnp.maximum(d, 0)
  if position is None:
    position = descending_positions(d, pairwise_sort_max=pairwise_sort_max)
  return jnp.zeros_like(d).at[position].set(d)


def descending_positions(d: Array, *, pairwise_sort_max: int | None = None):
  """Where each entry of `d` (q,) goes in the stable non-increasing order:
  `d_sorted[positions[i]] = d[i]`, ties kept in index order (as
  `argsort(-d, stable=True)`); a NaN counts as the largest, so it reaches
  the sorted vector instead of being dropped.

  Args:
    d: (q,) entries.
    pairwise_sort_max: up to this `q` the positions come from all pairwise
      comparisons, above it from `argsort` (the same integers); None:
      `PAIRWISE_SORT_MAX`.
  """
  q = d.shape[0]
  key = jnp.where(jnp.isnan(d), jnp.inf, d)
  if pairwise_sort_max is None:
    pairwise_sort_max = PAIRWISE_SORT_MAX
  if q > pairwise_sort_max:
    order = jnp.argsort(-key, stable=True)
    return (
      jnp.zeros((q,), jnp.int32).at[order].set(jnp.arange(q, dtype=jnp.int32))
    )
  index = jnp.arange(q)
  before = (key[None, :] > key[:, None]) | (
    (key[None, :] == key[:, None]) & (index[None, :] < index[:, None])
  )
  # Counted by a product with ones: XLA:CPU's row reduction of a boolean
  # matrix is several times slower. The counts (<= q) are exact.
  count = jnp.matmul(
    before.astype(key.dtype),
    jnp.ones((q,), key.dtype),
    precision=jax.lax.Precision.HIGHEST,
  )
  return count.astype(jnp.int32)


def optimal_diagonal_mixing(
  d, rank: int, key, *, pairwise_sort_max: int | None = None
) -> tuple[Array, Array]:
  """Minimum-variance unbiased rank-`rank` approximation of `diag(d)`.

  Keeps the `m - 1` largest entries exactly and mixes the rest into rank
  `k = rank - m + 1` with random signs (Theorem 7). Every sample has rank
  <= rank, `E[left @ right.T] = diag(d)`, and the squared error
  `||left @ right.T - diag(d)||^2` equals the minimum variance
  `s1**2 / k - s2` of Theorem 6 for every sample. For `q <= rank` the result
  is exact and deterministic.

  Args:
    d: (q,) non-negative entries in any order (negative entries are treated
      as 0).
    rank: static Python int >= 1.
    key: a JAX PRNG key.
    pairwise_sort_max: how the entries are ordered (`descending_positions`;
      the same result either way).

  Returns:
    `(left, right)`, both (q, rank) (they are equal since diag(d) is
    symmetric positive semi-definite), rows in `d`'s original order.

  References:
    Benzing et al. 2019, Algorithm 5, Theorems 6 and 7, Lemmas 5 and 6.
  """
  d = _check_vector(d)
  rank = _static_rank(rank)
  signs = _random_signs(key, d.shape, d.dtype)
  factor = diagonal_mixing_with_signs(
    d, rank, signs, pairwise_sort_max=pairwise_sort_max
  )
  return factor, factor


__all__ = [
  "PAIRWISE_SORT_MAX",
  "descending_positions",
  "diagonal_mixing_with_signs",
  "optimal_diagonal_mixing",
  "optimal_diagonal_variance",
  "projection_with_diagonal_givens",
  "projection_with_diagonal_householder",
]
