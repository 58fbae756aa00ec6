"""Linear algebra on RTRL tangents, shared by every estimator.

Layouts (one example):
  * a state tangent is `(..., S, n)` (the cell's state rows),
  * a parameter "column" index is `(P, K, n)` for `W` of shape `(P, K n)`,
  * the exact influence matrix `G = d state / d W` is `(P, K, n, S, n)`,
  * a Kronecker factor `A` (right factor, acting on the W columns) is
    `(K, n, S, n)`, so `G = Σ_i u_i ⊗ A_i` with `u_i` of shape `(P,)`.

`H v` (the recurrent Jacobian applied to state tangents) is computed from the
step's `StepJacobians` without ever forming the `(S n, S n)` matrix `H`: one
`(.., n) @ (n, K n)` product with the recurrent weights plus per-unit blocks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl.cells import StepJacobians


def apply_recurrent_jacobian(jac: StepJacobians, hidden_row: int,
                             v: jax.Array) -> jax.Array:
  """`H v` for state tangents `v` of shape `(..., S, n)`."""
  n, _, num_gates = jac.D.shape
  dz = v[..., hidden_row, :] @ jac.recurrent_weights
  dz = dz.reshape(dz.shape[:-1] + (num_gates, n))
  through_gates = jnp.einsum("jsk,...kj->...sj", jac.D, dz)
  direct = jnp.einsum("jst,...tj->...sj", jac.dfds, v)
  return through_gates + direct


def dense_D(jac: StepJacobians) -> jax.Array:
  """`D` as a right Kronecker factor `(K, n, S, n)`: `F_t = hhat ⊗ D`."""
  n = jac.D.shape[0]
  return jnp.einsum("isk,ij->kjsi", jac.D, jnp.eye(n, dtype=jac.D.dtype))


def D_transpose(jac: StepJacobians, g: jax.Array) -> jax.Array:
  """`gᵀ D` for a state covector `g` `(S, n)`: returns `(K, n)`."""
  return jnp.einsum("sj,jsk->kj", g, jac.D)


def contract_state(factor: jax.Array, g: jax.Array) -> jax.Array:
  """Contracts the trailing `(S, n)` state axes of `factor` with `g`."""
  return jnp.einsum("...si,si->...", factor, g)


def block_svd_of_D(jac: StepJacobians):
  """SVD of the block-diagonal `D`: one `(S, K)` block per unit.

  Returns `(left (n, S, q), singular_values (n, q), right (n, K, q))` with
  `q = min(S, K)`, so that `D[j] = left[j] @ diag(sv[j]) @ right[j].T`. The
  singular values of the whole `(S n, K n)` matrix are the union of these
  (the blocks have disjoint row and column supports).
  """
  left, singular_values, right_t = jnp.linalg.svd(jac.D, full_matrices=False)
  return left, singular_values, jnp.swapaxes(right_t, -1, -2)
