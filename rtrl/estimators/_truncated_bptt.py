"""Truncated BPTT as an online estimator: at every step, the gradient of the
step's loss backpropagated through the last `truncation` steps only.

The tangent is a window of the last `T = truncation` steps: each step's
input, reset flag and the state it started from. `gradient` unrolls the
cell over the window from its first state with the current parameters and
pulls `dL_t/dstate_t` back through it (`jax.vjp`): exactly BPTT's
gradient of `L_t` with every path older than `T` steps cut, at `T` steps
forward and backward per call. It serves any cell with a `step` (Lemma-1
cells, `CustomCell`s, the LRU), and it is what "TBPTT-T" means for an
agent that must update at every step (a window trainer, `rtrl.bptt`,
updates once per window instead).

Cost per example and step: memory `T (n + input_size)`, time `T n^2` per
`gradient` (the window's forward and backward passes).

References:
  Williams & Peng, "An efficient gradient-based algorithm for on-line
  training of recurrent network trajectories", Neural Computation 1990.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.estimators._base import Estimator


class Window(NamedTuple):
  """The last `T` steps, oldest first.

  Attributes:
    inputs: `(T, input_size)`.
    resets: `(T,)` bool, the step started a sequence.
    valid: `(T,)` bool, the slot holds a step (False before `T` steps).
    first_state: the state the oldest slot's step started from.
    key: kept for the `Estimator` contract (the estimate is deterministic).
  """

  inputs: jax.Array
  resets: jax.Array
  valid: jax.Array
  first_state: Any
  key: jax.Array


def _push(array, value):
  """`array` shifted one slot to the front, `value` in the last slot."""
  return jnp.concatenate([array[1:], value[None]], axis=0)


def truncated_bptt(cell: Any, truncation: int) -> Estimator:
  """Online TBPTT-`truncation` (Williams & Peng, Neural Computation 1990):
  each step's gradient by backpropagation through the last `truncation`
  steps (see the module docstring).
  Deterministic, biased (exact when the window covers the sequence). Cost
  per example and step: memory `T (n + input_size)`, time `~ T n^2` per
  gradient.

  Args:
    cell: any cell with `init`, `step`, `initial_state` and `output`
      (a Lemma-1 `Cell`, a `CustomCell`, an `LRU`).
    truncation: `T >= 1`, the steps the gradient looks back (1: the
      current step's immediate gradient only).

  Returns:
    The `Estimator` (`name='tbptt'`, `folds_reset`).

  Raises:
    ValueError: `truncation` not a positive integer.
  """
  truncation = validation.positive_int("truncation", truncation)

  def init(params, state, key):
    input_size = cell.input_size(params)
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    return Window(
      inputs=jnp.zeros((truncation, input_size), dtype),
      resets=jnp.zeros((truncation,), bool),
      valid=jnp.zeros((truncation,), bool),
      first_state=state,
      key=key,
    )

  def step(params):
    def step_fn(window: Window, state, x, reset=False):
      reset = jnp.asarray(reset, bool)
      new_state = cell.step(params, state, x)
      full = window.valid[0]
      # The slot that leaves hands its end state to the new oldest slot.
      leaving = _replay(params, window.first_state, window, 0)
      first = jax.tree_util.tree_map(
        lambda a, b: jnp.where(full, a, b), leaving, window.first_state
      )
      window = window._replace(
        inputs=_push(window.inputs, x.astype(window.inputs.dtype)),
        resets=_push(window.resets, reset),
        valid=_push(window.valid, jnp.asarray(True)),
        first_state=first,
      )
      return window, new_state

    return step_fn

  def _replay(params, state, window, index):
    """The state after slot `index`'s step, from `state` before it."""
    state = jax.tree_util.tree_map(
      lambda s0, s: jnp.where(window.resets[index], s0, s),
      cell.initial_state(),
      state,
    )
    stepped = cell.step(params, state, window.inputs[index])
    return jax.tree_util.tree_map(
      lambda a, b: jnp.where(window.valid[index], a, b), stepped, state
    )

  def unroll(params, window: Window):
    def body(state, index):
      return _replay(params, state, window, index), None

    state, _ = jax.lax.scan(body, window.first_state, jnp.arange(truncation))
    return state

  def gradient(params, window: Window, dloss_dstate):
    _, pullback = jax.vjp(lambda p: unroll(p, window), params)
    return pullback(dloss_dstate)[0]

  def reset_fn(window: Window) -> Window:
    return window._replace(
      resets=jnp.zeros_like(window.resets),
      valid=jnp.zeros_like(window.valid),
      first_state=cell.initial_state(),
    )

  return Estimator(
    init=init,
    step=step,
    gradient=gradient,
    reset=reset_fn,
    name="tbptt",
    folds_reset=True,
    implementation="truncated_bptt",
  )


__all__ = ["Window", "truncated_bptt"]
