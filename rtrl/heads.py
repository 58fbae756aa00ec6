"""Heads: the position-wise map from a layer's cell output (and the layer's
input) to the next layer's input, in a stack of recurrent layers
(`rtrl.stack`). A head has no memory, so its parameters take the step's
immediate gradient.

    identity()          the next layer reads the cell's output vector (a
                        classic stacked RNN); no parameters
    lru_block(d_model)  the LRU block of Orvieto et al. 2023 / Zucchet et
                        al. 2023 around the recurrence: `y = C [Re h, Im h]
                        + D u` (D element-wise when the input has d_model
                        entries, a matrix otherwise), GELU, a gated linear
                        unit, the residual `+ u` when sizes match, and a
                        layer norm

A head is `Head(init, apply, output_size)`, per example:
`init(key, feature_size, input_size) -> params`, `apply(params, features,
layer_input) -> (output_size(feature_size, input_size),)`.
"""

from __future__ import annotations

from collections.abc import Callable
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl import validation

LAYER_NORM_EPSILON = 1e-5


class Head(NamedTuple):
  """A layer's position-wise map to the next layer's input.

  Attributes:
    init: `(key, features, inputs) -> params`.
    apply: `(params, features (n,), layer_input (I,)) -> output`.
    output_size: `(features, inputs) -> the output's length`.
    name: for logs.
  """

  init: Callable[..., Any]
  apply: Callable[..., jax.Array]
  output_size: Callable[[int, int | None], int]
  name: str = "custom"


def identity() -> Head:
  """The cell's output vector, unchanged: the next layer's input."""
  return Head(
    init=lambda key, features, inputs: {},
    apply=lambda params, features, layer_input: features,
    output_size=lambda features, inputs: features,
    name="identity",
  )


def _dense(key, fan_in: int, fan_out: int, dtype):
  return jax.random.normal(key, (fan_in, fan_out), dtype) / math.sqrt(fan_in)


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
  """Layer normalisation of a vector `x`, then `* scale + bias`."""
  mean = x.mean()
  variance = ((x - mean) ** 2).mean()
  return (x - mean) * jax.lax.rsqrt(
    variance + LAYER_NORM_EPSILON
  ) * scale + bias


def lru_block(model_size: int) -> Head:
  """The LRU block's position-wise part, with `model_size` outputs.

  `y = features @ C + skip(u)`, `skip(u) = D ⊙ u` when the layer input `u`
  has `model_size` entries, else `u @ D` (the first layer of a stack fed
  raw inputs); then `z = GELU(y)`, `z = (z W_a + b_a) ⊙ sigmoid(z W_g +
  b_g)` (a gated linear unit), `+ u` when sizes match, and a layer norm with
  scale and bias. `C` acting on `[Re h, Im h]` is the LRU's `Re(C h)`.
  """
  model_size = validation.positive_int("model_size", model_size)

  def init(key, feature_size, input_size):
    dtype = jnp.asarray(0.0).dtype
    k_c, k_d, k_a, k_g = jax.random.split(key, 4)
    params = {
      "C": _dense(k_c, feature_size, model_size, dtype),
      "W_a": _dense(k_a, model_size, model_size, dtype),
      "b_a": jnp.zeros((model_size,), dtype),
      "W_g": _dense(k_g, model_size, model_size, dtype),
      "b_g": jnp.zeros((model_size,), dtype),
      "norm_scale": jnp.ones((model_size,), dtype),
      "norm_bias": jnp.zeros((model_size,), dtype),
    }
    if input_size == model_size:
      params["D"] = jax.random.normal(k_d, (model_size,), dtype)
    else:
      params["D"] = _dense(k_d, input_size, model_size, dtype)
    return params

  def apply(params, features, layer_input):
    u = layer_input.astype(features.dtype)
    skip = params["D"] * u if params["D"].ndim == 1 else u @ params["D"]
    z = jax.nn.gelu(features @ params["C"] + skip)
    z = (z @ params["W_a"] + params["b_a"]) * jax.nn.sigmoid(
      z @ params["W_g"] + params["b_g"]
    )
    if u.shape == z.shape:
      z = z + u
    return layer_norm(z, params["norm_scale"], params["norm_bias"])

  return Head(
    init=init,
    apply=apply,
    output_size=lambda features, inputs: model_size,
    name=f"lru_block({model_size})",
  )
