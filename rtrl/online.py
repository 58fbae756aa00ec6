"""Online training: update the parameters at every time step (the point of RTRL).

At each step, for the whole batch (vmapped): reset the state and tangent of
examples whose sequence starts here, step the cell and the estimator's tangent,
read out a prediction, take the per-step loss's exact gradients w.r.t. the
readout and w.r.t. the state, turn the latter into a cell gradient with the
estimator, and apply any optax optimiser. `run` scans this over a chunk of
steps inside one jitted `lax.scan`: no per-step host synchronisation.

The readout and the loss are arguments (`rtrl.readout.Readout`,
`rtrl.losses`); None means the linear readout and softmax cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rtrl import estimators
from rtrl import losses
from rtrl import optim
from rtrl import readout as readouts
from rtrl import validation
from rtrl.cells import Cell
from rtrl.estimators import Estimator
from rtrl.linalg import sum_over_batch  # re-exported: the trainers' batch sum


class StepBatch(NamedTuple):
  """One time step for a batch (leading axis B; a chunk adds a time axis T).

  Attributes:
    inputs: (B, input_size) float.
    targets: (B,) int class labels (`losses.softmax_cross_entropy`) or
      (B, ...) float, e.g. (B, num_outputs) regression targets
      (`losses.squared_error`): one per-example target of the loss.
    weights: (B,) float loss mask (0 where the step carries no target).
    resets: (B,) bool, a new sequence starts at this step: state and tangent
      are reset before the cell steps.
  """

  inputs: jax.Array
  targets: jax.Array
  weights: jax.Array
  resets: jax.Array


class StepMetrics(NamedTuple):
  """One step's loss over the batch: `loss_sum / weight_sum` is its mean."""

  loss_sum: jax.Array  # Σ_b weight_b * loss_b (nats for classification)
  weight_sum: jax.Array  # Σ_b weight_b


class OnlineState(NamedTuple):
  """The online trainer's state: parameters, optimiser state, the batched
  cell and estimator states, and the step count."""

  params: Any  # {'cell': ..., 'readout': ...}
  opt_state: Any
  cell_state: Any  # batched cell state
  tstate: Any  # batched estimator state
  step: jax.Array


class ShadowTangents(NamedTuple):
  """`OnlineState.tstate` of a trainer built with `shadow_every`: the
  learner's estimator state and an exact-RTRL tangent stepped on the same
  states with the same parameters (it never changes training)."""

  learner: Any  # batched estimator state
  exact: Any  # batched exact-RTRL state (`estimators.make('rtrl', cell)`)


class ShadowStepMetrics(NamedTuple):
  """One step's metrics with `shadow_every` on: `StepMetrics`' fields, then
  the estimator's cell gradient set beside exact RTRL's (both summed over
  the batch, as the update sees them), NaN at steps that do not report.

  `cosine` is NaN also where either gradient is zero (e.g. a step with no
  target). `estimator_metrics` is the estimator's own `metrics(tstate)`
  (e.g. SK-RTRL's certificate), each a mean over the batch; `{}` for an
  estimator without them.
  """

  loss_sum: jax.Array  # as StepMetrics
  weight_sum: jax.Array  # as StepMetrics
  reported: jax.Array  # bool: this step compared the two gradients
  cosine: jax.Array  # cos(estimate, exact) over the flattened cell gradient
  estimate_norm: jax.Array  # ||estimate||_2
  exact_norm: jax.Array  # ||exact RTRL's gradient||_2
  estimator_metrics: dict  # name -> batch mean of estimator.metrics


class Trainer(NamedTuple):
  """`init(params, key, batch_size) -> state`; `step(state, StepBatch)` and
  `run(state, chunk)` return `(state, StepMetrics)` (per step for `run`)."""

  init: Callable[..., Any]
  step: Callable[..., Any]
  run: Callable[..., Any]


def where_reset(resets: jax.Array, fresh: Any, current: Any) -> Any:
  """Per-example select: `fresh` where `resets[b]`, else `current`."""

  def select(a, b):
    mask = resets.reshape(resets.shape + (1,) * (a.ndim - resets.ndim))
    return jnp.where(mask, a, b)

  return jax.tree_util.tree_map(select, fresh, current)


def broadcast_state(state: Any, batch_size: int) -> Any:
  """One example's state (a pytree) repeated along a new leading batch
  axis of size `batch_size`, e.g. `cell.initial_state()` for a batch."""
  return jax.tree_util.tree_map(
    lambda a: jnp.broadcast_to(a, (batch_size,) + a.shape), state
  )


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


