"""The online trainer's records: a step's batch, its metrics, the trainer's
state and the `Trainer` contract, with the shadow's variants of the last
two (`make_online_trainer`'s `shadow_every`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax


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
