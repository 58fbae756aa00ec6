"""Task metrics besides the loss, computed online from the predictions the
trainer scored: a `Metric` is `init(batch_size) -> state` and
`update(state, prediction, batch) -> (state, MetricSums)` for one step, so
that it runs inside the same `lax.scan` as the training step and carries
what it needs across chunk boundaries (e.g. whether the sequence a lane is
in has been all correct so far).

Every metric is a ratio of sums, `Σ value_sum / Σ weight_sum` over any window of
steps (`value`), so windows of any length and chunk boundaries combine
exactly:

  mse                 mean squared error per output entry on the weighted
                      steps (`Σ_b w_b mean_j (y_bj - t_bj)²` / `Σ_b w_b`).
  accuracy            fraction of weighted steps whose arg-max is the label.
  sequences_solved    fraction of completed sequences in which every step
                      marked deterministic was predicted correctly (a
                      sequence counts when the next one starts in its lane).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl.online import StepBatch


class MetricSums(NamedTuple):
  """One step's (or a window's) numerator and denominator."""

  value_sum: jax.Array  # Σ of the per-example values (e.g. w_b * error_b)
  weight_sum: jax.Array  # Σ of what they count (e.g. w_b, sequences)


class Metric(NamedTuple):
  """A task metric (see the module docstring).

  Attributes:
    name: for logs ("mse", "accuracy", "sequences_solved").
    init: `batch_size -> state`, a pytree whose leaves have the leading
      lane axis B (or no leaves).
    update: `(state, prediction (B, output_size), batch) -> (state,
      MetricSums)`, `batch` the step's `StepBatch` (leaves `(B, ...)`).
    baseline: the metric of a trivial predictor (documented by
      `baseline_name`), or None.
    baseline_name: what that predictor is.
    higher_is_better: accuracy-like (True) or error-like (False).
  """

  name: str
  init: Callable[[int], Any]
  update: Callable[[Any, jax.Array, StepBatch], tuple[Any, MetricSums]]
  baseline: float | None = None
  baseline_name: str = ""
  higher_is_better: bool = False


def value(sums: MetricSums) -> jax.Array:
  """`Σ value_sum / Σ weight_sum` over every entry (0 where nothing was
  counted)."""
  total, count = jnp.sum(sums.value_sum), jnp.sum(sums.weight_sum)
  return jnp.where(count > 0, total / jnp.maximum(count, 1e-30), 0.0)


def _no_state(batch_size: int) -> tuple:
  del batch_size
  return ()


def mse(baseline: float | None = None, baseline_name: str = "") -> Metric:
  """Weighted mean squared error per output entry (float targets)."""

  def update(state, prediction, batch):
    error = jnp.mean(
      jnp.reshape((prediction - batch.targets) ** 2, (prediction.shape[0], -1)),
      axis=-1,
    )
    weights = batch.weights.astype(error.dtype)
    return state, MetricSums(jnp.sum(weights * error), jnp.sum(weights))

  return Metric("mse", _no_state, update, baseline, baseline_name, False)


def accuracy(
  chance: float | None = None,
  baseline_name: str = "",
  counted: Callable[[StepBatch], jax.Array] | None = None,
) -> Metric:
  """Fraction of weighted steps whose arg-max logit is the integer label.

  Args:
    counted: optional `batch -> (B,) bool`, the steps to count among the
      weighted ones (e.g. the recall steps of a loss on every step).
  """

  def update(state, prediction, batch):
    weights = batch.weights
    if counted is not None:
      weights = weights * counted(batch).astype(weights.dtype)
    correct = (jnp.argmax(prediction, axis=-1) == batch.targets).astype(
      weights.dtype
    )
    return state, MetricSums(jnp.sum(weights * correct), jnp.sum(weights))

  return Metric("accuracy", _no_state, update, chance, baseline_name, True)


class SolvedState(NamedTuple):
  """Per lane: whether a sequence is under way and whether it has been all
  correct on its deterministic steps so far."""

  in_sequence: jax.Array  # (B,) bool
  all_correct: jax.Array  # (B,) bool


def sequences_solved(
  deterministic: Callable[[StepBatch], jax.Array],
  baseline: float | None = 0.0,
  baseline_name: str = "",
) -> Metric:
  """Fraction of completed sequences with every deterministic step right.

  Args:
    deterministic: `batch -> (B,) bool`, the steps whose target follows
      from the sequence so far (only those are checked).
  """

  def init(batch_size):
    false = jnp.zeros((batch_size,), bool)
    return SolvedState(false, false)

  def update(state, prediction, batch):
    completed = batch.resets & state.in_sequence
    solved = completed & state.all_correct
    right = jnp.argmax(prediction, axis=-1) == batch.targets
    checked = deterministic(batch)
    all_correct = jnp.where(batch.resets, True, state.all_correct)
    all_correct = all_correct & (right | ~checked)
    state = SolvedState(state.in_sequence | batch.resets, all_correct)
    dtype = jnp.asarray(0.0).dtype
    return state, MetricSums(
      jnp.sum(solved.astype(dtype)), jnp.sum(completed.astype(dtype))
    )

  return Metric("sequences_solved", init, update, baseline, baseline_name, True)


__all__ = [
  "Metric",
  "MetricSums",
  "SolvedState",
  "accuracy",
  "mse",
  "sequences_solved",
  "value",
]
