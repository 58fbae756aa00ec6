"""Small dense linear algebra that XLA does badly on tall-skinny inputs.

`jnp.linalg.qr` of a tall `(M, c)` matrix with `M` in the thousands and
`c ≈ 10` costs about 100 ms per matrix on CPU in XLA (it builds Householder
reflectors against the full height): it made r-OK 200x slower than r-KF-AVG.
`thin_qr_rows` does classical Gram–Schmidt with one re-orthogonalisation pass
("twice is enough", CGS2): `c` steps of four `(c, M)` matrix-vector products,
`O(M c^2)` flops, fixed shapes, orthogonality to working precision, and
dependent or zero columns handled without NaN.

References:
  Giraud, Langou, Rozložník & van den Eshof, "Rounding error analysis of the
  classical Gram-Schmidt orthogonalization process", Numer. Math. 2005.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def thin_qr_rows(rows: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Thin QR of the `c` rows of `rows` `(c, M)`, `M >= c`.

  Returns:
    `basis` `(c, M)` whose non-zero rows are orthonormal, and `coords`
    `(c, c)` upper triangular with `rows[j] = Σ_i coords[i, j] basis[i]`
    (that is, `rows.T = basis.T @ coords`, the thin QR of `rows.T`). A row
    that is (numerically) a combination of the previous ones gets a zero
    basis row and a zero diagonal entry; zero inputs give zeros, never NaN.
  """
  num_vectors, dim = rows.shape
  if dim < num_vectors:
    raise ValueError(f"thin_qr_rows needs at least as many columns as rows "
                     f"(c <= M), got shape {rows.shape}")
  dtype = rows.dtype
  # A residual this small relative to its vector is rounding noise: keeping
  # it as a direction would cost orthogonality for no accuracy.
  tolerance = 10 * num_vectors * jnp.finfo(dtype).eps

  def body(j, carry):
    basis, coords = carry
    vector = rows[j]
    first = basis @ vector
    residual = vector - first @ basis
    second = basis @ residual
    residual = residual - second @ basis
    norm = jnp.sqrt(jnp.sum(residual * residual))
    keep = norm > tolerance * jnp.sqrt(jnp.sum(vector * vector))
    direction = jnp.where(keep, residual / jnp.where(keep, norm, 1), 0)
    basis = basis.at[j].set(direction)
    coords = coords.at[:, j].set(first + second)
    coords = coords.at[j, j].set(jnp.where(keep, norm, 0))
    return basis, coords

  init = (jnp.zeros((num_vectors, dim), dtype),
          jnp.zeros((num_vectors, num_vectors), dtype))
  # Unrolled: c is small (rank + 1) and the loop body is a handful of
  # matrix-vector products, so loop overhead would otherwise dominate.
  return jax.lax.fori_loop(0, num_vectors, body, init, unroll=True)
