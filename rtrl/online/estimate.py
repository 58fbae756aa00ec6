"""One batched forward step with an estimator's gradient, parameters fixed:
reset the examples that start a sequence, step cell states and tangents,
and turn the loss's state gradient into a cell gradient summed over the
batch."""

from __future__ import annotations

from typing import Any

import jax

from rtrl.cells import Cell
from rtrl.estimators import Estimator
from rtrl.linalg import sum_over_batch
from rtrl.online.batching import reset_cell_states
from rtrl.online.batching import where_reset
from rtrl.online.records import StepBatch
from rtrl.online.step_loss import loss_gradients


def summed_gradient(
  estimator: Estimator, cell_params: dict, tstate: Any, dloss_dstate: Any
) -> Any:
  """The estimator's cell gradient summed over the batch (the leading axis
  of `tstate` and `dloss_dstate`): its `batch_gradient` where it has one,
  else each example's `gradient`, summed (`sum_over_batch`)."""
  if estimator.batch_gradient is not None:
    return estimator.batch_gradient(cell_params, tstate, dloss_dstate)
  per_example = jax.vmap(estimator.gradient, in_axes=(None, 0, 0))(
    cell_params, tstate, dloss_dstate
  )
  return jax.tree_util.tree_map(sum_over_batch, per_example)


def step_resetting(
  estimator: Estimator,
  cell_params: dict,
  tstate: Any,
  cell_state: Any,
  inputs: jax.Array,
  resets: jax.Array,
) -> tuple[Any, Any]:
  """The batch's tangents and (already reset) states stepped on `inputs`,
  each example's tangent starting afresh where `resets`: inside the step
  where the estimator `folds_reset` (no pass over the tangent), else by its
  `reset` first."""
  if estimator.folds_reset:
    return jax.vmap(estimator.step(cell_params))(
      tstate, cell_state, inputs, resets
    )
  tstate = where_reset(resets, jax.vmap(estimator.reset)(tstate), tstate)
  return jax.vmap(estimator.step(cell_params))(tstate, cell_state, inputs)


def estimate_step(
  cell: Cell,
  estimator: Estimator,
  params: dict,
  tstate: Any,
  cell_state: Any,
  batch: StepBatch,
  *,
  readout=None,
  loss=None,
):
  """One batched forward step with gradient estimates, parameters fixed.

  Resets the examples that start a sequence, steps cell and tangents
  (vmapped), and returns `(tstate, cell_state, loss, grads)` with `loss` the
  batch-mean step loss and `grads = {'cell': estimate summed over the batch,
  'readout': exact immediate gradient}` of that loss. `readout` and `loss`
  as in `make_online_trainer`.
  """
  cell_state = reset_cell_states(cell, cell_state, batch.resets)
  tstate, cell_state = step_resetting(
    estimator, params["cell"], tstate, cell_state, batch.inputs, batch.resets
  )
  mean_loss, readout_grads, dloss_dstate = loss_gradients(
    cell, params["readout"], cell_state, batch, readout=readout, loss=loss
  )
  cell_grads = summed_gradient(estimator, params["cell"], tstate, dloss_dstate)
  return (
    tstate,
    cell_state,
    mean_loss,
    {"cell": cell_grads, "readout": readout_grads},
  )
