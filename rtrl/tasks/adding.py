"""The adding problem (Hochreiter & Schmidhuber 1997; Le et al. 2015, "IRNN";
Arjovsky et al. 2016): regression of the sum of two marked values.

An episode has `length` = T steps with two input channels: a value drawn
uniformly from [0, 1) and a marker that is 1 at exactly two steps, one drawn
uniformly from the first half (steps 0 .. T//2 - 1) and one from the second
half (T//2 .. T - 1), else 0. The target, read only at the last step (loss
weight 1 there, 0 elsewhere), is the sum of the two marked values; the loss
is `rtrl.losses.squared_error` on a one-output linear readout. Lanes run
episodes back to back (`rtrl.tasks.episodes`), the state and tangents reset
at each episode's first step; with a fixed T every lane resets at the same
steps.

Metric: the mean squared error at the last steps (`task_metrics.mse`).
Baseline: predicting the constant 1 (the mean of the sum) has MSE
Var(u1 + u2) = 1/6 = 0.167 (`BASELINE_MSE`); a network beats it only by
remembering the marked values across the episode.

Peers' settings (see docs/results/task_suite.md):

- sonaradarcn/sketched-rtrl (`skrtrl/tasks.py`, `AddingTask`): T = 100
  ("adding") and T = 40 ("adding40"); markers one per half, as here; MSE
  (PyTorch's `mse_loss`: the mean over entries, twice our ½-loss) at the
  last step only; all lanes reset together at each episode's first step; a
  tanh RNN of 64 units, batch 8, Adam 1e-3, 20,000 online steps; its metric
  is that MSE.
- Le et al. 2015 use T = 150 .. 750 and report the same 0.167 baseline;
  their marker placement was not checked here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl.online import StepBatch
from rtrl.tasks import episodes
from rtrl.tasks import task_metrics

INPUT_SIZE = 2  # value, marker
OUTPUT_SIZE = 1
BASELINE_MSE = 1.0 / 6.0  # predicting 1: Var(u1 + u2) for u ~ U[0, 1)


def check_length(length: int) -> int:
  """`length` if it is an int >= 2 (one marker per half), else ValueError."""
  if isinstance(length, bool) or not isinstance(length, int) or length < 2:
    raise ValueError(
      f"length must be an integer >= 2 (one marker in each half), got "
      f"{length!r}"
    )
  return length


def sample(key: jax.Array, length: int) -> tuple[episodes.Episode, jax.Array]:
  """One episode of T = `length` steps: inputs `(T, 2)` (value, marker),
  targets `(T, 1)` (the sum, repeated), weights `(T,)` one-hot at T - 1."""
  check_length(length)
  dtype = jnp.asarray(0.0).dtype
  values_key, first_key, second_key = jax.random.split(key, 3)
  values = jax.random.uniform(values_key, (length,), dtype)
  half = length // 2
  first = jax.random.randint(first_key, (), 0, half)
  second = jax.random.randint(second_key, (), half, length)
  steps = jnp.arange(length)
  markers = ((steps == first) | (steps == second)).astype(dtype)
  total = jnp.sum(values * markers)
  episode = episodes.Episode(
    inputs=jnp.stack([values, markers], axis=-1),
    targets=jnp.full((length, OUTPUT_SIZE), total, dtype),
    weights=(steps == length - 1).astype(dtype),
  )
  return episode, jnp.asarray(length, jnp.int32)


def stream_init(
  key: jax.Array, batch_size: int, length: int = 100
) -> episodes.EpisodeStream:
  """`batch_size` lanes whose first step starts an episode."""
  check_length(length)
  return episodes.init(key, batch_size, lambda k: sample(k, length))


def chunk(
  stream: episodes.EpisodeStream, num_steps: int, length: int = 100
) -> tuple[episodes.EpisodeStream, StepBatch]:
  """`num_steps` time-major steps: `StepBatch(inputs (num_steps, B, 2),
  targets (num_steps, B, 1), weights (num_steps, B), resets)`."""
  check_length(length)
  return episodes.chunk(stream, num_steps, lambda k: sample(k, length))


def metric() -> task_metrics.Metric:
  """MSE at the last steps, beside `BASELINE_MSE` (predicting 1)."""
  return task_metrics.mse(BASELINE_MSE, "predict 1 (the mean sum)")


__all__ = [
  "BASELINE_MSE",
  "INPUT_SIZE",
  "OUTPUT_SIZE",
  "check_length",
  "chunk",
  "metric",
  "sample",
  "stream_init",
]
