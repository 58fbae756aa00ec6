"""Optimal unbiased (and biased) low-rank and Kronecker-sum approximations.

This module holds the linear algebra behind r-OK, r-B-OK, KF-RTRL, UORO, KTP
and KF-RTRL-r-APPROX (Benzing et al., "Optimal Kronecker-Sum Approximation of
Real Time Recurrent Learning", ICML 2019; section and theorem numbers below
refer to that paper and its appendix):

* `optimal_diagonal_mixing`: the minimum-variance unbiased rank-`rank`
  approximator of a non-negative diagonal matrix (Theorems 6 and 7, Lemmas 5
  and 6, the heart of Algorithm 5).
* `unbiased_low_rank`: the same for any `m x n` matrix via its SVD (Theorem 2,
  Lemma 4, Algorithm 5 for general shapes).
* `biased_low_rank`: the Eckart-Young truncated SVD (Algorithm 6).
* `optimal_variance`, `optimal_diagonal_variance`: the closed-form minimum
  variance `s1**2 / k - s2` of Theorem 6.
* `kronecker_sum_reduce`: Algorithm 4, reduces an `(r+1)`-Kronecker-sum to an
  `r`-Kronecker-sum, unbiased (r-OK) or Eckart-Young optimal (r-B-OK).
* `sign_trick_mix`, `sign_trick_variance`: the KF-RTRL / UORO sign trick with
  norm balancing, and its (deterministic) squared error.

All functions are pure `jax.numpy`, have fixed output shapes, and can be
`jit`-ted and `vmap`-ped. `rank` is always a static Python int.

Conventions. A Kronecker sum `sum_i u_i (x) A_i` is handled through its
"unfolded" matrix `G = us.T @ As` (`us` stacks the vectors `u_i` as rows, `As`
the flattened matrices `A_i`). `G` is a re-arrangement of the entries of the
Kronecker sum, so Frobenius norms, expectations and variances are the same for
both. Variance always means `E ||X' - E X'||_F^2`.
"""

from __future__ import annotations

import operator
from typing import Tuple

import jax
import jax.numpy as jnp

from rtrl import linalg

Array = jax.Array

__all__ = [
    "optimal_diagonal_mixing",
    "optimal_diagonal_variance",
    "unbiased_low_rank",
    "unbiased_low_rank_with_signs",
    "biased_low_rank",
    "optimal_variance",
    "kronecker_sum_reduce",
    "sign_trick_mix",
    "sign_trick_variance",
]


# --------------------------------------------------------------------------
# Argument validation (runs at trace time on static shapes and Python ints).
# --------------------------------------------------------------------------


def _static_rank(rank, max_rank=None, what=""):
  """Returns `rank` as a Python int after checking 1 <= rank <= max_rank."""
  if isinstance(rank, bool):
    raise ValueError(f"rank must be a Python int >= 1, got the bool {rank!r}.")
  try:
    rank_int = operator.index(rank)
  except TypeError:
    raise ValueError(
        "rank must be a static Python int >= 1 (it fixes output shapes; pass "
        f"it as a static argument under jit), got {rank!r} of type "
        f"{type(rank).__name__}.") from None
  if rank_int < 1:
    raise ValueError(f"rank must be >= 1, got rank={rank_int}.")
  if max_rank is not None and rank_int > max_rank:
    raise ValueError(
        f"rank must be <= min(m, n) = {max_rank} for {what}, got "
        f"rank={rank_int}. A rank-{max_rank} factorisation already "
        "represents the matrix exactly.")
  return rank_int


def _check_matrix(C, name="C") -> Array:
  C = jnp.asarray(C)
  if C.ndim != 2:
    raise ValueError(
        f"{name} must be a 2-D matrix of shape (m, n), got an array of shape "
        f"{C.shape}.")
  if C.shape[0] == 0 or C.shape[1] == 0:
    raise ValueError(f"{name} must be non-empty, got shape {C.shape}.")
  if not jnp.issubdtype(C.dtype, jnp.floating):
    C = C.astype(jnp.result_type(float))
  return C


