"""Online training: update the parameters at every time step (the point of RTRL).

At each step, for the whole batch (vmapped): reset the state and tangent of
examples whose sequence starts here, step the cell and the estimator's tangent,
read out a prediction, take the per-step loss's exact gradients w.r.t. the
readout and w.r.t. the state, turn the latter into a cell gradient with the
estimator, and apply any optax optimiser. `run` scans this over a chunk of
steps inside one jitted `lax.scan`: no per-step host synchronisation.

The readout and the loss are arguments (`rtrl.readout.Readout`,
`rtrl.losses`); None means the linear readout and softmax cross-entropy.

Every name is used from here (`rtrl.online.X`); the files hold one idea
each: `records` (`StepBatch`, `StepMetrics`, `OnlineState`, `Trainer` and
the shadow's records), `batching` (per-example resets, batch broadcasting),
`step_loss` (a step's loss and its exact gradients), `estimate` (one step's
gradient estimate), `from_estimate` (the `Trainer` around any estimate: the
optimiser, the jitted scan), `trainer` (`make_online_trainer`), `shadow`
(the exact-RTRL shadow, `shadow_every`) and `frozen` (`frozen_gradients`).
"""

from rtrl.linalg import sum_over_batch as sum_over_batch  # the batch sum
from rtrl.online.batching import broadcast_state
from rtrl.online.batching import reset_cell_states
from rtrl.online.batching import where_reset
from rtrl.online.estimate import estimate_step
from rtrl.online.estimate import step_resetting
from rtrl.online.estimate import summed_gradient
from rtrl.online.from_estimate import trainer_from_estimate
from rtrl.online.frozen import frozen_gradients
from rtrl.online.records import OnlineState
from rtrl.online.records import ShadowStepMetrics
from rtrl.online.records import ShadowTangents
from rtrl.online.records import StepBatch
from rtrl.online.records import StepMetrics
from rtrl.online.records import Trainer
from rtrl.online.shadow import batch_mean_metrics
from rtrl.online.shadow import gradient_cosine
from rtrl.online.shadow import shadow_estimate_step
from rtrl.online.step_loss import batch_loss
from rtrl.online.step_loss import loss_gradients
from rtrl.online.step_loss import readout_and_loss
from rtrl.online.trainer import make_online_trainer

__all__ = [
  "StepBatch",
  "StepMetrics",
  "OnlineState",
  "ShadowTangents",
  "ShadowStepMetrics",
  "Trainer",
  "where_reset",
  "broadcast_state",
  "readout_and_loss",
  "batch_loss",
  "summed_gradient",
  "step_resetting",
  "estimate_step",
  "reset_cell_states",
  "loss_gradients",
  "gradient_cosine",
  "batch_mean_metrics",
  "shadow_estimate_step",
  "make_online_trainer",
  "trainer_from_estimate",
  "frozen_gradients",
]
