"""UORO (Tallec & Ollivier 2017): `G ≈ u ⊗ v`, u a state vector `(S, n)`,
v a parameter vector `(P, K n)`.

`F = hhat ⊗ D` is replaced by `ν ⊗ (νᵀ F)` with random signs `ν`
(`E[ν νᵀ] = I`), then `(H u) ⊗ v` and `ν ⊗ νᵀF` are mixed by the sign trick
with norm balancing (`ρ0 = sqrt(|v|/|H u|)`, `ρ1 = sqrt(|νᵀF|/|ν|)`).
Memory and time `~ n^2` per example.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import kronecker
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import base


def uoro(cell: Cell) -> base.Estimator:
  """UORO (`make('uoro', cell)`)."""

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    dtype = params["W"].dtype
    return jnp.zeros((s, n), dtype), jnp.zeros((p, k * n), dtype)

  def update(tangent, jac, key):
    state_vector, param_vector = tangent
    propagated = tangents.apply_recurrent_jacobian(jac, cell.hidden_row,
                                                   state_vector)
    sign_key, mix_key = jax.random.split(key)
    nu = jax.random.rademacher(sign_key, state_vector.shape,
                               dtype=state_vector.dtype)
    nu_F = jnp.outer(jac.hhat, tangents.D_transpose(jac, nu).reshape(-1))
    return kronecker.sign_trick_mix(propagated, param_vector, nu, nu_F,
                                    mix_key)

  def readout(tangent, g):
    state_vector, param_vector = tangent
    return jnp.vdot(g, state_vector) * param_vector

  return base.build("uoro", cell, zeros, update, readout,
                    jacobians_once=True)
