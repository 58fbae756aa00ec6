"""Potter's square-root form of the RLS recursion: ``P = S Sᵀ`` stays
positive semi-definite in any precision (`rls.scale_by_rls(square_root=True)`).

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eqs. (53)-(55), (63), (94)-(97). J. E. Potter's square-root
  Kalman update (Battin, "Astronautical Guidance", 1964).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rls_square_root_layer_step(
  factor: jax.Array,
  x: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  forgetting_factor,
  ratio,
  gradient_scale,
) -> tuple[jax.Array, jax.Array]:
  r"""`rls_layer_step` on a square root ``S`` of ``P = S Sᵀ``: ``(direction,
  S_s)``.

  Potter's square-root form of the same recursion. With ``f = Sᵀ x``,
  ``u = S f = P x`` and ``h = λ + k T fᵀf``:

  .. math::
    \text{direction} = \frac{η}{h} S (S^T \nabla_Θ),\quad
    S_s = \frac{1}{\sqrt{λ}}\big(S - β\, u f^T\big),\quad
    β = \frac{k T}{h\,(1 + \sqrt{λ / h})}

  Then ``S_s S_sᵀ = (P - (k T / h) u uᵀ) / λ``, eqs. (53), (94), because
  ``2β - β² fᵀf = k T / h``; ``β`` is written without ``1 - sqrt(λ/h)`` so
  that no cancellation occurs when ``k T fᵀf`` is small. Whatever the
  rounding, ``P = S Sᵀ`` stays symmetric positive semi-definite, which the
  full form loses in float32 on ill-conditioned input streams (a large
  common offset, a nearly collinear bias column). Cost: ``P ∇`` becomes two
  products, ``S (Sᵀ ∇)``.
  """
  dtype = factor.dtype
  lam = jnp.asarray(forgetting_factor, dtype)
  k_t = jnp.asarray(ratio, dtype) * steps
  eta = jnp.asarray(gradient_scale, dtype)
  highest = jax.lax.Precision.HIGHEST
  f = jnp.matmul(factor.T, x, precision=highest)
  u = jnp.matmul(factor, f, precision=highest)
  h = lam + k_t * jnp.dot(f, f, precision=highest)
  direction = (eta / h) * (factor @ (factor.T @ grad))
  beta = k_t / (h * (1 + jnp.sqrt(lam / h)))
  new_factor = (factor - beta * jnp.outer(u, f)) / jnp.sqrt(lam)
  return direction, new_factor
