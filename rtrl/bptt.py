"""Backpropagation through time: the full-BPTT reference gradient and TBPTT.

TBPTT-T carries the hidden state across windows of `truncation` steps, cuts
the gradient at window boundaries, and makes one parameter update per window
with the gradient of the window's mean per-step loss. Every function takes
the online trainer's `readout` and `loss` (None: linear softmax
cross-entropy).

References:
  Williams & Peng, "An efficient gradient-based algorithm for on-line training
  of recurrent network trajectories", 1990.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rtrl import optim
from rtrl import validation
from rtrl.cells import Cell
from rtrl.online import StepBatch
from rtrl.online import StepMetrics
from rtrl.online import Trainer
from rtrl.online import batch_loss
from rtrl.online import broadcast_state
from rtrl.online import readout_and_loss
from rtrl.online import where_reset


def unrolled_loss(
  cell: Cell,
  params: dict,
  cell_state: Any,
  chunk: StepBatch,
  *,
  readout=None,
  loss=None,
):
  """Σ_t of the batch-mean per-step losses over `chunk` (time-major).

  Returns:
    `(total_loss, (final_cell_state, StepMetrics per step))`.
  """
  batch_size = chunk.targets.shape[1]
  initial = broadcast_state(cell.initial_state(), batch_size)

  def body(state, batch):
    state = where_reset(batch.resets, initial, state)
    state = jax.vmap(cell.step, in_axes=(None, 0, 0))(
      params["cell"], state, batch.inputs
    )
    mean_loss = batch_loss(
      cell, params["readout"], state, batch, readout=readout, loss=loss
    )
    return state, (
      mean_loss,
      StepMetrics(mean_loss * batch_size, batch.weights.sum()),
    )

  final_state, (losses, metrics) = jax.lax.scan(body, cell_state, chunk)
  return losses.sum(), (final_state, metrics)


def bptt_gradient(
  cell: Cell,
  params: dict,
  cell_state: Any,
  chunk: StepBatch,
  *,
  readout=None,
  loss=None,
):
  """Full-BPTT gradient of `Σ_t L_t` over the chunk (exact reference)."""
  readout, loss = readout_and_loss(readout, loss)
  return jax.grad(
    lambda p: unrolled_loss(
      cell, p, cell_state, chunk, readout=readout, loss=loss
    )[0]
  )(params)


def _split_windows(chunk: StepBatch, truncation: int) -> StepBatch:
  num_steps = chunk.targets.shape[0]
  if num_steps % truncation:
    raise ValueError(
      f"the chunk length ({num_steps}) must be a multiple of "
      f"truncation ({truncation})"
    )
  return jax.tree_util.tree_map(
    lambda a: a.reshape((num_steps // truncation, truncation) + a.shape[1:]),
    chunk,
  )


def tbptt_gradients(
  cell: Cell,
  params: dict,
  cell_state: Any,
  chunk: StepBatch,
  truncation: int,
  *,
  readout=None,
  loss=None,
):
  """Per-window gradients of `Σ_{t in window} L_t`, state carried, gradient
  cut at window starts, parameters fixed. Returns a tree with a leading
  window axis."""
  readout, loss = readout_and_loss(readout, loss)

  def window(state, window_chunk):
    state = jax.lax.stop_gradient(state)
    grads, (state, _) = jax.grad(
      lambda p: unrolled_loss(
        cell, p, state, window_chunk, readout=readout, loss=loss
      ),
      has_aux=True,
    )(params)
    return state, grads

  _, grads = jax.lax.scan(window, cell_state, _split_windows(chunk, truncation))
  return grads


class TBPTTState(NamedTuple):
  """The TBPTT trainer's state: parameters, optimiser state, the batched
  cell state carried across windows, and the step count."""

  params: Any
  opt_state: Any
  cell_state: Any
  step: jax.Array


def make_tbptt_trainer(
  cell: Cell,
  optimizer: optax.GradientTransformation,
  truncation: int,
  *,
  readout=None,
  loss=None,
) -> Trainer:
  """TBPTT-`truncation`, with the same `Trainer` interface as the online one.

  `run(state, chunk)` needs a chunk length that is a multiple of `truncation`
  and returns per-step metrics; `step` runs one window. `readout` and `loss`
  as in `online.make_online_trainer`; for a cell with a `recurrent_mask`,
  `optimizer` is followed by `rtrl.optim.masked_updates` (no entry off the
  mask moves).
  """
  validation.positive_int("truncation", truncation)
  readout, loss = readout_and_loss(readout, loss)
  optimizer = optim.keep_recurrent_mask(optimizer, cell)

  def init(params, key, batch_size):
    del key  # deterministic
    return TBPTTState(
      params=params,
      opt_state=optimizer.init(params),
      cell_state=broadcast_state(cell.initial_state(), batch_size),
      step=jnp.zeros((), jnp.int32),
    )

  def window_step(state: TBPTTState, window_chunk: StepBatch):
    cell_state = jax.lax.stop_gradient(state.cell_state)

    def mean_loss(p):
      total, aux = unrolled_loss(
        cell, p, cell_state, window_chunk, readout=readout, loss=loss
      )
      return total / truncation, aux

    grads, (cell_state, metrics) = jax.grad(mean_loss, has_aux=True)(
      state.params
    )
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return TBPTTState(
      params, opt_state, cell_state, state.step + truncation
    ), metrics

  @jax.jit
  def run(state: TBPTTState, chunk: StepBatch):
    state, metrics = jax.lax.scan(
      window_step, state, _split_windows(chunk, truncation)
    )
    return state, jax.tree_util.tree_map(
      lambda a: a.reshape((-1,) + a.shape[2:]), metrics
    )

  return Trainer(init=init, step=window_step, run=run)
