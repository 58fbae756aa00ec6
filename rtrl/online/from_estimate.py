"""The online `Trainer` around any batched gradient estimate, written once
for a single cell, the shadow and stacks: the optimiser applied at every
step (or to the mean of `accumulate_steps` steps' gradients), and `run`,
the steps over a chunk in one jitted `lax.scan`."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from rtrl import validation
from rtrl.online.records import OnlineState
from rtrl.online.records import ShadowStepMetrics
from rtrl.online.records import StepBatch
from rtrl.online.records import StepMetrics
from rtrl.online.records import Trainer


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
