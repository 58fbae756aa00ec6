r"""Layer-wise grafting: one transform's direction at another's step size.

``graft(magnitude, direction)`` runs both transforms on the same gradients and
returns, for every parameter array, ``direction``'s update rescaled to the
norm of ``magnitude``'s:

.. math::
  u = \frac{\lVert m \rVert}{\max(\lVert d \rVert, ε)}\, d,

where ``m`` and ``d`` are the two updates of that array. A second-order
direction (an RLS form's ``P ∇``) then takes its step size per layer from a
first-order method whose learning rate is known to work (Adam's), so the RLS
step needs no per-task ``η``: grafting as in Shampoo (Agarwal et al., 2020,
"Disentangling Adaptive Gradient Methods from Learning Rates"; Anil et al.,
2020, "Scalable Second Order Optimization for Deep Learning", section 4).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


class GraftState(NamedTuple):
  """State of `graft`: each transform's own state.

  Attributes:
    magnitude: the state of the transform whose update norms are used.
    direction: the state of the transform whose update directions are used.
  """

  magnitude: Any
  direction: Any


def graft(
  magnitude: optax.GradientTransformation,
  direction: optax.GradientTransformation,
  eps: float = 1e-16,
) -> optax.GradientTransformationExtraArgs:
  """Per parameter array, `direction`'s update at `magnitude`'s norm.

  Both transforms see the same ``updates``, ``params`` and extra arguments
  (``layer_inputs`` for an RLS form; a transform without extra-argument
  support ignores them). Masked leaves (`optax.MaskedNode`) pass through.

  Args:
    magnitude: gives each array's update norm, e.g. `optax.scale_by_adam()`.
    direction: gives each array's update direction, e.g.
      `rls.scale_by_rls_damped_second_moment()`.
    eps: ``ε > 0``, the smallest direction norm divided by (an all-zero
      direction stays zero).

  Returns:
    An `optax.GradientTransformationExtraArgs` with a `GraftState`. Its
    updates have the sign of `direction`'s (follow with a negative scaling,
    e.g. `optax.scale(-learning_rate)`, to descend).

  Raises:
    ValueError: if `magnitude` or `direction` is not an optax transformation,
      or ``eps`` is not positive.
  """
  for name, tx in (("magnitude", magnitude), ("direction", direction)):
    if not isinstance(tx, optax.GradientTransformation):
      raise ValueError(
        f"{name} must be an optax.GradientTransformation, got {tx!r}."
      )
  if not eps > 0:
    raise ValueError(f"eps must be > 0, got {eps!r}.")
  magnitude = optax.with_extra_args_support(magnitude)
  direction = optax.with_extra_args_support(direction)

  def init_fn(params):
    return GraftState(magnitude.init(params), direction.init(params))

  def rescale(step, unit):
    if unit is None or isinstance(unit, optax.MaskedNode):
      return unit
    norm = jnp.sqrt(jnp.sum(jnp.square(unit)))
    scale = jnp.sqrt(jnp.sum(jnp.square(step))) / jnp.maximum(norm, eps)
    return (scale * unit).astype(unit.dtype)

  def update_fn(updates, state, params=None, **extra_args):
    steps, magnitude_state = magnitude.update(
      updates, state.magnitude, params, **extra_args
    )
    units, direction_state = direction.update(
      updates, state.direction, params, **extra_args
    )
    grafted = jax.tree.map(
      rescale,
      steps,
      units,
      is_leaf=lambda x: x is None or isinstance(x, optax.MaskedNode),
    )
    return grafted, GraftState(magnitude_state, direction_state)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
