"""Potter's square-root form of the RLS recursion: ``P = S Sᵀ`` stays
positive semi-definite in any precision.

The same recursion as `rls.conventional`, equal in exact arithmetic, kept on
a square root ``S`` of ``P``. `rls.scale_by_rls` uses this form by default
when ``P`` is narrower than float64.

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eqs. (53)-(55), (63), (94)-(97). J. E. Potter's square-root
  Kalman update (Battin, "Astronautical Guidance", 1964).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rls import hyperparameters
from rls import layer_tree
from rls import layerwise
from rls import small_linalg

_HIGHEST = jax.lax.Precision.HIGHEST


class ScaleByRLSSquareRootState(NamedTuple):
  """State of `scale_by_rls_square_root` (and of `rls.scale_by_rls` with
  float32 ``P``, or ``square_root=True``).

  Attributes:
    inverse_correlation_factor: ``S`` with ``P = S Sᵀ`` for every layer, in
      the layout of `rls.ScaleByRLSState.inverse_correlation` (same shapes).
      ``P`` is positive semi-definite by construction, whatever the rounding.
  """

  inverse_correlation_factor: Any

  @property
  def inverse_correlation(self) -> Any:
    """Every layer's ``P = S Sᵀ`` (formed, and symmetrised, on access)."""
    return jax.tree.map(
      small_linalg.factor_product, self.inverse_correlation_factor
    )

  def times_inverse_correlation(
    self, path: layer_tree.Path, matrix: jax.Array
  ) -> jax.Array:
    """``P M = S (Sᵀ M)`` for the layer at `path` (KeyError if none)."""
    s = layer_tree.nested_get(self.inverse_correlation_factor, path)
    return s @ (s.T @ matrix.astype(s.dtype))


def rls_square_root_layer_step(
  factor: jax.Array,
  x: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  forgetting_factor,
  ratio,
  gradient_scale,
) -> tuple[jax.Array, jax.Array]:
  r"""`rls.conventional.rls_layer_step` on a square root ``S`` of ``P = S
  Sᵀ``: ``(direction, S_s)``.

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
  conventional form loses in float32 on ill-conditioned input streams (a
  large common offset, a nearly collinear bias column). Cost: ``P ∇``
  becomes two products, ``S (Sᵀ ∇)``.
  """
  dtype = factor.dtype
  lam = jnp.asarray(forgetting_factor, dtype)
  k_t = jnp.asarray(ratio, dtype) * steps
  eta = jnp.asarray(gradient_scale, dtype)
  f = jnp.matmul(factor.T, x, precision=_HIGHEST)
  u = jnp.matmul(factor, f, precision=_HIGHEST)
  h = lam + k_t * jnp.dot(f, f, precision=_HIGHEST)
  direction = (eta / h) * (factor @ (factor.T @ grad))
  beta = k_t / (h * (1 + jnp.sqrt(lam / h)))
  new_factor = (factor - beta * jnp.outer(u, f)) / jnp.sqrt(lam)
  return direction, new_factor


def scale_by_rls_square_root(
  forgetting_factor: float = 1.0,
  ratio: float = 0.1,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  passthrough: bool = False,
  preconditioner_dtype: Any | None = None,
) -> optax.GradientTransformationExtraArgs:
  r"""The RLS preconditioner of Zhang et al. (2021) on ``S``, ``P = S Sᵀ``.

  The recursion of `rls.scale_by_rls_conventional` (eqs. 53-55, 63) in
  Potter's square-root form (`rls_square_root_layer_step`): with ``x = [x̄;
  1]``, ``f = S_{s-1}ᵀ x``, ``u = S_{s-1} f``, ``h_s = λ + k T fᵀ f``,

  .. math::
    d_s = \frac{η}{h_s} S_{s-1} (S_{s-1}^T \nabla_Θ),\quad
    S_s = \frac{1}{\sqrt{λ}}\Big(S_{s-1} - \frac{k T}{h_s (1 +
    \sqrt{λ / h_s})} u f^T\Big),

  so that ``S_s S_sᵀ = (P_{s-1} - (k T/h_s) u uᵀ)/λ``, eq. (53): equal to the
  conventional form in exact arithmetic, and ``P = S Sᵀ`` symmetric positive
  semi-definite in any precision. Costs one more ``(fan_in + 1)² · out``
  product per layer and step than the conventional form
  (`scripts/bench_rls.py`). Everything else (``layer_inputs``,
  ``passthrough``, masking) is as `rls.scale_by_rls_conventional`.

  Args:
    forgetting_factor: ``λ`` in (0, 1] (eq. 19; paper: 1).
    ratio: ``k > 0`` (eq. 33; paper: 0.1).
    gradient_scale: ``η > 0`` (eq. 47; paper: 1), a number or a per-layer
      dict.
    init_scale: ``P_0 = init_scale · I``, i.e. ``S_0 = √init_scale · I``.
    passthrough: let parameters without a layer input through unchanged.
    preconditioner_dtype: floating dtype of ``S``; by default the kernel's
      dtype promoted to at least float32.

  Returns:
    An `optax.GradientTransformationExtraArgs` taking ``layer_inputs=``; its
    state is a `ScaleByRLSSquareRootState`.

  References:
    Zhang et al., 2021, eqs. (53)-(55), (63), (94)-(97).
  """
  hyperparameters.check_hyperparameters(
    forgetting_factor, ratio, gradient_scale, init_scale
  )
  hyperparameters.check_preconditioner_dtype(preconditioner_dtype)

  def init_layer(layer):
    dtype = layerwise.matrix_dtype(layer, preconditioner_dtype)
    return layerwise.scaled_identity(
      layer, jnp.sqrt(jnp.asarray(init_scale, dtype)), dtype
    )

  def update_layer(factor, layer, entry, grad, eta):
    x, steps = layerwise.augmented_input(layer, entry, factor.dtype)
    return rls_square_root_layer_step(
      factor, x, steps, grad, forgetting_factor, ratio, eta
    )

  return layerwise.layerwise_transform(
    ScaleByRLSSquareRootState,
    init_layer,
    update_layer,
    is_entry=layerwise.is_layer_input_entry,
    gradient_scale=gradient_scale,
    passthrough=passthrough,
  )
