"""Algorithm 4: reduce an (r+1)-Kronecker-sum to an r-Kronecker-sum (r-OK,
r-B-OK), the reduction every Kronecker-sum estimator step ends with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp

from rtrl import linalg
from rtrl.kronecker._common import Array
from rtrl.kronecker.low_rank import _truncated_factors
from rtrl.kronecker.low_rank import _unbiased_factors
from rtrl.routing import Routing

# --------------------------------------------------------------------------
# Algorithm 4: reduce an (r+1)-Kronecker-sum to an r-Kronecker-sum.
# --------------------------------------------------------------------------


def _balance_columns(left: Array, right: Array) -> tuple[Array, Array]:
  """Rescales column pairs to equal norm; `left @ right.T` is unchanged."""
  left_norm = jnp.linalg.norm(left, axis=0)
  right_norm = jnp.linalg.norm(right, axis=0)
  both = (left_norm > 0) & (right_norm > 0)
  # sqrt separately: the ratio itself could overflow.
  scale = jnp.where(
    both,
    jnp.sqrt(jnp.where(both, right_norm, 1))
    / jnp.sqrt(jnp.where(both, left_norm, 1)),
    1,
  )
  return left * scale, right / scale


def kronecker_sum_reduce(
  us, As, key, *, biased: bool = False, routing: Routing | None = None
) -> tuple[Array, Array]:
  """One OK (or B-OK) mixing step: r+1 Kronecker summands down to r.

  With `G = sum_{i=1}^{r+1} u_i (x) A_i`, returns `u'_j`, `A'_j` (j = 1..r)
  such that `G' = sum_j u'_j (x) A'_j` is unbiased for G with minimum
  variance (`biased=False`, r-OK, Theorem 3), or the closest r-Kronecker-sum
  to G (`biased=True`, r-B-OK). Steps (Algorithm 4):

  1. orthonormal bases `v_i`, `B_i` of the `u_i` and of the `A_i`
     (`Q_u = T_u us`, `Q_A = T_A As`: CholeskyQR by a symmetric
     eigendecomposition, twice in float64, see `rtrl.linalg.gram_qr` and
     `default_refine`) with coordinates `L_ij = <v_i, u_j>`,
     `R_ij = <B_i, A_j>` (`us.T = Q_u.T L`, `As.T = Q_A.T R`);
  2. `C = L R^T` ((r+1) x (r+1)) are G's coordinates in the basis
     `v_i (x) B_j`, so G's and C's variances agree (Lemma 3);
  3. `C ~ L' R'^T` by `unbiased_low_rank` (Algorithm 5) or the truncated SVD
     (Algorithm 6);
  4. each column pair of `(L', R')` is rescaled to equal norm (product
     unchanged; keeps u and A in the same numerical range, as the official
     code does), then `u'_j = (L'_j^T T_u) us`, `A'_j = (R'_j^T T_A) As`. Since `Q_u`, `Q_A`
     have orthonormal columns, the small-space balance is also the balance
     of `||u'_j||` and `||A'_j||`.

  Only products touch the long dimension M (in float32 one Gram matrix and
  one final product, a GEMM or, for the estimators' low ranks on CPU,
  fused multiply-adds, see `rtrl.tangents.factors_and_D_rows`: As is read
  twice and written once; float64 adds the second pass); everything else
  is (r+1)-sized. Zero summands (e.g. the first RTRL step), linearly
  dependent or exactly cancelling summands give zero singular values,
  which are handled without NaN or Inf.

  Args:
    us: (r + 1, a) the vectors u_i as rows.
    As: (r + 1, M) the matrices A_i, flattened, as rows (the caller reshapes).
    key: a JAX PRNG key (unused when `biased=True`).
    biased: use the Eckart-Young truncation (r-B-OK) instead of the unbiased
      optimal mixing (r-OK).
    routing: where the small SVDs run (`rtrl.routing`); None: `Routing()`,
      `jnp.linalg.svd`.

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
      f"into a row), got shapes {us.shape} and {As.shape}."
    )
  if us.shape[0] != As.shape[0]:
    raise ValueError(
      "us and As must hold the same number r + 1 of Kronecker summands "
      f"(leading dimension), got us.shape={us.shape} and "
      f"As.shape={As.shape}."
    )
  num_terms = us.shape[0]
  if num_terms < 2:
    raise ValueError(
      "kronecker_sum_reduce needs r + 1 >= 2 summands to reduce to r >= 1, "
      f"got {num_terms}."
    )
  if us.shape[1] == 0 or As.shape[1] == 0:
    raise ValueError(
      f"us and As must have non-empty rows, got shapes {us.shape} and "
      f"{As.shape}."
    )
  dtype = jnp.result_type(us.dtype, As.dtype, float)
  us = us.astype(dtype)
  As = As.astype(dtype)

  return reduce_rows(us, dense_rows(As), key, biased=biased, routing=routing)


class Rows(NamedTuple):
  """The `c` flattened right factors `A_i`, known through two operations.

  Lets a caller whose summands have structure (the estimators' `hhat ⊗ D`,
  whose `D` lives on a diagonal) run the reduction without materialising
  the stacked `(c, M)` rows.

  Attributes:
    gram: `T -> (T @ rows) @ (T @ rows).T`; `T=None` means the identity.
    combine: `X (m, c) -> X @ rows`, in the caller's layout.
    dtype: the rows' dtype.
  """

  gram: Callable[[Array | None], Array]
  combine: Callable[[Array], Any]
  dtype: Any


def dense_rows(rows: Array) -> Rows:
  """`Rows` of an explicit `(c, M)` matrix."""
  return Rows(
    gram=linalg.gram_of_rows(rows),
    combine=lambda x: linalg.matmul(x, rows),
    dtype=rows.dtype,
  )


def reduce_rows(
  us: Array,
  rows: Rows,
  key,
  *,
  biased: bool = False,
  routing: Routing | None = None,
):
  """`kronecker_sum_reduce` with the right factors given as `Rows`.

  Args:
    us: (r + 1, a) left factors (validated, floating).
    rows: the r + 1 right factors.
    key, biased, routing: as for `kronecker_sum_reduce`.

  Returns:
    `(us_new (r, a), rows.combine(coefficients (r, r + 1)))`.
  """
  rank = us.shape[0] - 1
  refine = linalg.default_refine(rows.dtype)
  # CholeskyQR(2) by eigendecomposition (rtrl.linalg): the long rows only meet
  # GEMMs, and the bases are never formed: A'_j = (R'_j^T T_A) As.
  (transform_u, coords_u), (transform_a, coords_a) = linalg.gram_qr_together(
    [linalg.gram_of_rows(us), rows.gram], refine, routing=routing
  )
  core = coords_u @ coords_a.T  # (r+1, r+1)
  if biased:
    left, right = _truncated_factors(core, rank, routing)
  else:
    left, right = _unbiased_factors(core, rank, key, routing)
  left, right = _balance_columns(left, right)
  return (
    linalg.matmul(left.T @ transform_u, us),
    rows.combine(right.T @ transform_a),
  )


__all__ = [
  "Rows",
  "dense_rows",
  "kronecker_sum_reduce",
  "reduce_rows",
]
