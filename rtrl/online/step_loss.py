"""A step's loss and its exact gradients: the readout and loss defaults, the
batch-mean masked loss, and its gradients w.r.t. the readout parameters and
the cell states (which an estimator turns into a cell gradient)."""

from __future__ import annotations

from typing import Any

import jax

from rtrl import losses
from rtrl import readout as readouts
from rtrl.cells import Cell
from rtrl.online.records import StepBatch


def readout_and_loss(readout, loss):
  """`(readout, loss)` with None replaced by the defaults (`readout.linear()`,
  `losses.softmax_cross_entropy`); a ValueError names a bad one."""
  readout = readouts.linear() if readout is None else readout
  if not isinstance(readout, readouts.Readout):
    raise ValueError(
      "readout must be an rtrl.readout.Readout (e.g. "
      f"rtrl.readout.linear()), got {readout!r}"
    )
  loss = losses.softmax_cross_entropy if loss is None else loss
  if not callable(loss):
    raise ValueError(
      "loss must be a function (prediction, target) -> "
      f"scalar (e.g. rtrl.losses.squared_error), got {loss!r}"
    )
  return readout, loss


def _example_struct(batched: jax.Array) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(batched.shape[1:], batched.dtype)


def batch_loss(
  cell: Cell,
  readout_params: dict,
  cell_state: Any,
  batch: StepBatch,
  *,
  readout=None,
  loss=None,
) -> jax.Array:
  """Mean over the batch of the masked per-step loss."""
  readout, loss = readout_and_loss(readout, loss)
  hidden = jax.vmap(cell.output)(cell_state)
  # Shapes are static: this check costs nothing once traced.
  prediction = jax.eval_shape(
    readout.apply, readout_params, _example_struct(hidden)
  )
  losses.check(loss, prediction, _example_struct(batch.targets))

  def example_loss(params, hidden, target, weight):
    return loss(readout.apply(params, hidden), target) * weight

  per_example = jax.vmap(example_loss, in_axes=(None, 0, 0, 0))(
    readout_params, hidden, batch.targets, batch.weights
  )
  return per_example.sum() / batch.targets.shape[0]


def loss_gradients(
  cell: Cell,
  readout_params: dict,
  cell_state: Any,
  batch: StepBatch,
  *,
  readout=None,
  loss=None,
) -> tuple[jax.Array, Any, Any]:
  """`(batch-mean loss, its readout gradient, its gradient w.r.t. the
  batch's cell states)` at this step (`batch_loss`)."""
  mean_loss, (readout_grads, dloss_dstate) = jax.value_and_grad(
    lambda r, s: batch_loss(cell, r, s, batch, readout=readout, loss=loss),
    argnums=(0, 1),
  )(readout_params, cell_state)
  return mean_loss, readout_grads, dloss_dstate