def _check_vector(d, name="d") -> Array:
  d = jnp.asarray(d)
  if d.ndim != 1 or d.shape[0] == 0:
    raise ValueError(
        f"{name} must be a non-empty 1-D vector of shape (q,), got an array "
        f"of shape {d.shape}.")
  if not jnp.issubdtype(d.dtype, jnp.floating):
    d = d.astype(jnp.result_type(float))
  return d


def _safe_divide(numerator, denominator):
  """`numerator / denominator`, and 0 where the denominator is not > 0."""
  positive = denominator > 0
  return jnp.where(
      positive, numerator / jnp.where(positive, denominator, 1), 0)


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
  free_slots = (rank - index).astype(d_sorted.dtype)   # r - i + 1, 1-based i
  mixes_from_here = ((free_slots * d_sorted <= remaining_sum)
                     | (index >= rank - 1))
  num_kept = jnp.argmax(mixes_from_here)                # first True: m - 1
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


def optimal_diagonal_variance(d, rank: int) -> Array:
  """Minimum variance of an unbiased rank-`rank` approximator of `diag(d)`.

  Args:
    d: (q,) non-negative entries, in any order.
    rank: static Python int >= 1.

  Returns:
    Scalar `s1**2 / k - s2` (Theorem 6); exactly 0 when `q <= rank`.

  References:
    Benzing et al. 2019, appendix Theorem 6.
  """
  d = _check_vector(d)
  rank = _static_rank(rank)
  if d.shape[0] <= rank:
    return jnp.zeros((), d.dtype)
  d_sorted = -jnp.sort(-jnp.maximum(d, 0))
  return _sorted_variance(d_sorted, rank)


# --------------------------------------------------------------------------
# Lemma 6: orthonormal z_1..z_r whose projection has a prescribed diagonal.
# --------------------------------------------------------------------------


def _projection_with_diagonal_householder(p: Array) -> Array:
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


def _projection_with_diagonal_givens(p: Array, rank: int) -> Array:
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
  cumulative = jnp.cumsum(p)                            # c_1..c_q
  stages = jnp.arange(1, rank, dtype=dtype)             # t = 1..r-1
  # 1-based m_t, clipped so that (m_t, m_t + 1) is a valid pair of rows even
  # if rounding pushes a cumulative sum across an integer.
  m = jnp.sum(cumulative[None, :] <= stages[:, None], axis=1)
  m = jnp.clip(m, 1, q - 1)
  last = m - 1                                          # 0-based row m_t
  c_last = cumulative[last]
  before = p[last + 1]                                  # b: p_{m_t + 1}
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
    return _projection_with_diagonal_householder(p)
  return _projection_with_diagonal_givens(p, rank)


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


def _random_signs(key, shape, dtype):
  return jax.random.rademacher(key, shape, dtype=dtype)


def _diagonal_mixing_with_signs(d: Array, rank: int, signs: Array):
  """`optimal_diagonal_mixing` with the random sign vector given (for tests).

  Args:
    d: (q,) non-negative, any order.
    rank: static int >= 1.
    signs: (q,) +-1, indexed like the sorted (non-increasing) d.

  Returns:
    (q, rank) factor F in `d`'s coordinate order, E[F F^T] = diag(d).
  """
  d = jnp.maximum(d, 0)
  order = jnp.argsort(-d, stable=True)
  factor_sorted = _diagonal_factor_sorted(d[order], rank, signs)
  return jnp.zeros_like(factor_sorted).at[order].set(factor_sorted)


