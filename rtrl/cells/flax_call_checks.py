"""Whether a Flax module's call is a cell step the online trainers can use:
`(carry, x) -> (carry, y)`, `y` one 1-D array, a pure function of
`(params, carry, x)` (no RNG stream, no changing batch statistics).

Each check raises a ValueError naming `module` and what to change.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# Linen's errors for a call that needs more than `{'params': ...}`.
_LINEN_STATE_ERRORS = {
  "InvalidRngError": "an RNG stream",
  "ScopeCollectionNotFound": "a variable collection (batch statistics?)",
  "ModifyScopeVariableError": "to change a variable collection",
}


def check_call(call, params, carry, x, where: str):
  """The abstract `(carry', y)` of one call, or a ValueError naming
  `module` when the call is not `(carry, x) -> (carry, y)`."""
  try:
    out = jax.eval_shape(call, params, carry, x)
  except Exception as error:  # pylint: disable=broad-except
    what = _LINEN_STATE_ERRORS.get(type(error).__name__)
    if what is not None:
      raise ValueError(
        f"module ({where}) needs {what} besides params ({error}); the online "
        f"trainers need the step to be a pure function of (params, carry, x)"
        f": make that layer deterministic (e.g. nn.Dropout(deterministic="
        f"True), nn.BatchNorm(use_running_average=True) with its statistics "
        f"as constants), or write the step as an rtrl.cells.CustomCell that "
        f"carries that state"
      ) from error
    raise _not_a_cell(where, carry, x, error) from error
  if not (isinstance(out, (tuple, list)) and len(out) == 2):
    raise ValueError(
      f"module ({where}) must return (carry, y) from module(carry, x); it "
      f"returned {_shapes(out)}"
    )
  y = out[1]
  if not (isinstance(y, jax.ShapeDtypeStruct) and y.ndim == 1):
    raise ValueError(
      f"module ({where})'s output y (of (carry, y) = module(carry, x)) must "
      f"be one 1-D array per example, the vector fed to the readout; got "
      f"{_shapes(y)}"
    )
  return out


def _not_a_cell(where: str, carry, x, error: Exception) -> ValueError:
  return ValueError(
    f"module ({where}) must be a recurrent cell called as module(carry, x)"
    f" -> (carry, y); calling it on a carry {_shapes(carry)} and x of "
    f"shape {x.shape} failed: {type(error).__name__}: {error}"
  )


def _shapes(tree) -> str:
  return str(jax.tree_util.tree_map(lambda a: tuple(jnp.shape(a)), tree))


def check_pure_step(graphdef, params, rest, carry, x, where: str) -> None:
  """A ValueError naming the variable when one call of the NNX module
  changes its non-parameter state (an RNG stream, batch statistics)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top

  # Copied first: the merged module may share its variables with `rest`.
  before = {path: _values(var) for path, var in nnx.to_flat_state(rest)}
  module = nnx.merge(graphdef, params, rest)
  try:
    module(carry, x)
  except Exception as error:  # pylint: disable=broad-except
    raise _not_a_cell(where, carry, x, error) from error
  after = nnx.to_flat_state(nnx.state(module, nnx.Not(nnx.Param)))
  for path, var in after:
    old = before.get(path)
    if old is not None and np.array_equal(old, _values(var)):
      continue
    if isinstance(var, nnx.BatchStat):
      what = "batch statistics"
    elif isinstance(var, nnx.RngState):
      what = "an RNG stream"
    else:
      what = f"a {type(var).__name__} variable"
    raise ValueError(
      f"module ({where}) changes its non-parameter state "
      f"{'.'.join(map(str, path))} ({what}) when called; the online "
      f"trainers need the step to be a pure function of (params, carry, x): "
      f"make the layer deterministic (e.g. module.eval(), or "
      f"nnx.BatchNorm(use_running_average=True), nnx.Dropout(rate=0)), or "
      f"write the step as an rtrl.cells.CustomCell that carries that state"
    )


def _values(var) -> np.ndarray:
  """A NumPy copy of a variable's value (an RNG key's raw data)."""
  value = getattr(var, "value", var)
  if jax.dtypes.issubdtype(jnp.result_type(value), jax.dtypes.prng_key):
    value = jax.random.key_data(value)
  return np.array(value)


__all__ = ["check_call", "check_pure_step"]
