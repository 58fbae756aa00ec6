"""`CustomCell`: any recurrent cell written as a pure one-step function.

The Lemma-1 `Cell` (`lemma1.py`) is what the Kronecker-factored estimators
need; a `CustomCell` asks for nothing but a step function, and the generic
estimators (`rtrl.estimators.autodiff_rtrl`, `autodiff_uoro`,
`autodiff_snap1`) and the BPTT/TBPTT references get every derivative they need from JAX's forward and
reverse mode. It has the methods the trainers use (`init`, `initial_state`,
`step`, `output`, `hidden_size`, `check_params`), so
`rtrl.make_online_trainer`, `rtrl.make_tbptt_trainer`, `rtrl.bptt_gradient`
and `rtrl.frozen_gradients` take it as they take a built-in cell.

    def step(params, h, x):   # the original GRU (Cho et al. 2014)
      r = jax.nn.sigmoid(x @ params["Wr"] + h @ params["Ur"])
      ...
    cell = rtrl.cells.CustomCell(step, init, initial_state=jnp.zeros(32))
    estimator = rtrl.estimators.make("snap1", cell)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rtrl import validation


def _describe(tree) -> str:
  leaves = jax.tree_util.tree_leaves(tree)
  shapes = ", ".join(
    f"{jnp.result_type(a).name}{list(jnp.shape(a))}" for a in leaves
  )
  return f"{jax.tree_util.tree_structure(tree)} with leaves [{shapes}]"


def _check_float_tree(what: str, tree, source: str) -> None:
  """A ValueError naming `what` unless `tree` is a non-empty pytree of float
  arrays (abstract ones included)."""
  leaves = jax.tree_util.tree_leaves(tree)
  if not leaves:
    raise ValueError(
      f"{what} must be a non-empty pytree of float arrays "
      f"({source}), got {tree!r}"
    )
  for leaf in leaves:
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
      raise ValueError(
        f"{what} must be a pytree of float arrays ({source}), "
        f"got a leaf {leaf!r}"
      )


def _same_layout(a, b) -> bool:
  """Same tree structure, and leaf by leaf the same shape and dtype."""
  if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):  # type: ignore[operator]
    return False
  return all(
    jnp.shape(x) == jnp.shape(y) and jnp.result_type(x) == jnp.result_type(y)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


def _identity(state):
  return state


class CustomCell:
  """A recurrent cell given by its one-step function.

  Args:
    step: `step(params, state, x) -> state`, one example, one step; `params`
      and `state` are pytrees of float arrays, `x` is `(input_size,)`. It
      must return a state with the tree structure, shapes and dtypes of the
      one it got, and be pure and traceable (it runs under jit, vmap, scan
      and JAX's forward and reverse mode).
    init: `init(key, input_size) -> params`.
    initial_state: the state at a sequence start, a pytree of float arrays,
      or a zero-argument callable returning one (called at every use, so its
      dtype can follow `jax.enable_x64`).
    output: `output(state) -> (hidden_size,)`, the vector fed to the readout.
      May be omitted when the state is a single 1-D array (it is then its
      own output).
    name: shown by `repr`.

  Raises:
    ValueError: naming the argument, for a non-callable `step`, `init` or
      `output`, an initial state that is not a pytree of float arrays, a
      missing `output` for a state that is not one 1-D array, or an `output`
      that does not return a 1-D array.
  """

  def __init__(
    self,
    step: Callable,
    init: Callable,
    initial_state: Any,
    output: Callable | None = None,
    name: str = "custom",
  ):
    for arg, value in (("step", step), ("init", init)):
      if not callable(value):
        raise ValueError(f"{arg} must be a callable, got {value!r}")
    if output is not None and not callable(output):
      raise ValueError(f"output must be a callable or None, got {output!r}")
    self._step, self._init, self.name = step, init, str(name)
    self._initial_state = initial_state
    state = jax.eval_shape(self.initial_state)
    _check_float_tree("initial_state", state, "the state at a sequence start")
    if output is None:
      if not (isinstance(state, jax.ShapeDtypeStruct) and state.ndim == 1):
        raise ValueError(
          "output is required when the state is not a single 1-D array: "
          "pass output(state) -> (hidden_size,), the vector fed to the "
          f"readout; the state is {_describe(state)}"
        )
      output = _identity
    self._output = output
    hidden = jax.eval_shape(self._output, state)
    if not (isinstance(hidden, jax.ShapeDtypeStruct) and hidden.ndim == 1):
      raise ValueError(
        f"output must return a 1-D array (the vector fed to "
        f"the readout), got {_describe(hidden)}"
      )
    self.hidden_size = hidden.shape[0]

  def __repr__(self):
    return f"CustomCell(name={self.name!r}, hidden_size={self.hidden_size})"

  def init(self, key: jax.Array, input_size: int):
    """The user's `init(key, input_size)`, checked to return float arrays."""
    validation.positive_int("input_size", input_size)
    params = self._init(key, input_size)
    _check_float_tree(
      "the params returned by init", params, f"init of {self!r}"
    )
    return params

  def initial_state(self):
    if callable(self._initial_state):
      return self._initial_state()
    return jax.tree_util.tree_map(jnp.asarray, self._initial_state)

  def step(self, params, state, x: jax.Array):
    """One example, one time step: the user's step, its result checked (at
    trace time, from shapes alone) to have the state's layout."""
    new_state = self._step(params, state, x)
    if not _same_layout(new_state, state):
      raise ValueError(
        f"step must return a state with the tree structure, shapes and "
        f"dtypes of the one it got (a fixed-size carry for lax.scan); "
        f"{self!r}'s step got {_describe(state)} and returned "
        f"{_describe(new_state)}"
      )
    return new_state

  def output(self, state) -> jax.Array:
    """The `(hidden_size,)` vector fed to the readout."""
    return self._output(state)

  def check_params(self, params) -> None:
    """A ValueError naming `params` unless it is a pytree of float arrays."""
    _check_float_tree("params", params, f"as returned by {self!r}.init")

  def check_state(self, state) -> None:
    """A ValueError naming `state` unless it has `initial_state()`'s layout."""
    expected = jax.eval_shape(self.initial_state)
    if not _same_layout(state, expected):
      raise ValueError(
        f"state must have the layout of {self!r}'s initial "
        f"state, {_describe(expected)}; got {_describe(state)}"
      )

  def check_step(self, params, x: jax.Array) -> None:
    """Runs `step` abstractly (`jax.eval_shape`, no FLOPs) from the initial
    state: a ValueError naming `step` if it changes the state's layout."""
    self.check_params(params)
    jax.eval_shape(self.step, params, self.initial_state(), x)

  def input_size(self, params) -> int:
    """The `input_size` that `init` builds `params` for.

    Found from shapes alone (`jax.eval_shape`, nothing computed): `init`'s
    parameter count at input sizes 1 and 2 gives the count as an affine
    function of the input size; the size that function maps to `params`'
    count is then checked leaf by leaf. SnAp-1 needs it to draw inputs.

    Raises:
      ValueError: `params` are not `init`'s for any input size, or their
        shapes do not depend on it.
    """
    key = jax.eval_shape(jax.random.PRNGKey, 0)

    def layout(tree):
      leaves, treedef = jax.tree_util.tree_flatten(tree)
      return treedef, [a.shape for a in leaves], sum(a.size for a in leaves)

    def abstract(size):
      return layout(jax.eval_shape(lambda k: self._init(k, size), key))

    target = layout(params)
    base, slope = abstract(1)[2], abstract(2)[2] - abstract(1)[2]
    offset = target[2] - base
    if slope > 0 and offset >= 0 and offset % slope == 0:
      size = 1 + offset // slope
      if abstract(size)[:2] == target[:2]:
        return size
    raise ValueError(
      f"cannot tell which input_size params were built for: they are not "
      f"what {self!r}'s init returns for any input size, or init's shapes "
      f"do not depend on it; got {_describe(params)}"
    )


def as_custom(cell) -> CustomCell:
  """Any cell seen only through its step function: the generic autodiff
  path (`rtrl.estimators.autodiff_rtrl` and its twins) on a built-in cell, to time it against
  the analytic path or to check a `Cell` subclass's Jacobians against it."""
  return CustomCell(
    step=cell.step,
    init=cell.init,
    initial_state=cell.initial_state,
    output=cell.output,
    name=f"custom({cell!r})",
  )
