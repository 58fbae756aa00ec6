"""Bits per character of a whole split, frozen parameters, in B streams.

The split's `N` symbols are each predicted once: the input before symbol 0 is
the end-of-line symbol (the text's previous line ends there), so the inputs
are `[EOL, s_0, ..., s_{N-2}]` and the targets `[s_0, ..., s_{N-1}]`. These N
steps are cut into B contiguous segments of `L = ceil(N / B)` steps, one per
stream (the last padded with weight-0 steps); each stream starts from the
cell's initial state and carries it across its segment, with no resets unless
`reset_every > 0` (reset where the target's index is a multiple of it). One
jitted `lax.scan` over the L steps evaluates all streams at once.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import losses as losses_lib
from rtrl import readout
from rtrl import validation
from rtrl.cells import Cell
from rtrl.online import broadcast_state
from rtrl.online import where_reset
from rtrl.tasks.ptb import EOL_ID
from rtrl.tasks.ptb import VOCAB_SIZE

LOG2 = float(np.log(2.0))


class EvalStreams(NamedTuple):
  """A split laid out as B streams, time-major `(L, B)`.

  Attributes:
    inputs: int32 symbol ids fed at each step.
    targets: int32 symbol ids predicted at each step.
    weights: float, 1 for real steps, 0 for padding.
    resets: bool, reset the state before this step.
  """

  inputs: jax.Array
  targets: jax.Array
  weights: jax.Array
  resets: jax.Array


def make_eval_streams(
  ids, batch_size: int, reset_every: int = 0
) -> EvalStreams:
  """Lays out the `(N,)` ids of a split as `EvalStreams` (NumPy, once)."""
  ids = np.asarray(ids).astype(np.int32)
  if ids.ndim != 1 or ids.size < 1:
    raise ValueError(
      f"ids must be a non-empty 1-D array, got shape {ids.shape}"
    )
  validation.positive_int("batch_size", batch_size)
  validation.nonnegative_int("reset_every", reset_every, zero_means="off")
  num = ids.size
  length = -(-num // batch_size)
  padded = length * batch_size
  inputs = np.full(padded, EOL_ID, np.int32)
  inputs[0] = EOL_ID
  inputs[1:num] = ids[:-1]
  targets = np.zeros(padded, np.int32)
  targets[:num] = ids
  weights = (np.arange(padded) < num).astype(np.float32)
  if reset_every > 0:
    resets = np.arange(padded) % reset_every == 0
  else:
    resets = np.zeros(padded, bool)
  to_streams = lambda a: jnp.asarray(a.reshape(batch_size, length).T)
  dtype = jnp.asarray(0.0).dtype
  return EvalStreams(
    inputs=to_streams(inputs),
    targets=to_streams(targets),
    weights=to_streams(weights).astype(dtype),
    resets=to_streams(resets),
  )


def bits_sums(
  cell: Cell, params: dict, streams: EvalStreams
) -> tuple[jax.Array, jax.Array]:
  """`(Σ weight * CE in bits, Σ weight)` over all streams (pure, jittable).

  Args:
    cell: the recurrent cell.
    params: `{'cell': ..., 'readout': ...}` (frozen).
    streams: from `make_eval_streams`.
  """
  batch_size = streams.targets.shape[1]
  initial = broadcast_state(cell.initial_state(), batch_size)
  dtype = jnp.asarray(0.0).dtype

  def body(carry, step):
    state, total = carry
    inputs, targets, weights, resets = step
    state = where_reset(resets, initial, state)
    x = jax.nn.one_hot(inputs, VOCAB_SIZE, dtype=dtype)
    state = jax.vmap(cell.step, in_axes=(None, 0, 0))(params["cell"], state, x)
    hidden = jax.vmap(cell.output)(state)
    logits = jax.vmap(readout.linear().apply, in_axes=(None, 0))(
      params["readout"], hidden
    )
    losses = jax.vmap(losses_lib.softmax_cross_entropy)(logits, targets)
    losses = losses * weights
    return (state, total + losses.sum()), None

  (_, total), _ = jax.lax.scan(
    body, (initial, jnp.zeros((), dtype)), tuple(streams)
  )
  return total / LOG2, streams.weights.sum()


_jitted_bits_sums = jax.jit(bits_sums, static_argnums=0)


def bpc(cell: Cell, params: dict, streams: EvalStreams) -> float:
  """Bits per character of the split (jitted; a host float)."""
  total, count = _jitted_bits_sums(cell, params, streams)
  return float(total) / float(count)
