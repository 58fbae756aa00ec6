"""The linear readout and per-step loss shared by online training and BPTT."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

LOG2 = math.log(2.0)


def init(key: jax.Array, hidden_size: int, num_outputs: int) -> dict:
  """`{'w': (n, num_outputs), 'b': (num_outputs,)}`, scaled by 1/sqrt(n)."""
  dtype = jnp.asarray(0.0).dtype
  w = jax.random.normal(key, (hidden_size, num_outputs), dtype)
  return {"w": w / jnp.sqrt(jnp.asarray(hidden_size, dtype)),
          "b": jnp.zeros((num_outputs,), dtype)}


def logits(params: dict, hidden: jax.Array) -> jax.Array:
  return hidden @ params["w"] + params["b"]


def step_loss(params: dict, hidden: jax.Array, target: jax.Array,
              weight: jax.Array) -> jax.Array:
  """Softmax cross-entropy (nats) of one example at one step, times `weight`
  (the loss mask: 0 where the step carries no target)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(
      logits(params, hidden), target)
  return ce * weight
