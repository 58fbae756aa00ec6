"""Per-step losses: `loss(prediction, target) -> scalar`, per example.

A `Loss` is any such pure function; the trainers vmap it over the batch,
multiply by `StepBatch.weights` (the mask) and average over the batch. Each
loss here checks that the target fits the prediction (static shapes, so at
trace time) and raises a ValueError naming `targets` when it does not.

  softmax_cross_entropy         integer class label, `StepBatch.targets (B,)`;
                                the default.
  squared_error                 regression, `targets (B,) + prediction shape`.
  sigmoid_binary_cross_entropy  independent binary labels in [0, 1],
                                `targets (B,) + prediction shape`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

Loss = Callable[[jax.Array, jax.Array], jax.Array]


def _same_shape(name: str, prediction: jax.Array, target: jax.Array) -> None:
  if jnp.shape(target) != jnp.shape(prediction):
    raise ValueError(
      f"targets: {name} needs a per-example target of the prediction's "
      f"shape {jnp.shape(prediction)} (StepBatch.targets (B,) + that), got "
      f"{jnp.shape(target)}"
    )


def softmax_cross_entropy(
  prediction: jax.Array, target: jax.Array
) -> jax.Array:
  """Cross-entropy (nats) of `softmax(prediction)` `(C,)` at the integer
  label `target` `()`."""
  if jnp.shape(target) != jnp.shape(prediction)[:-1] or not jnp.issubdtype(
    jnp.result_type(target), jnp.integer
  ):
    raise ValueError(
      "targets: softmax_cross_entropy needs one integer class label per "
      f"example (StepBatch.targets (B,) int), got shape {jnp.shape(target)}"
      f" and dtype {jnp.result_type(target)}; for regression use "
      "losses.squared_error"
    )
  return optax.softmax_cross_entropy_with_integer_labels(prediction, target)


def squared_error(prediction: jax.Array, target: jax.Array) -> jax.Array:
  """`½ ‖prediction - target‖²`, summed over the output entries.

  The ½ makes the gradient the residual `prediction - target` itself, the
  error that BPTT, RTRL and feedback alignment propagate (as
  `softmax - onehot` is for the cross-entropy), and it is the convention of
  Williams & Zipser's RTRL. The mean squared error per output is therefore
  `2 * loss / num_outputs`.
  """
  _same_shape("squared_error", prediction, target)
  residual = prediction - target
  return 0.5 * jnp.sum(residual * residual)


def sigmoid_binary_cross_entropy(
  prediction: jax.Array, target: jax.Array
) -> jax.Array:
  """Σ over outputs of the cross-entropy (nats) of `sigmoid(prediction)` at
  labels `target` in [0, 1] (independent binary outputs: multi-label)."""
  _same_shape("sigmoid_binary_cross_entropy", prediction, target)
  return jnp.sum(optax.sigmoid_binary_cross_entropy(prediction, target))


def check(
  loss: Loss, prediction: jax.ShapeDtypeStruct, target: jax.ShapeDtypeStruct
) -> None:
  """Raises a ValueError naming `loss` or `targets` unless `loss` maps one
  example's prediction and target to a scalar (`jax.eval_shape`: no FLOPs).
  """
  if not callable(loss):
    raise ValueError(
      f"loss must be a function (prediction, target) -> "
      f"scalar, e.g. rtrl.losses.squared_error, got {loss!r}"
    )
  try:
    out = jax.eval_shape(loss, prediction, target)
  except TypeError as e:
    raise ValueError(
      f"loss {getattr(loss, '__name__', loss)!r} cannot take a prediction "
      f"of shape {prediction.shape} and a target of shape {target.shape} "
      f"(one example of targets): {e}"
    ) from e
  if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != ():
    shape = getattr(out, "shape", out)
    raise ValueError(
      f"loss must return a scalar per example (one prediction, one "
      f"target), got {shape} from {getattr(loss, '__name__', loss)!r} for a "
      f"prediction of shape {prediction.shape}"
    )