def optimal_diagonal_mixing(d, rank: int, key) -> Tuple[Array, Array]:
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

  Returns:
    `(left, right)`, both (q, rank) (they are equal since diag(d) is
    symmetric positive semi-definite), rows in `d`'s original order.

  References:
    Benzing et al. 2019, Algorithm 5, Theorems 6 and 7, Lemmas 5 and 6.
  """
  d = _check_vector(d)
  rank = _static_rank(rank)
  signs = _random_signs(key, d.shape, d.dtype)
  factor = _diagonal_mixing_with_signs(d, rank, signs)
  return factor, factor


# --------------------------------------------------------------------------
# General matrices: Theorem 2 (unbiased) and Eckart-Young (biased).
# --------------------------------------------------------------------------


def _svd_with_clean_spectrum(C: Array):
  """Thin SVD with numerically-zero singular values set to exactly 0.

  Singular values below `max(m, n) * eps * s_max` (numpy's matrix_rank
  tolerance) are rounding noise of the SVD itself. Left in, they would be
  mixed with genuine ones and add noise of size `sqrt(s_i * s_j)`, far above
  rounding level, to matrices that are exactly representable at the target
  rank. Zeroing them changes C by at most that tolerance.
  """
  u, s, vt = jnp.linalg.svd(C, full_matrices=False)
  tolerance = max(C.shape) * jnp.finfo(C.dtype).eps * s[0]
  s = jnp.where(s > tolerance, s, 0)
  return u, s, vt


def _unbiased_factors(C: Array, rank: int, key) -> Tuple[Array, Array]:
  """Theorem 2 for any shape; `rank >= min(m, n)` gives C exactly."""
  signs = _random_signs(key, (min(C.shape),), C.dtype)
  return _unbiased_factors_with_signs(C, rank, signs)


def _unbiased_factors_with_signs(C: Array, rank: int,
                                 signs: Array) -> Tuple[Array, Array]:
  u, s, vt = _svd_with_clean_spectrum(C)
  # jnp.linalg.svd returns s non-increasing: no sort needed.
  factor = _diagonal_factor_sorted(s, rank, signs)    # (q, rank)
  return u @ factor, vt.T @ factor


def _truncated_factors(C: Array, rank: int) -> Tuple[Array, Array]:
  """Eckart-Young factors (m, rank), (n, rank); zero-padded if rank > q."""
  u, s, vt = jnp.linalg.svd(C, full_matrices=False)
  q = s.shape[0]
  keep = min(q, rank)
  root = jnp.sqrt(s[:keep])
  left = u[:, :keep] * root
  right = vt[:keep].T * root
  if keep < rank:
    left = jnp.pad(left, ((0, 0), (0, rank - keep)))
    right = jnp.pad(right, ((0, 0), (0, rank - keep)))
  return left, right


def unbiased_low_rank(C, rank: int, key) -> Tuple[Array, Array]:
  """Minimum-variance unbiased rank-`rank` approximation of a matrix.

  `C = U diag(s) V^T` (thin SVD); `diag(s)` is approximated optimally by
  `optimal_diagonal_mixing` and mapped back (Lemma 4), so `L @ R.T` has rank
  <= rank, `E[L @ R.T] = C`, and its variance is the minimum possible,
  `optimal_variance(C, rank)`. If C has rank <= `rank` the output equals C
  (up to rounding).

  Args:
    C: (m, n) matrix.
    rank: static Python int, 1 <= rank <= min(m, n).
    key: a JAX PRNG key.

  Returns:
    `(L, R)` with shapes (m, rank) and (n, rank).

  Raises:
    ValueError: if C is not 2-D or rank is outside [1, min(m, n)].

  References:
    Benzing et al. 2019, Theorem 2 (= appendix Theorem 4), Lemma 4,
    Algorithm 5.
  """
  C = _check_matrix(C)
  rank = _static_rank(rank, min(C.shape), f"C of shape {C.shape}")
  return _unbiased_factors(C, rank, key)


def unbiased_low_rank_with_signs(C, rank: int,
                                 signs) -> Tuple[Array, Array]:
  """`unbiased_low_rank` with its random signs given explicitly.

  `unbiased_low_rank(C, rank, key)` draws `q = min(m, n)` independent
  uniform signs and returns this function's value at them, so averaging this
  over all `2**q` sign patterns gives the *exact* expectation (`C`): tests
  use it to check unbiasedness deterministically.

  Args:
    C: (m, n) matrix.
    rank: static Python int, 1 <= rank <= min(m, n).
    signs: (min(m, n),) entries +-1, indexed like the non-increasing
      singular values of C.
  """
  C = _check_matrix(C)
  rank = _static_rank(rank, min(C.shape), f"C of shape {C.shape}")
  signs = jnp.asarray(signs, C.dtype)
  if signs.shape != (min(C.shape),):
    raise ValueError(f"signs must have shape ({min(C.shape)},) for C of "
                     f"shape {C.shape}, got {signs.shape}")
  return _unbiased_factors_with_signs(C, rank, signs)


def biased_low_rank(C, rank: int) -> Tuple[Array, Array]:
  """Best rank-`rank` approximation in Frobenius norm (Eckart-Young).

  Args:
    C: (m, n) matrix.
    rank: static Python int, 1 <= rank <= min(m, n).

  Returns:
    `(L, R)` with shapes (m, rank) and (n, rank): `L = U_r sqrt(S_r)`,
    `R = V_r sqrt(S_r)`, so `L @ R.T` is the truncated SVD of C.

  Raises:
    ValueError: if C is not 2-D or rank is outside [1, min(m, n)].

  References:
    Benzing et al. 2019, appendix Algorithm 6 (OptBias), Theorem 5.
  """
  C = _check_matrix(C)
  rank = _static_rank(rank, min(C.shape), f"C of shape {C.shape}")
  return _truncated_factors(C, rank)


def optimal_variance(C, rank: int) -> Array:
  """Variance `E||C' - C||^2` of `unbiased_low_rank(C, rank, key)`.

  This is the minimum over all unbiased approximators of rank <= `rank`:
  `s1**2 / k - s2` over C's singular values (Theorem 6), 0 when C has rank
  <= `rank`.

  Args:
    C: (m, n) matrix.
    rank: static Python int, 1 <= rank <= min(m, n).

  Returns:
    Scalar variance.

  References:
    Benzing et al. 2019, Theorem 6 with Lemma 4.
  """
  C = _check_matrix(C)
  rank = _static_rank(rank, min(C.shape), f"C of shape {C.shape}")
  _, s, _ = _svd_with_clean_spectrum(C)
  if s.shape[0] <= rank:
    return jnp.zeros((), C.dtype)
  return _sorted_variance(s, rank)


# --------------------------------------------------------------------------
# Algorithm 4: reduce an (r+1)-Kronecker-sum to an r-Kronecker-sum.
# --------------------------------------------------------------------------


def _balance_columns(left: Array, right: Array) -> Tuple[Array, Array]:
  """Rescales column pairs to equal norm; `left @ right.T` is unchanged."""
  left_norm = jnp.linalg.norm(left, axis=0)
  right_norm = jnp.linalg.norm(right, axis=0)
  both = (left_norm > 0) & (right_norm > 0)
  # sqrt separately: the ratio itself could overflow.
  scale = jnp.where(
      both,
      jnp.sqrt(jnp.where(both, right_norm, 1))
      / jnp.sqrt(jnp.where(both, left_norm, 1)),
      1)
  return left * scale, right / scale


def kronecker_sum_reduce(us, As, key, *, biased: bool = False
                         ) -> Tuple[Array, Array]:
  """One OK (or B-OK) mixing step: r+1 Kronecker summands down to r.

  With `G = sum_{i=1}^{r+1} u_i (x) A_i`, returns `u'_j`, `A'_j` (j = 1..r)
  such that `G' = sum_j u'_j (x) A'_j` is unbiased for G with minimum
  variance (`biased=False`, r-OK, Theorem 3), or the closest r-Kronecker-sum
  to G (`biased=True`, r-B-OK). Steps (Algorithm 4):

  1. thin QR `us.T = Q_u L`, `As.T = Q_A R` (Gram-Schmidt,
     `rtrl.linalg.thin_qr_rows`): the columns of `Q_u`, `Q_A` are
     orthonormal bases `v_i`, `B_i`, and `L_ij = <v_i, u_j>`,
     `R_ij = <B_i, A_j>` are the triangular factors themselves;
  2. `C = L R^T` ((r+1) x (r+1)) are G's coordinates in the basis
     `v_i (x) B_j`, so G's and C's variances agree (Lemma 3);
  3. `C ~ L' R'^T` by `unbiased_low_rank` (Algorithm 5) or the truncated SVD
     (Algorithm 6);
  4. each column pair of `(L', R')` is rescaled to equal norm (product
     unchanged; keeps u and A in the same numerical range, as the official
     code does), then `u'_j = Q_u L'_j`, `A'_j = Q_A R'_j`. Since `Q_u`, `Q_A`
     have orthonormal columns, the small-space balance is also the balance
     of `||u'_j||` and `||A'_j||`.

  Only the two QRs and the two (tall x small) products touch the long
  dimensions; everything else is (r+1)-sized. Zero summands (e.g. the first
  RTRL step), linearly dependent or exactly cancelling summands give zero
  singular values, which are handled without NaN or Inf.

  Args:
    us: (r + 1, a) the vectors u_i as rows.
    As: (r + 1, M) the matrices A_i, flattened, as rows (the caller reshapes).
    key: a JAX PRNG key (unused when `biased=True`).
    biased: use the Eckart-Young truncation (r-B-OK) instead of the unbiased
      optimal mixing (r-OK).

  Returns:
    `(us_new, As_new)` with shapes (r, a) and (r, M).

  Raises:
    ValueError: if `us` or `As` is not 2-D, if their leading dimensions
      differ, or if there are fewer than 2 summands.

  References:
    Benzing et al. 2019, Algorithm 4 (Theorem 3, Lemma 3), Algorithm 5,
    appendix Algorithm 6 (B-OK).
  """
  us = jnp.asarray(us)
  As = jnp.asarray(As)
  if us.ndim != 2 or As.ndim != 2:
    raise ValueError(
        "us and As must be 2-D, (r + 1, a) and (r + 1, M) (flatten each A_i "
        f"into a row), got shapes {us.shape} and {As.shape}.")
  if us.shape[0] != As.shape[0]:
    raise ValueError(
        "us and As must hold the same number r + 1 of Kronecker summands "
        f"(leading dimension), got us.shape={us.shape} and "
        f"As.shape={As.shape}.")
  num_terms = us.shape[0]
  if num_terms < 2:
    raise ValueError(
        "kronecker_sum_reduce needs r + 1 >= 2 summands to reduce to r >= 1, "
        f"got {num_terms}.")
  if us.shape[1] == 0 or As.shape[1] == 0:
    raise ValueError(
        f"us and As must have non-empty rows, got shapes {us.shape} and "
        f"{As.shape}.")
  rank = num_terms - 1
  dtype = jnp.result_type(us.dtype, As.dtype, float)
  us = us.astype(dtype)
  As = As.astype(dtype)

  # thin_qr_rows needs at least r + 1 columns. Zero columns appended to
  # short inputs stay zero in every basis vector (each is a combination of
  # the inputs), so they are simply cut off at the end.
  dim_u, dim_a = us.shape[1], As.shape[1]
  if dim_u < num_terms:
    us = jnp.pad(us, ((0, 0), (0, num_terms - dim_u)))
  if dim_a < num_terms:
    As = jnp.pad(As, ((0, 0), (0, num_terms - dim_a)))
  # Gram-Schmidt QR (rtrl.linalg): XLA's Householder QR of the tall
  # (M, r+1) matrix is ~100x slower on CPU than the rest of the step.
  basis_u, coords_u = linalg.thin_qr_rows(us)   # (r+1, a), (r+1, r+1)
  basis_a, coords_a = linalg.thin_qr_rows(As)   # (r+1, M), (r+1, r+1)
  core = coords_u @ coords_a.T                  # (r+1, r+1)
  if biased:
    left, right = _truncated_factors(core, rank)
  else:
    left, right = _unbiased_factors(core, rank, key)
  left, right = _balance_columns(left, right)
  return (left.T @ basis_u)[:, :dim_u], (right.T @ basis_a)[:, :dim_a]


# --------------------------------------------------------------------------
# The sign trick of UORO and KF-RTRL.
# --------------------------------------------------------------------------


def _balance_factor(u, A):
  """`sqrt(||A|| / ||u||)`, or 1 if either norm is 0."""
  u_norm = jnp.linalg.norm(jnp.ravel(u))
  a_norm = jnp.linalg.norm(jnp.ravel(A))
  both = (u_norm > 0) & (a_norm > 0)
  return jnp.where(
      both,
      jnp.sqrt(jnp.where(both, a_norm, 1))
      / jnp.sqrt(jnp.where(both, u_norm, 1)),
      1)


def sign_trick_mix(u1, A1, u2, A2, key) -> Tuple[Array, Array]:
  """Unbiased rank-one mix of `u1 (x) A1 + u2 (x) A2` with one random sign.

  With norm balancing `p_i = sqrt(||A_i|| / ||u_i||)` (1 if a norm is 0) and
  a uniform sign `c`: `u = p1 u1 + c p2 u2`, `A = A1 / p1 + c A2 / p2`. Then
  `u (x) A = u1 (x) A1 + u2 (x) A2 + c (p1/p2 u1 (x) A2 + p2/p1 u2 (x) A1)`,
  unbiased since E[c] = 0.

  Args:
    u1, u2: vectors (any shape, the same for both).
    A1, A2: matrices (any shape, the same for both).
    key: a JAX PRNG key.

  Returns:
    `(u, A)` with the shapes of `u1` and `A1`.

  References:
    Tallec & Ollivier 2017 (UORO); Mujika et al. 2018 (KF-RTRL);
    Benzing et al. 2019, sections 3.2-3.3.
  """
  u1, A1, u2, A2 = map(jnp.asarray, (u1, A1, u2, A2))
  if u1.shape != u2.shape or A1.shape != A2.shape:
    raise ValueError(
        "sign_trick_mix needs u1, u2 of one shape and A1, A2 of one shape, "
        f"got u1 {u1.shape}, u2 {u2.shape}, A1 {A1.shape}, A2 {A2.shape}.")
  dtype = jnp.result_type(u1, A1, u2, A2, float)
  p1 = _balance_factor(u1, A1).astype(dtype)
  p2 = _balance_factor(u2, A2).astype(dtype)
  sign = _random_signs(key, (), dtype)
  u = p1 * u1 + sign * p2 * u2
  A = A1 / p1 + sign * (A2 / p2)
  return u, A


def sign_trick_variance(u1, A1, u2, A2) -> Array:
  """Variance of `sign_trick_mix` (its squared error, which is deterministic).

  `||u (x) A - G||^2 = ||(p1/p2) u1 (x) A2 + (p2/p1) u2 (x) A1||^2
  = (p1/p2)^2 |u1|^2 |A2|^2 + (p2/p1)^2 |u2|^2 |A1|^2
  + 2 <u1, u2> <A1, A2>`, which for non-zero norms is
  `2 |u1| |A1| |u2| |A2| + 2 <u1, u2> <A1, A2>`.

  Args:
    u1, A1, u2, A2: as for `sign_trick_mix`.

  Returns:
    Scalar variance.
  """
  u1, A1, u2, A2 = (jnp.ravel(jnp.asarray(x)) for x in (u1, A1, u2, A2))
  p1 = _balance_factor(u1, A1)
  p2 = _balance_factor(u2, A2)
  ratio = p1 / p2
  variance = (ratio**2 * jnp.dot(u1, u1) * jnp.dot(A2, A2)
              + jnp.dot(u2, u2) * jnp.dot(A1, A1) / ratio**2
              + 2 * jnp.dot(u1, u2) * jnp.dot(A1, A2))
  return jnp.maximum(variance, 0)
