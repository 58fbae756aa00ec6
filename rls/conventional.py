"""The paper's RLS update on ``P`` itself (the conventional form).

Every layer keeps ``P``, the inverse of its (exponentially weighted) input
autocorrelation, updated by Sherman-Morrison with the minibatch-mean input
``x̄``; the gradient of ``Θ = [kernel; bias]`` is preconditioned by ``(η/h)
P``. In float32 ``P`` can lose positive definiteness on ill-conditioned input
streams; `rls.square_root` keeps ``P = S Sᵀ`` instead, and `rls.scale_by_rls`
picks that form by default for float32 ``P``.

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eqs. (51)-(55), (63), (72)-(75), (92)-(97).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rls import hyperparameters
from rls import layer_tree
from rls import layerwise

_HIGHEST = jax.lax.Precision.HIGHEST


class ScaleByRLSState(NamedTuple):
  """State of `scale_by_rls_conventional` (and of `rls.scale_by_rls` with
  float64 ``P`` or ``square_root=False``).

  Attributes:
    inverse_correlation: ``P`` of every layer this transformation
      preconditions, a nested dict mirroring the params tree down to the layer
      (``{'Dense_0': P}``), each ``P`` of shape ``(fan_in + 1, fan_in + 1)``
      (``fan_in`` when the layer has no bias); the array itself when the
      params are a single layer at the root (a bare ``nn.Dense``). Its
      structure depends only on the params given to ``init``.
  """

  inverse_correlation: Any

  def times_inverse_correlation(
    self, path: layer_tree.Path, matrix: jax.Array
  ) -> jax.Array:
    """``P M`` for the layer at `path` (KeyError if it has no ``P``)."""
    p = layer_tree.nested_get(self.inverse_correlation, path)
    return p @ matrix.astype(p.dtype)


def rls_layer_step(
  p: jax.Array,
  x: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  forgetting_factor,
  ratio,
  gradient_scale,
) -> tuple[jax.Array, jax.Array]:
  r"""One layer's RLS update: ``(direction, P_s)`` from ``P = P_{s-1}``.

  With ``x = [x̄; 1]`` (the 1 only if the layer has a bias), ``T = steps``
  and ``∇_Θ = grad`` (the loss gradient of the augmented matrix):

  .. math::
    u = P x,\quad h = λ + k T\, x^T u,\quad
    \text{direction} = \frac{η}{h} P \nabla_Θ,\quad
    P_s = \frac{1}{λ}\Big(P - \frac{k T}{h} u u^T\Big)

  which are eqs. (54), (55), (63) and (53) (``T = 1``) and (95), (96), (97),
  (94) (recurrent layers, ``T`` time steps). ``λ`` divides the whole bracket,
  ``k T`` multiplies both the rank-one correction and ``x^T u`` in ``h``, and
  the direction uses the *old* ``P_{s-1}`` scaled by ``1/h`` (eq. 63);
  Sherman-Morrison gives ``P_s x = u / h``, so for a single example this is
  the textbook RLS gain. Everything is computed in ``P``'s dtype.
  """
  dtype = p.dtype
  lam = jnp.asarray(forgetting_factor, dtype)
  k_t = jnp.asarray(ratio, dtype) * steps
  eta = jnp.asarray(gradient_scale, dtype)
  # u feeds the recursion for P, so keep it at full precision on GPU/TPU.
  u = jnp.matmul(p, x, precision=_HIGHEST)
  h = lam + k_t * jnp.dot(x, u, precision=_HIGHEST)
  direction = (eta / h) * (p @ grad)  # eq. (63) with P_{s-1}.
  new_p = (p - (k_t / h) * jnp.outer(u, u)) / lam  # eqs. (53), (94).
  return direction, new_p


def scale_by_rls_conventional(
  forgetting_factor: float = 1.0,
  ratio: float = 0.1,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  passthrough: bool = False,
  preconditioner_dtype: Any | None = None,
) -> optax.GradientTransformationExtraArgs:
  r"""The RLS preconditioner of Zhang et al. (2021), updating ``P`` itself.

  Every layer ``l`` (a params mapping with a ``'kernel'``, optionally a
  ``'bias'``) with an entry ``x̄, T`` in ``layer_inputs`` gets the direction
  and the update of its ``P`` (`rls_layer_step`), eqs. (53)-(55), (63):

  .. math::
    u = P_{s-1} x,\quad h_s = λ + k T\, x^T u,\quad
    d_s = \frac{η}{h_s} P_{s-1} \nabla_Θ,\quad
    P_s = \frac{1}{λ}\Big(P_{s-1} - \frac{k T}{h_s} u u^T\Big)

  with ``x = [x̄; 1]`` and ``∇_Θ`` the loss gradient of ``Θ =
  [kernel.reshape(fan_in, out); bias]``; ``d_s`` is split back into the kernel
  and bias shapes. Follow with a negative scaling (as `rls.rls` does) to
  descend. In float32 ``P`` can lose positive definiteness when ``k T x̄ᵀ P
  x̄`` nears ``1/eps`` (a nearly collinear bias column);
  `rls.scale_by_rls_square_root` cannot.

  Parameters that are not the kernel or bias of a layer (embeddings,
  normalisation scales) and layers with no entry in ``layer_inputs`` raise a
  ValueError naming them, unless ``passthrough``, which lets their gradients
  through unchanged (their ``P``, if any, is kept). Masked-out leaves
  (`optax.MaskedNode`, from `optax.multi_transform` / `optax.masked`) are
  skipped, and their ``layer_inputs`` entries ignored.

  Args:
    forgetting_factor: ``λ`` in (0, 1] (eq. 19; paper: 1).
    ratio: ``k > 0``, the average-approximation ratio (eq. 33; paper: 0.1).
    gradient_scale: ``η > 0`` (eq. 47; paper: 1): one number, or a dict
      mirroring the params whose numbers apply to the layer / sub-tree at
      their path.
    init_scale: ``P_0 = init_scale · I`` (paper: 1).
    passthrough: let parameters without a layer input through unchanged.
    preconditioner_dtype: floating dtype of ``P``; by default the kernel's
      dtype promoted to at least float32.

  Returns:
    An `optax.GradientTransformationExtraArgs` whose ``update(updates, state,
    params=None, *, layer_inputs, **extra_args)`` needs ``layer_inputs`` (from
    `rls.layer_inputs`); its state is a `ScaleByRLSState`. Updates keep the
    dtype of the gradients.

  References:
    Zhang et al., 2021, eqs. (51)-(55), (63), (72)-(75), (92)-(97).
  """
  hyperparameters.check_hyperparameters(
    forgetting_factor, ratio, gradient_scale, init_scale
  )
  hyperparameters.check_preconditioner_dtype(preconditioner_dtype)

  def init_layer(layer):
    dtype = layerwise.matrix_dtype(layer, preconditioner_dtype)
    return layerwise.scaled_identity(layer, init_scale, dtype)

  def update_layer(p, layer, entry, grad, eta):
    x, steps = layerwise.augmented_input(layer, entry, p.dtype)
    return rls_layer_step(p, x, steps, grad, forgetting_factor, ratio, eta)

  return layerwise.layerwise_transform(
    ScaleByRLSState,
    init_layer,
    update_layer,
    is_entry=layerwise.is_layer_input_entry,
    gradient_scale=gradient_scale,
    passthrough=passthrough,
  )