def reset_cell_states(cell: Cell, cell_state: Any, resets: jax.Array) -> Any:
  """The batch's cell states with `cell.initial_state()` where `resets`."""
  fresh = broadcast_state(cell.initial_state(), resets.shape[0])
  return where_reset(resets, fresh, cell_state)


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


def gradient_cosine(
  estimate: Any, exact: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`(cosine, ||estimate||, ||exact||)` of two gradient trees, each
  flattened to one vector; the cosine is NaN where either norm is zero."""
  flat = lambda tree: jnp.concatenate(
    [jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(tree)]
  )
  a, b = flat(estimate), flat(exact)
  norm_a, norm_b = jnp.linalg.norm(a), jnp.linalg.norm(b)
  denom = norm_a * norm_b
  cosine = jnp.where(
    denom > 0, jnp.dot(a, b) / jnp.where(denom > 0, denom, 1.0), jnp.nan
  )
  return jnp.clip(cosine, -1.0, 1.0), norm_a, norm_b


def batch_mean_metrics(estimator: Estimator, tstate: Any) -> dict:
  """The estimator's per-example `metrics(tstate)` averaged over the batch
  (the leading axis of `tstate`); `{}` for an estimator without them."""
  metrics = getattr(estimator, "metrics", None)
  if metrics is None:
    return {}
  return jax.tree_util.tree_map(
    lambda a: jnp.mean(a, axis=0), jax.vmap(metrics)(tstate)
  )


def shadow_estimate_step(
  cell: Cell,
  estimator: Estimator,
  exact: Estimator,
  params: dict,
  tstates: ShadowTangents,
  cell_state: Any,
  batch: StepBatch,
  report: jax.Array,
  *,
  readout=None,
  loss=None,
):
  """`estimate_step` with an exact-RTRL shadow on the same trajectory.

  The learner's part is `estimate_step`'s, unchanged; the `exact` tangent
  steps on the same (reset) states, inputs and parameters. Where `report`
  (a bool scalar), the two batch-summed cell gradients of this step's loss
  are compared (`gradient_cosine`) and the estimator's `metrics` read.

  Returns:
    `(tstates, cell_state, loss, grads, report)` with the first four as in
    `estimate_step` (grads: the learner's) and `report` the last five
    fields of `ShadowStepMetrics`, NaN where not `report`.
  """
  learner, learner_cell_state, mean_loss, grads = estimate_step(
    cell,
    estimator,
    params,
    tstates.learner,
    cell_state,
    batch,
    readout=readout,
    loss=loss,
  )
  # The shadow reads only values the step keeps anyway, through a barrier:
  # XLA cannot merge or fuse its ops with the learner's, so training
  # stays bitwise that without a shadow (the learner's gradient is read
  # again rather than shared with the update).
  shadow_in = jax.lax.optimization_barrier(
    (params, tstates.exact, cell_state, learner, learner_cell_state)
  )
  params, shadow, cell_state, learner_copy, new_cell_state = shadow_in
  cell_state = reset_cell_states(cell, cell_state, batch.resets)
  shadow, _ = step_resetting(
    exact, params["cell"], shadow, cell_state, batch.inputs, batch.resets
  )
  _, _, dloss_dstate = loss_gradients(
    cell, params["readout"], new_cell_state, batch, readout=readout, loss=loss
  )

  def compare():
    cell_grads = summed_gradient(
      estimator, params["cell"], learner_copy, dloss_dstate
    )
    exact_grads = summed_gradient(exact, params["cell"], shadow, dloss_dstate)
    cosine, estimate_norm, exact_norm = gradient_cosine(cell_grads, exact_grads)
    return (
      cosine,
      estimate_norm,
      exact_norm,
      batch_mean_metrics(estimator, learner_copy),
    )

  def skip():
    return jax.tree_util.tree_map(
      lambda s: jnp.full(s.shape, jnp.nan, s.dtype), jax.eval_shape(compare)
    )

  compared = jax.lax.cond(report, compare, skip)
  return (
    ShadowTangents(learner, shadow),
    learner_cell_state,
    mean_loss,
    grads,
    (report, *compared),
  )


def make_online_trainer(
  cell: Cell,
  estimator: Estimator,
  optimizer: optax.GradientTransformation,
  accumulate_steps: int = 1,
  *,
  readout=None,
  loss=None,
  shadow_every: int | None = None,
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

  Returns:
    A `Trainer`. `run` is jitted; `step` is pure and jittable.

  Raises:
    ValueError: `shadow_every` not None or an integer >= 0.
  """
  readout, loss = readout_and_loss(readout, loss)
  # A sparse cell stays sparse: no update off its mask (weight decay...).
  optimizer = optim.keep_recurrent_mask(optimizer, cell)
  if shadow_every is not None:
    validation.nonnegative_int("shadow_every", shadow_every, "off")
  if shadow_every:
    return _shadow_trainer(
      cell,
      estimator,
      optimizer,
      accumulate_steps,
      shadow_every,
      readout=readout,
      loss=loss,
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

  return trainer_from_estimate(
    initial_states, estimate, optimizer, accumulate_steps
  )


def _shadow_trainer(
  cell: Cell,
  estimator: Estimator,
  optimizer: optax.GradientTransformation,
  accumulate_steps: int,
  shadow_every: int,
  *,
  readout,
  loss,
) -> Trainer:
  """`make_online_trainer` with `shadow_every` on (a positive int)."""
  exact = estimators.make("rtrl", cell)

  def initial_states(params, key, batch_size):
    keys = jax.random.split(key, batch_size)
    state0 = cell.initial_state()
    init = lambda e: jax.vmap(e.init, in_axes=(None, None, 0))(
      params["cell"], state0, keys
    )
    tstates = ShadowTangents(learner=init(estimator), exact=init(exact))
    return tstates, broadcast_state(state0, batch_size)

  def estimate(params, tstates, cell_state, batch, step):
    report = (step + 1) % shadow_every == 0
    return shadow_estimate_step(
      cell,
      estimator,
      exact,
      params,
      tstates,
      cell_state,
      batch,
      report,
      readout=readout,
      loss=loss,
    )

  return trainer_from_estimate(
    initial_states, estimate, optimizer, accumulate_steps, reports=True
  )


def trainer_from_estimate(
  initial_states: Callable,
  estimate: Callable,
  optimizer: optax.GradientTransformation,
  accumulate_steps: int = 1,
  *,
  reports: bool = False,
) -> Trainer:
  """The online `Trainer` around a batched gradient estimate, written once
  for a single cell and for stacks (`rtrl.stack`).

  Args:
    initial_states: `(params, key, batch_size) -> (tstate, cell_state)`.
    estimate: `(params, tstate, cell_state, batch) -> (tstate, cell_state,
      batch-mean loss, grads)`, parameters fixed.
    optimizer: applied to `grads` at every step, or to their mean every
      `accumulate_steps` steps (`optax.MultiSteps`).
    reports: `estimate` also takes the step count (a fifth argument) and
      returns a fifth item, the last five fields of `ShadowStepMetrics`,
      which the steps then report instead of `StepMetrics`.
  """
  validation.positive_int("accumulate_steps", accumulate_steps)
  if accumulate_steps > 1:
    # accumulator_dtype=None keeps the gradients' dtype (float64 under x64).
    optimizer = optax.MultiSteps(
      optimizer, every_k_schedule=accumulate_steps, accumulator_dtype=None
    )

  def init(params, key, batch_size):
    tstate, cell_state = initial_states(params, key, batch_size)
    return OnlineState(
      params=params,
      opt_state=optimizer.init(params),
      cell_state=cell_state,
      tstate=tstate,
      step=jnp.zeros((), jnp.int32),
    )

  def step(state: OnlineState, batch: StepBatch):
    if reports:
      tstate, cell_state, mean_loss, grads, report = estimate(
        state.params, state.tstate, state.cell_state, batch, state.step
      )
    else:
      tstate, cell_state, mean_loss, grads = estimate(
        state.params, state.tstate, state.cell_state, batch
      )
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics: StepMetrics | ShadowStepMetrics = StepMetrics(
      loss_sum=mean_loss * batch.targets.shape[0],
      weight_sum=batch.weights.sum(),
    )
    if reports:
      metrics = ShadowStepMetrics(*metrics, *report)
    return OnlineState(
      params, opt_state, cell_state, tstate, state.step + 1
    ), metrics

  @jax.jit
  def run(state: OnlineState, chunk: StepBatch):
    return jax.lax.scan(step, state, chunk)

  return Trainer(init=init, step=step, run=run)


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
