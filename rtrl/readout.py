"""Readouts: the map from a cell's hidden vector to a prediction.

A `Readout` is a pair of pure functions, optax style, and the one readout
API: `linear()` is the default of the trainers and of BPTT;
`feedback_alignment()` is the same linear map whose backward pass sends the
error to the hidden state through a fixed random matrix. The module
functions `init`, `logits` and `step_loss` are deprecated aliases of
`linear().init`, `linear().apply` and the softmax cross-entropy of
`linear().apply`: they warn (`DeprecationWarning`) and are removed in
0.3.0.
"""

from __future__ import annotations

from collections.abc import Callable
import math
from typing import Any, NamedTuple
import warnings

import jax
import jax.numpy as jnp
import optax

from rtrl import validation

LOG2 = math.log(2.0)


class Readout(NamedTuple):
  """A readout, per example.

  Attributes:
    init: `(key, hidden_size, num_outputs) -> params` (a pytree the
      optimiser updates along with the cell's).
    apply: `(params, hidden (n,)) -> prediction`, e.g. `(num_outputs,)`
      logits for `losses.softmax_cross_entropy`; the trainers vmap it.
    name: for logs.
  """

  init: Callable[..., Any]
  apply: Callable[..., jax.Array]
  name: str = "custom"


def _linear_init(key: jax.Array, hidden_size: int, num_outputs: int) -> dict:
  """`{'w': (n, num_outputs), 'b': (num_outputs,)}`, `w` normal scaled by
  1/sqrt(n), `b` zero."""
  dtype = jnp.asarray(0.0).dtype
  w = jax.random.normal(key, (hidden_size, num_outputs), dtype)
  return {
    "w": w / jnp.sqrt(jnp.asarray(hidden_size, dtype)),
    "b": jnp.zeros((num_outputs,), dtype),
  }


def _linear_apply(params: dict, hidden: jax.Array) -> jax.Array:
  return hidden @ params["w"] + params["b"]


def linear() -> Readout:
  """`hidden @ w + b`: the default readout.

  `init(key, n, num_outputs)` gives `{'w': (n, num_outputs), 'b':
  (num_outputs,)}`, `w` normal scaled by `1/sqrt(n)`, `b` zero; `apply(params,
  hidden (n,))` the `(num_outputs,)` logits.
  """
  return Readout(init=_linear_init, apply=_linear_apply, name="linear")


# The version that removes the deprecated module functions below.
_REMOVED_IN = "0.3.0"


def _deprecated(name: str, instead: str) -> None:
  warnings.warn(
    f"rtrl.readout.{name} is deprecated and will be removed in "
    f"{_REMOVED_IN}: use rtrl.readout.{instead}",
    DeprecationWarning,
    stacklevel=3,
  )


def init(key: jax.Array, hidden_size: int, num_outputs: int) -> dict:
  """Deprecated (removed in 0.3.0): `linear().init(key, hidden_size,
  num_outputs)`."""
  _deprecated("init", "linear().init")
  return linear().init(key, hidden_size, num_outputs)


def logits(params: dict, hidden: jax.Array) -> jax.Array:
  """Deprecated (removed in 0.3.0): `linear().apply(params, hidden)`."""
  _deprecated("logits", "linear().apply")
  return linear().apply(params, hidden)


def step_loss(
  params: dict, hidden: jax.Array, target: jax.Array, weight: jax.Array
) -> jax.Array:
  """Deprecated (removed in 0.3.0): `losses.softmax_cross_entropy(
  linear().apply(params, hidden), target) * weight`, the softmax
  cross-entropy (nats) of one example at one step, times `weight` (the loss
  mask: 0 where the step carries no target)."""
  _deprecated("step_loss", "linear() and rtrl.losses.softmax_cross_entropy")
  ce = optax.softmax_cross_entropy_with_integer_labels(
    linear().apply(params, hidden), target
  )
  return ce * weight


@jax.custom_vjp
def _feedback_product(hidden, weights, feedback):
  return hidden @ weights


def _feedback_product_fwd(hidden, weights, feedback):
  return hidden @ weights, (hidden, feedback)


def _feedback_product_bwd(residuals, error):
  hidden, feedback = residuals
  # The weights' cotangent is the exact one; the hidden state's uses the
  # feedback matrix where backprop would use `weights`; the feedback matrix
  # itself is never trained.
  return (
    error @ feedback.T,
    jnp.einsum("...n,...m->nm", hidden, error),
    jnp.zeros_like(feedback),
  )


_feedback_product.defvjp(_feedback_product_fwd, _feedback_product_bwd)


def feedback_alignment(scale: float = 1.0) -> Readout:
  """A linear readout trained with random feedback (feedback alignment).

  The forward pass is `hidden @ w + b`, as `linear()`, and `w`, `b` get their
  exact gradients. The error reaches the hidden state as `e @ B^T` instead of
  `e @ w^T` (`e = dL/dprediction`), with `B` a fixed random `(n,
  num_outputs)` matrix stored in the params as `'feedback'`. `B` gets an
  exactly zero gradient (a `custom_vjp`, behind a `stop_gradient`), so any
  optimiser without weight decay leaves it unchanged (Adam's update of a zero
  gradient is 0); with decoupled weight decay, mask it out (`optax.masked`).
  Every gradient of the cell, exact RTRL's, BPTT's or an approximation's,
  then follows `B`: this is the "random feedback" of RFLO.

  Scaling: `B` has i.i.d. N(0, scale² / n) entries, the distribution of `w`
  at initialisation, so that at the start `e @ B^T` has the size of the exact
  backpropagated signal `e @ w^T` (entries of variance `scale² ‖e‖² / n`).
  A larger `scale` acts as a larger learning rate for the cell only.

  References:
    Lillicrap et al., "Random synaptic feedback weights support error
    backpropagation for deep learning", Nature Communications 2016.
    Murray, "Local online learning in recurrent networks with random
    feedback (RFLO)", eLife 2019.
  """
  validation.positive_number("scale", scale)

  def fa_init(key, hidden_size, num_outputs):
    weights_key, feedback_key = jax.random.split(key)
    params = _linear_init(weights_key, hidden_size, num_outputs)
    feedback = scale * jax.random.normal(
      feedback_key, params["w"].shape, params["w"].dtype
    )
    params["feedback"] = feedback / jnp.sqrt(
      jnp.asarray(hidden_size, feedback.dtype)
    )
    return params

  def apply(params, hidden):
    feedback = jax.lax.stop_gradient(params["feedback"])
    return _feedback_product(hidden, params["w"], feedback) + params["b"]

  return Readout(init=fa_init, apply=apply, name="feedback_alignment")


__all__ = [
  "LOG2",
  "Readout",
  "feedback_alignment",
  "init",
  "linear",
  "logits",
  "step_loss",
]
