"""UORO (Tallec & Ollivier 2017): `G ≈ u ⊗ v`, u a state vector `(S, n)`,
v a parameter vector `(P, K n)`.

`F = hhat ⊗ D` is replaced by `ν ⊗ (νᵀ F)` with random signs `ν`
(`E[ν νᵀ] = I`), then `(H u) ⊗ v` and `ν ⊗ νᵀF` are mixed by the sign trick
with norm balancing (`ρ0 = sqrt(|v|/|H u|)`, `ρ1 = sqrt(|νᵀF|/|ν|)`;
`kronecker.sign_trick_mix`, written out here so that `νᵀF = hhat ⊗ Dᵀν`
is formed only inside the new factor, its norm being `|hhat| |Dᵀν|`).
Memory and time `~ n^2` per example.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import kronecker
from rtrl import linalg
from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import _base as base
from rtrl.estimators._autodiff import autodiff_uoro
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


def uoro(
  cell: Cell, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """UORO (Tallec & Ollivier, "Unbiased Online Recurrent Optimization",
  ICLR 2018) for a Lemma-1 cell.

  `G ≈ u ⊗ v` (a state vector and a parameter vector); `F` is replaced by
  `ν ⊗ νᵀF` with random signs `ν`, mixed in by the sign trick with norm
  balancing. Unbiased. Cost per example and step: memory and time
  `~ K n^2` (`P K n + S n`).

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`. A `CustomCell` or an `LRU` takes
      `autodiff_uoro`.
    routing: speed choices (`rtrl.routing.Routing`: `jacobians_once`);
      None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='uoro'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form.
  """
  base.require_lemma1_cell(
    cell, "uoro", custom_instead="autodiff_uoro", lru_instead="autodiff_uoro"
  )
  routing = routing_lib.resolve(routing)

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    dtype = params["W"].dtype
    return jnp.zeros((s, n), dtype), jnp.zeros((p, k * n), dtype)

  def update(tangent, jac, key):
    state_vector, param_vector = tangent
    propagated = tangents.apply_recurrent_jacobian(
      jac, cell.hidden_row, state_vector, routing=routing
    )
    sign_key, mix_key = jax.random.split(key)
    nu = jax.random.rademacher(
      sign_key, state_vector.shape, dtype=state_vector.dtype
    )
    # νᵀF = hhat ⊗ w is never formed for its norm (|hhat| |w|), and w once,
    # not inside the loop that writes the new (P, K n) factor.
    w = tangents.D_transpose(jac, nu).reshape(-1)
    if routing.jacobians_once:
      w = linalg.computed_once(w)
    norm = lambda x: jnp.linalg.norm(jnp.ravel(x))
    propagated_norm = norm(propagated)
    p1, p2, sign = kronecker.sign_trick_scales(
      propagated_norm,
      norm(param_vector),
      norm(nu),
      norm(jac.hhat) * norm(w),
      mix_key,
      param_vector.dtype,
    )
    # (H u) ⊗ v is zero when H u is: v is then dropped rather than mixed in
    # (at a sequence start u is zeroed and v keeps its stale entries,
    # `forget` below; otherwise only where H u = 0 exactly, where dropping
    # the zero term removes its noise and keeps the estimate unbiased).
    kept = jnp.where(propagated_norm > 0, param_vector / p1, 0)
    return (
      p1 * propagated + sign * p2 * nu,
      kept + (sign / p2) * jnp.outer(jac.hhat, w),
    )

  def forget(tangent, keep):
    state_vector, param_vector = tangent
    (state_vector,) = base.zeroed_where_reset(keep, state_vector)
    return state_vector, param_vector

  def readout(tangent, g):
    state_vector, param_vector = tangent
    return jnp.vdot(g, state_vector) * param_vector

  def batch_readout(tangents_, g):
    """`Σ_b (g_b · u_b) v_b`: one GEMV over the batch's `v`, no example's
    `(P, K n)` gradient formed."""
    state_vectors, param_vectors = tangents_
    weights = jnp.einsum("bsn,bsn->b", g, state_vectors)
    return jnp.tensordot(
      weights, param_vectors, axes=1, precision=jax.lax.Precision.HIGHEST
    )

  return base.build(
    "uoro",
    cell,
    zeros,
    update,
    readout,
    implementation="uoro",
    routing=routing,
    jacobians_once=True,
    forget=forget,
    batch_readout=batch_readout,
  )


def _tangent_floats(cell, input_size) -> int:
  p, k, s, n = dims(cell, input_size)
  return s * n + p * k * n


def _gemm_flops(cell, input_size) -> float:
  """`H u` and `νᵀ F` (matrix-vector products)."""
  p, k, _, n = dims(cell, input_size)
  return 2 * n * k * n + 2 * p * k * n


UORO = EstimatorSpec(
  "uoro",
  "UORO",
  uoro,
  Cost("n^2", "n^2", (2, 2), _tangent_floats, _gemm_flops),
  lru=autodiff_uoro,
  custom=autodiff_uoro,
)

__all__ = ["UORO", "uoro"]
