"""Unbiased (Theorem 2) and biased (Eckart-Young) low-rank approximations of
any matrix, through its SVD and the diagonal construction of
`diagonal_mixing.py`.

Every function takes `routing` (an `rtrl.routing.Routing`, keyword only):
where its small SVD runs; None: `Routing()`, `jnp.linalg.svd`.
"""

from __future__ import annotations

import jax.numpy as jnp

from rtrl import linalg
from rtrl.kronecker._common import Array
from rtrl.kronecker._common import _check_matrix
from rtrl.kronecker._common import _random_signs
from rtrl.kronecker._common import _static_rank
from rtrl.kronecker.diagonal_mixing import _diagonal_factor_sorted
from rtrl.kronecker.diagonal_mixing import _sorted_variance
from rtrl.routing import Routing

# --------------------------------------------------------------------------
# General matrices: Theorem 2 (unbiased) and Eckart-Young (biased).
# --------------------------------------------------------------------------


def _svd_with_clean_spectrum(C: Array, routing: Routing | None):
  """Thin SVD with numerically-zero singular values set to exactly 0.

  Singular values below `max(m, n) * eps * s_max` (numpy's matrix_rank
  tolerance) are rounding noise of the SVD itself. Left in, they would be
  mixed with genuine ones and add noise of size `sqrt(s_i * s_j)`, far above
  rounding level, to matrices that are exactly representable at the target
  rank. Zeroing them changes C by at most that tolerance.
  """
  u, s, vt = linalg.small_svd(C, routing=routing)
  tolerance = max(C.shape) * jnp.finfo(C.dtype).eps * s[0]
  s = jnp.where(s > tolerance, s, 0)
  return u, s, vt


def _unbiased_factors(
  C: Array, rank: int, key, routing: Routing | None
) -> tuple[Array, Array]:
  """Theorem 2 for any shape; `rank >= min(m, n)` gives C exactly."""
  signs = _random_signs(key, (min(C.shape),), C.dtype)
  return _unbiased_factors_with_signs(C, rank, signs, routing)


def _unbiased_factors_with_signs(
  C: Array, rank: int, signs: Array, routing: Routing | None
) -> tuple[Array, Array]:
  u, s, vt = _svd_with_clean_spectrum(C, routing)
  # small_svd returns s non-increasing: no sort needed.
  factor = _diagonal_factor_sorted(s, rank, signs)  # (q, rank)
  return u @ factor, vt.T @ factor


def _truncated_factors(
  C: Array, rank: int, routing: Routing | None
) -> tuple[Array, Array]:
  """Eckart-Young factors (m, rank), (n, rank); zero-padded if rank > q."""
  u, s, vt = linalg.small_svd(C, routing=routing)
  q = s.shape[0]
  keep = min(q, rank)
  root = jnp.sqrt(s[:keep])
  left = u[:, :keep] * root
  right = vt[:keep].T * root
  if keep < rank:
    left = jnp.pad(left, ((0, 0), (0, rank - keep)))
    right = jnp.pad(right, ((0, 0), (0, rank - keep)))
  return left, right


def unbiased_low_rank(
  C, rank: int, key, *, routing: Routing | None = None
) -> tuple[Array, Array]:
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
    routing: where the SVD runs (`rtrl.routing`); None: `jnp.linalg.svd`.

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
  return _unbiased_factors(C, rank, key, routing)


def unbiased_low_rank_with_signs(
  C, rank: int, signs, *, routing: Routing | None = None
) -> tuple[Array, Array]:
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
    routing: as for `unbiased_low_rank`.
  """
  C = _check_matrix(C)
  rank = _static_rank(rank, min(C.shape), f"C of shape {C.shape}")
  signs = jnp.asarray(signs, C.dtype)
  if signs.shape != (min(C.shape),):
    raise ValueError(
      f"signs must have shape ({min(C.shape)},) for C of "
      f"shape {C.shape}, got {signs.shape}"
    )
  return _unbiased_factors_with_signs(C, rank, signs, routing)


def biased_low_rank(
  C, rank: int, *, routing: Routing | None = None
) -> tuple[Array, Array]:
  """Best rank-`rank` approximation in Frobenius norm (Eckart-Young).

  Args:
    C: (m, n) matrix.
    rank: static Python int, 1 <= rank <= min(m, n).
    routing: as for `unbiased_low_rank`.

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
  return _truncated_factors(C, rank, routing)


def optimal_variance(C, rank: int, *, routing: Routing | None = None) -> Array:
  """Variance `E||C' - C||^2` of `unbiased_low_rank(C, rank, key)`.

  This is the minimum over all unbiased approximators of rank <= `rank`:
  `s1**2 / k - s2` over C's singular values (Theorem 6), 0 when C has rank
  <= `rank`.

  Args:
    C: (m, n) matrix.
    rank: static Python int, 1 <= rank <= min(m, n).
    routing: as for `unbiased_low_rank`.

  Returns:
    Scalar variance.

  References:
    Benzing et al. 2019, Theorem 6 with Lemma 4.
  """
  C = _check_matrix(C)
  rank = _static_rank(rank, min(C.shape), f"C of shape {C.shape}")
  _, s, _ = _svd_with_clean_spectrum(C, routing)
  if s.shape[0] <= rank:
    return jnp.zeros((), C.dtype)
  return _sorted_variance(s, rank)


__all__ = [
  "biased_low_rank",
  "optimal_variance",
  "unbiased_low_rank",
  "unbiased_low_rank_with_signs",
]
