"""Linear algebra on RTRL tangents, shared by every estimator.

Layouts (one example):
  * a state tangent is `(..., S, n)` (the cell's state rows),
  * a parameter "column" index is `(P, K, n)` for `W` of shape `(P, K n)`,
  * the exact influence matrix `G = d state / d W` is `(P, K, n, S, n)`,
  * a Kronecker factor `A` (right factor, acting on the W columns) is
    `(K, n, S, n)`, so `G = Σ_i u_i ⊗ A_i` with `u_i` of shape `(P,)`.

`H v` (the recurrent Jacobian applied to state tangents) is the one place
every estimator spends its `n^3`: `apply_recurrent_jacobian` is it, for all.
For many tangent rows (exact RTRL, KF, KF-AVG, OK, KTP) it forms the step's
`(S n, S n)` matrix `H` once (`S K n^2` work) and applies it with ONE GEMM
`(rows, S n) @ (S n, S n)`: half the FLOPs of the factorised form for RHN
and no `(rows, K n)` intermediate to stream through memory. For a single
vector (UORO) the factorised Jacobian-vector product is cheaper.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rtrl import kronecker, linalg
from rtrl.cells import StepJacobians

# Below this many tangent rows the factorised `H v` beats forming `H`.
DENSE_H_MIN_ROWS = 4


def recurrent_jacobian_t(jac: StepJacobians, hidden_row: int) -> jax.Array:
  """`Hᵀ` as an `(S n, S n)` matrix: `(H v).ravel() = v.ravel() @ Hᵀ`.

  `H[(s, j), (t, i)] = [t = hidden_row] Σ_k D[j, s, k] W_h[i, k n + j]
  + [i = j] dfds[j, s, t]` for state rows `s, t` and units `i, j`.
  """
  n, num_rows, num_gates = jac.D.shape
  weights = jac.recurrent_weights.reshape(n, num_gates, n)       # [i, k, j]
  through_gates = jnp.einsum("ikj,jsk->isj", weights, jac.D)       # [i, s, j]
  eye = jnp.eye(n, dtype=jac.D.dtype)
  direct = jnp.einsum("jst,ij->tisj", jac.dfds, eye)              # [t,i,s,j]
  is_hidden = (jnp.arange(num_rows) == hidden_row).astype(jac.D.dtype)
  h_t = direct + is_hidden[:, None, None, None] * through_gates[None]
  return h_t.reshape(num_rows * n, num_rows * n)


def _apply_factorised(jac: StepJacobians, hidden_row: int, v: jax.Array):
  n, _, num_gates = jac.D.shape
  dz = linalg.matmul(v[..., hidden_row, :], jac.recurrent_weights)
  dz = dz.reshape(dz.shape[:-1] + (num_gates, n))
  through_gates = jnp.einsum("jsk,...kj->...sj", jac.D, dz)
  direct = jnp.einsum("jst,...tj->...sj", jac.dfds, v)
  return through_gates + direct


def apply_recurrent_jacobian(jac: StepJacobians, hidden_row: int,
                             v: jax.Array) -> jax.Array:
  """`H v` for state tangents `v` of shape `(..., S, n)` (same shape out)."""
  num_rows, n = v.shape[-2:]
  rows = math.prod(v.shape[:-2])
  if rows < DENSE_H_MIN_ROWS:
    return _apply_factorised(jac, hidden_row, v)
  h_t = recurrent_jacobian_t(jac, hidden_row)
  flat = v.reshape(rows, num_rows * n)
  return linalg.matmul(flat, h_t).reshape(v.shape)


def dense_D(jac: StepJacobians) -> jax.Array:
  """`D` as a right Kronecker factor `(K, n, S, n)`: `F_t = hhat ⊗ D`."""
  n = jac.D.shape[0]
  return jnp.einsum("isk,ij->kjsi", jac.D, jnp.eye(n, dtype=jac.D.dtype))


# `dense_D` is zero except on the "diagonal" `(k, j, s, j)` of a right factor
# `(K, n, S, n)`: `K S n` of its `K S n^2` entries. The helpers below touch
# only those entries (a gather or an in-place scatter-add), so adding
# `c ⊗ D` to a propagated factor costs no extra pass over it.


def _diagonal_positions(n: int, num_rows: int) -> jax.Array:
  """Flat indices in `(n, S, n)` of the entries `(j, s, j)`, order `(j, s)`."""
  j = jnp.arange(n)[:, None]
  s = jnp.arange(num_rows)[None, :]
  return (j * (num_rows * n + 1) + s * n).reshape(-1)


def D_diagonal(jac: StepJacobians) -> jax.Array:
  """The non-zero entries of `dense_D`: `(K, n S)`, `[k, j S + s] = D[j,s,k]`."""
  n, num_rows, num_gates = jac.D.shape
  return jnp.transpose(jac.D, (2, 0, 1)).reshape(num_gates, n * num_rows)


def add_scaled_D(factor: jax.Array, coef: jax.Array,
                 jac: StepJacobians) -> jax.Array:
  """`factor + coef ⊗ dense_D` for factors `(..., K, n, S, n)`, `coef` of
  shape `factor.shape[:-4]`, by a scatter-add on the diagonal entries."""
  num_gates, n, num_rows, _ = factor.shape[-4:]
  lead = factor.shape[:-4]
  flat = factor.reshape(lead + (num_gates, n * num_rows * n))
  values = coef[..., None, None] * D_diagonal(jac)
  flat = flat.at[..., _diagonal_positions(n, num_rows)].add(values)
  return flat.reshape(factor.shape)


def inner_with_D(factor: jax.Array, jac: StepJacobians) -> jax.Array:
  """`<factor, dense_D>` over the trailing `(K, n, S, n)` axes (a gather)."""
  num_gates, n, num_rows, _ = factor.shape[-4:]
  lead = factor.shape[:-4]
  flat = factor.reshape(lead + (num_gates, n * num_rows * n))
  diagonal = jnp.take(flat, _diagonal_positions(n, num_rows), axis=-1)
  return jnp.sum(diagonal * D_diagonal(jac), axis=(-2, -1))


def factors_and_D_rows(factors: jax.Array, jac: StepJacobians):
  """The `r + 1` right factors `[factors_1..r, dense_D]` as `kronecker.Rows`.

  `factors` `(r, K, n, S, n)`. The Gram matrix needs one GEMM over the
  factors plus their diagonals; combinations are one GEMM plus a diagonal
  scatter-add, returned in the factors' layout `(m, K, n, S, n)`. The
  stacked `(r + 1, K S n^2)` matrix is never formed.
  """
  rank = factors.shape[0]
  flat = factors.reshape(rank, -1)
  d_norm_sq = jnp.sum(jac.D * jac.D)

  def combine(x):
    out = linalg.matmul(x[:, :rank], flat).reshape((x.shape[0],)
                                                   + factors.shape[1:])
    return add_scaled_D(out, x[:, rank], jac)

  def gram(transform):
    if transform is not None:   # the refinement pass: explicit rows
      rows = combine(transform).reshape(transform.shape[0], -1)
      return linalg.gram(rows)
    top = linalg.gram(flat)
    cross = inner_with_D(factors, jac)
    return jnp.block([[top, cross[:, None]],
                      [cross[None, :], d_norm_sq[None, None]]])

  return kronecker.Rows(gram=gram, combine=combine, dtype=factors.dtype)


def D_transpose(jac: StepJacobians, g: jax.Array) -> jax.Array:
  """`gᵀ D` for a state covector `g` `(S, n)`: returns `(K, n)`."""
  return jnp.einsum("sj,jsk->kj", g, jac.D)


def contract_state(factor: jax.Array, g: jax.Array) -> jax.Array:
  """Contracts the trailing `(S, n)` state axes of `factor` with `g`."""
  num_rows, n = g.shape
  lead = factor.shape[:-2]
  flat = factor.reshape((math.prod(lead), num_rows * n))
  return linalg.matmul(flat, g.reshape(num_rows * n)).reshape(lead)


def block_svd_of_D(jac: StepJacobians):
  """SVD of the block-diagonal `D`: one `(S, K)` block per unit.

  Returns `(left (n, S, q), singular_values (n, q), right (n, K, q))` with
  `q = min(S, K)`, so that `D[j] = left[j] @ diag(sv[j]) @ right[j].T`. The
  singular values of the whole `(S n, K n)` matrix are the union of these
  (the blocks have disjoint row and column supports).
  """
  left, singular_values, right_t = jnp.linalg.svd(jac.D, full_matrices=False)
  return left, singular_values, jnp.swapaxes(right_t, -1, -2)
