"""The pieces of r-OK's tangent step, compiled on real shapes, for
`bench_rtrl.py`'s breakdown (H·A, the Kronecker-sum reduction, the cell's
Jacobians)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import estimators
from rtrl import kronecker
from rtrl import online
from rtrl import tangents
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import scan_steps


def ok_pieces(cell, cell_params, chunk, rank, batch, steps):
  """Compiled pieces of r-OK's tangent step on real shapes (batch vmapped).

  Each carries its output into the next iteration so XLA cannot hoist it out
  of the scan: H·A (`tangents.propagate_factors`, the same for
  r-KF-AVG), the reduction (`kronecker.reduce_rows` on
  `tangents.factors_and_D_rows`, as in the estimator), and the cell's
  `linearized_step`.
  """
  estimator = estimators.make("ok", cell, rank=rank)
  keys = jax.random.split(jax.random.PRNGKey(2), batch)
  state0 = online.broadcast_state(cell.initial_state(), batch)
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    cell_params, cell.initial_state(), keys
  )
  # A few real OK steps give realistic factors and Jacobians.
  step = jax.jit(jax.vmap(estimator.step(cell_params)))
  for x in chunk.inputs[:5]:
    tstate, state0 = step(tstate, state0, x)
  linearize = jax.vmap(cell.linearized_step, in_axes=(None, 0, 0))
  _, jac = jax.jit(linearize)(cell_params, state0, chunk.inputs[5])
  u, factor = tstate.tangent
  hidden_row = cell.hidden_row

  def propagate(jac, factor):
    apply = jax.vmap(tangents.propagate_factors, in_axes=(0, None, 0))
    return scan_steps(lambda f: apply(jac, hidden_row, f), factor, steps)

  def reduce(jac, u, factor, keys):
    def one(jac, u, factor, key):
      us = jnp.concatenate([u, jac.hhat[None]], 0)
      rows = tangents.factors_and_D_rows(factor, jac, routing=estimator.routing)
      return kronecker.reduce_rows(us, rows, key, routing=estimator.routing)

    def body(carry):
      u, factor, keys = carry
      keys, sub = jax.vmap(jax.random.split, out_axes=1)(keys)
      u, factor = jax.vmap(one)(jac, u, factor, sub)
      return u, factor, keys

    return scan_steps(body, (u, factor, keys), steps)

  def linearized(inputs, state):
    def body(carry, x):
      state, acc = carry
      state, jac = linearize(cell_params, state, x)
      return (state, acc + jac.D), None

    return jax.lax.scan(body, (state, jnp.zeros_like(jac.D)), inputs)[0]

  return {
    "H·A": compiled(propagate, jac, factor),
    "reduce": compiled(reduce, jac, u, factor, keys),
    "linearize": compiled(linearized, chunk.inputs, state0),
  }
