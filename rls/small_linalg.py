"""Small dense linear algebra for the RLS forms, written as XLA loops.

``S × S`` Cholesky factors and triangular inverses (``S`` the sampled rows
of `rls.second_moment`, about 128), and ``P = S Sᵀ`` of a square-root form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_HIGHEST = jax.lax.Precision.HIGHEST


def factor_product(factor: jax.Array) -> jax.Array:
  """``P = S Sᵀ`` from a square root ``S``, exactly symmetric."""
  product = jnp.matmul(factor, factor.T, precision=_HIGHEST)
  return 0.5 * (product + product.T)


def cholesky_factor(matrix: jax.Array, min_pivot=0.0) -> jax.Array:
  """The lower Cholesky factor ``L`` of a small SPD ``matrix``, every pivot
  (``L_jj²``) at least `min_pivot`.

  Written with XLA loops (``S`` steps of ``S × S`` work each) rather than
  `jnp.linalg.cholesky`: on CPU those call LAPACK through SciPy's OpenBLAS,
  which deadlocked a vmapped training program here (every thread waiting,
  jaxlib 0.10.2, two cores shared with another job), and for ``S ≈ 128``
  the loops cost a few milliseconds at most. For ``matrix ⪰ m I`` every
  pivot is ``>= m`` in exact arithmetic; ``min_pivot = m`` keeps rounding
  from taking one below (or below zero, a NaN).
  """
  size = matrix.shape[0]
  rows = jnp.arange(size)
  min_pivot = jnp.asarray(min_pivot, matrix.dtype)

  def factor_column(j, lower):
    # Column j of L from the columns before it (zero from j on).
    column = matrix[:, j] - jnp.matmul(lower, lower[j], precision=_HIGHEST)
    column = column / jnp.sqrt(jnp.maximum(column[j], min_pivot))
    return lower.at[:, j].set(jnp.where(rows >= j, column, 0.0))

  return jax.lax.fori_loop(0, size, factor_column, jnp.zeros_like(matrix))


def lower_triangular_inverse(lower: jax.Array) -> jax.Array:
  """``L⁻¹`` of a small lower-triangular ``L`` (forward substitution)."""
  size = lower.shape[0]

  def substitute_row(i, inverse):
    # Forward substitution of L Y = I, row i (rows from i on still zero).
    row = jnp.eye(size, dtype=lower.dtype)[i] - jnp.matmul(
      lower[i], inverse, precision=_HIGHEST
    )
    return inverse.at[i].set(row / lower[i, i])

  return jax.lax.fori_loop(0, size, substitute_row, jnp.zeros_like(lower))


def inverse_cholesky_factor(matrix: jax.Array) -> jax.Array:
  """``L⁻¹`` for the Cholesky factor ``L`` of a small SPD ``matrix``."""
  return lower_triangular_inverse(cholesky_factor(matrix))
