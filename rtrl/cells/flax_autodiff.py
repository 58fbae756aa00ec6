"""Any Flax recurrent cell as a `CustomCell` through its call (the autodiff
path: exact RTRL, UORO, SnAp-1, BPTT and TBPTT), Flax's own parameter
pytree as its params.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.cells.custom import CustomCell
from rtrl.cells.flax_call_checks import check_call
from rtrl.cells.flax_call_checks import check_pure_step


class _FlaxAutodiffCell(CustomCell):
  """A `CustomCell` over a Flax module's call, for the params it came with
  (so its input size is known rather than searched for)."""

  def __init__(self, *args, input_size: int, **kwargs):
    self._known_input_size = input_size
    super().__init__(*args, **kwargs)

  def input_size(self, params) -> int:
    del params
    return self._known_input_size


def _initial_carry(api: str, module: Any, input_size: int, initial_carry):
  if initial_carry is not None:
    return jax.tree_util.tree_map(jnp.asarray, initial_carry)
  if not hasattr(module, "initialize_carry"):
    raise ValueError(
      f"initial_carry is required for {type(module).__name__}, which has no "
      f"initialize_carry: pass initial_carry=, the carry at a sequence start "
      f"for one example (no batch axis)"
    )
  if api == "linen":
    return module.initialize_carry(jax.random.PRNGKey(0), (input_size,))
  from flax import nnx  # pylint: disable=g-import-not-at-top

  return module.initialize_carry((input_size,), rngs=nnx.Rngs(0))


def _output_is_carry_leaf(call, params, carry, x) -> int | None:
  """Index of the carry leaf that `y` is (Flax's cells return `h` twice),
  read off the traced program; None when `y` is computed apart."""
  jaxpr = jax.make_jaxpr(call)(params, carry, x).jaxpr
  num_carry = len(jax.tree_util.tree_leaves(carry))
  y_var = jaxpr.outvars[num_carry]
  for index, var in enumerate(jaxpr.outvars[:num_carry]):
    if var is y_var:
      return index
  return None


def _state_step_output(call, carry0, y, carry_leaf):
  """`(initial_state, step, output)` of the cell over `call`: the carry alone
  when `y` is its leaf `carry_leaf`, else the carry with the last `y`."""
  if carry_leaf is not None:
    initial_state = carry0

    def step(p, carry, x):
      return call(p, carry, x)[0]

    def output(carry):
      return jax.tree_util.tree_leaves(carry)[carry_leaf]
  else:
    initial_state = (carry0, jnp.zeros(y.shape, y.dtype))

    def step(p, state, x):
      new_carry, new_y = call(p, state[0], x)
      return (new_carry, new_y)

    def output(state):
      return state[1]

  return initial_state, step, output


def autodiff_cell(api, module, params, input_size, initial_carry, why):
  """`(CustomCell, Flax params)` over the module's call."""
  where = f"{api}.{type(module).__name__}"
  if api == "nnx":
    from flax import nnx  # pylint: disable=g-import-not-at-top

    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def call(p, carry, x):
      return nnx.merge(graphdef, p, rest)(carry, x)

    if input_size is None:
      input_size = getattr(module, "in_features", None)
  else:
    rest = None

    def call(p, carry, x):
      return module.apply({"params": p}, carry, x)

  if input_size is None:
    raise ValueError(
      f"input_size is required for {where} (it has no in_features): pass "
      f"from_flax(module, input_size=I), the size of one step's x"
    )
  input_size = validation.positive_int("input_size", input_size)
  carry0 = _initial_carry(api, module, input_size, initial_carry)
  leaves = jax.tree_util.tree_leaves(params)
  dtype = jnp.result_type(*leaves) if leaves else jnp.float32
  x0 = jnp.zeros((input_size,), dtype)
  if api == "nnx":  # first, concretely: a changing state fails under trace
    probe = jnp.linspace(0.5, 1.5, input_size, dtype=dtype)  # moves stats
    check_pure_step(graphdef, params, rest, carry0, probe, where)
  _, y = check_call(call, params, carry0, x0, where)
  carry_leaf = _output_is_carry_leaf(call, params, carry0, x0)
  initial_state, step, output = _state_step_output(call, carry0, y, carry_leaf)

  def init(key, size):
    del key
    if size != input_size:
      raise ValueError(
        f"input_size must be {input_size}, the size {where}'s params were "
        f"built for, got {size}"
      )
    return params

  name = f"flax {where}" + (f" (autodiff path: {why})" if why else "")
  cell = _FlaxAutodiffCell(
    step, init, initial_state, output, name=name, input_size=input_size
  )
  return cell, params


__all__ = ["autodiff_cell"]
