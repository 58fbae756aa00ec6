"""An estimator's per-step gradients with the parameters held fixed: the
reference to compare estimators by (exact RTRL's, summed over time, is
BPTT's gradient)."""

from __future__ import annotations

import jax

from rtrl.cells import Cell
from rtrl.estimators import Estimator
from rtrl.online.batching import broadcast_state
from rtrl.online.estimate import estimate_step
from rtrl.online.records import StepBatch
from rtrl.online.records import StepMetrics
from rtrl.online.step_loss import readout_and_loss


def frozen_gradients(
  cell: Cell,
  estimator: Estimator,
  params: dict,
  chunk: StepBatch,
  key: jax.Array,
  *,
  readout=None,
  loss=None,
):
  """Per-step gradient estimates with the parameters held fixed.

  Runs the estimator over a time-major chunk without updating anything and
  returns the per-step gradient of the batch-mean loss w.r.t. the cell
  parameters, `(T,) + W.shape` leaves, and the per-step `StepMetrics`.
  Summed over time, exact RTRL's equals `bptt.bptt_gradient` (cell part).
  `readout` and `loss` as in `make_online_trainer`.
  """
  readout, loss = readout_and_loss(readout, loss)
  batch_size = chunk.targets.shape[1]
  keys = jax.random.split(key, batch_size)
  state0 = cell.initial_state()
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    params["cell"], state0, keys
  )

  def body(carry, batch):
    tstate, cell_state, mean_loss, grads = estimate_step(
      cell, estimator, params, *carry, batch, readout=readout, loss=loss
    )
    metrics = StepMetrics(mean_loss * batch_size, batch.weights.sum())
    return (tstate, cell_state), (grads["cell"], metrics)

  _, (grads, metrics) = jax.lax.scan(
    body, (tstate, broadcast_state(state0, batch_size)), chunk
  )
  return grads, metrics
