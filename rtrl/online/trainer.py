"""`make_online_trainer`: one cell trained online by an estimator's
gradient, through a readout and a per-step loss, with any optax
optimiser."""

from __future__ import annotations

import jax
import optax

from rtrl import optim
from rtrl import validation
from rtrl.cells import Cell
from rtrl.estimators import Estimator
from rtrl.online import inputs
from rtrl.online.batching import broadcast_state
from rtrl.online.estimate import estimate_step
from rtrl.online.from_estimate import trainer_from_estimate
from rtrl.online.records import Trainer
from rtrl.online.shadow import make_shadow_trainer
from rtrl.online.step_loss import readout_and_loss


def make_online_trainer(
  cell: Cell,
  estimator: Estimator,
  optimizer: optax.GradientTransformation,
  accumulate_steps: int = 1,
  *,
  readout=None,
  loss=None,
  shadow_every: int | None = None,
  check_inputs: bool = True,
) -> Trainer:
  """Builds the online trainer.

  Args:
    cell: the recurrent cell.
    estimator: any `rtrl.estimators` estimator for `cell`.
    optimizer: any optax transformation (e.g. `optax.adam(1e-3)`); for a
      cell with a `recurrent_mask`, followed by `rtrl.optim.masked_updates`
      so that no entry off the mask moves.
    accumulate_steps: apply the (averaged) update every this many steps
      (`optax.MultiSteps`); 1 updates at every step.
    readout: an `rtrl.readout.Readout` matching `params['readout']`; None:
      `readout.linear()`.
    loss: per-example `loss(prediction, target) -> scalar` (`rtrl.losses`);
      None: `losses.softmax_cross_entropy`.
    shadow_every: report, every this many steps, the cosine of the
      estimator's cell gradient to exact RTRL's on the learner's own
      trajectory and weights: an exact-RTRL tangent
      (`estimators.make('rtrl', cell)`) steps beside the estimator's on the
      same states and parameters, without changing training. The state's
      `tstate` is then a `ShadowTangents` and the metrics
      `ShadowStepMetrics`. None or 0 (default): off, the trainer exactly as
      without it. The shadow costs exact RTRL's memory and time per step.
    check_inputs: `run`, called eagerly, checks its chunk's values: targets
      within the readout's classes (default loss), inputs without NaN/Inf
      (`rtrl.online.inputs`; one small device-to-host transfer per call).
      Shapes and dtypes are always checked (free).

  Returns:
    A `Trainer`. `run` is jitted; `step` is pure and jittable. A bad
    argument of `init`, `step` or `run` is a ValueError naming it
    (`rtrl.online.inputs`).

  Raises:
    ValueError: `shadow_every` not None or an integer >= 0.
  """
  readout, loss = readout_and_loss(readout, loss)
  # A sparse cell stays sparse: no update off its mask (weight decay...).
  optimizer = optim.keep_recurrent_mask(optimizer, cell)
  if shadow_every is not None:
    validation.nonnegative_int("shadow_every", shadow_every, "off")
  classes = inputs.classes_of(cell, readout, loss)
  if shadow_every:
    return inputs.checked(
      make_shadow_trainer(
        cell,
        estimator,
        optimizer,
        accumulate_steps,
        shadow_every,
        readout=readout,
        loss=loss,
      ),
      check_inputs,
      classes,
    )

  def initial_states(params, key, batch_size):
    keys = jax.random.split(key, batch_size)
    state0 = cell.initial_state()
    tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
      params["cell"], state0, keys
    )
    return tstate, broadcast_state(state0, batch_size)

  def estimate(params, tstate, cell_state, batch):
    return estimate_step(
      cell,
      estimator,
      params,
      tstate,
      cell_state,
      batch,
      readout=readout,
      loss=loss,
    )

  return inputs.checked(
    trainer_from_estimate(
      initial_states, estimate, optimizer, accumulate_steps
    ),
    check_inputs,
    classes,
  )
