"""Helpers shared by the `rls` tests: jitted init and capture (one XLA
compilation is much cheaper on CPU than compiling every eager op), and the
MSE of eq. (57) with the layer inputs of the same forward pass."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import rls
from rls import input_samples


def init_variables(model, *args, seed=0, **kwargs):
  """`model.init(PRNGKey(seed), *args, **kwargs)`, jitted."""
  return jax.jit(functools.partial(model.init, **kwargs))(
    jax.random.PRNGKey(seed), *args
  )


def capture(model, variables, *args, **kwargs):
  """`rls.layer_inputs(model.apply, variables, *args, **kwargs)`, jitted."""
  capture_fn = functools.partial(rls.layer_inputs, model.apply, **kwargs)
  return jax.jit(capture_fn)(variables, *args)


def mse_with_layer_inputs(model):
  """`loss_fn(params, x, z) -> (||model(x) - z||² / (2M), layer inputs)`."""

  def loss_fn(params, x, z):
    outputs, xbar = rls.layer_inputs(model.apply, {"params": params}, x)
    return 0.5 * jnp.mean(jnp.sum((outputs - z) ** 2, axis=-1)), xbar

  return loss_fn


def dense_params(fan_in, out, dtype, seed=0):
  """A dense layer's `{"kernel": (fan_in, out), "bias": (out,)}`, normal."""
  rng = np.random.default_rng(seed)
  return {
    "kernel": jnp.asarray(rng.normal(size=(fan_in, out)), dtype),
    "bias": jnp.asarray(rng.normal(size=out), dtype),
  }


def layer_input_entry(rows):
  """`LayerInputSamples` of `rows` `(samples, fan_in)`: their mean, T = 1."""
  return input_samples.LayerInputSamples(
    rows.mean(0), jnp.asarray(1, jnp.int32), rows
  )


def random_like(rng, params):
  """Standard normal arrays shaped as `params` (NumPy `rng`)."""
  return jax.tree.map(lambda q: jnp.asarray(rng.normal(size=q.shape)), params)
