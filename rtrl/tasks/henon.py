"""Next-value prediction on the Hénon map (Hénon 1976): regression.

The map `x' = 1 - a x² + y`, `y' = b x` with a = 1.4, b = 0.3 is chaotic.
Each lane starts at `x0 ~ U(0, 0.2)`, `y0 = 0` (sketched-rtrl starts lane b
at x = 0.1 + 0.01 b) and is iterated `WARMUP_STEPS` times before its first
sample, so that it is on the attractor. Only x is observed: the input at
step t is `x_t` and the target `x_{t+1}`, standardised with the attractor's
`MEAN` and `STD` (measured once with NumPy in float64 over 64 orbits of
20,000 iterations), so that predicting the mean has MSE 1. One map
iteration a step; resets every `sequence_length` steps (default 200,
sketched-rtrl's washout), the orbit going on (`rtrl.tasks.dynamical_streams`).
Loss: `rtrl.losses.squared_error` on one output.

Metric: MSE per step in standardised units (the normalised MSE, NMSE, that
sketched-rtrl reports). Baselines: predicting the mean, 1.0 (the metric's
baseline); predicting the last value, 2.63 (worse: consecutive x are
anti-correlated); the map itself is exact, so a perfect model reaches 0
given y, which the network must infer from past x (`x_{t+1} = 1 - a x_t² +
b x_{t-1}`).

Peers' settings (see docs/results/task_suite.md): sketched-rtrl's
`HenonTask`: a = 1.4, b = 0.3, observe x, 1-step horizon, 64-step transient
skipped, each lane standardised by its own series' mean and std (ours: the
attractor's, the same in the limit), washout 200 (all lanes together), a
tanh RNN of 64 units, batch 8, Adam 1e-3, 15,000 online steps, 10 seeds;
it reports NMSE 0.0052 ± 0.0010 for exact RTRL (mean of the last five logs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.tasks import dynamical_streams
from rtrl.tasks import task_metrics

A_PARAM, B_PARAM = 1.4, 0.3
WARMUP_STEPS = 100
MEAN, STD = 0.2571, 0.7209  # of x on the attractor
LAST_VALUE_MSE = 2.63  # standardised units


def henon_map(state: jax.Array) -> jax.Array:
  """One iteration of `(x, y)`."""
  x, y = state[0], state[1]
  return jnp.stack([1.0 - A_PARAM * x * x + y, B_PARAM * x])


def reference_orbit(x0: float, y0: float, num_steps: int) -> np.ndarray:
  """`(num_steps + 1,)` x values from `(x0, y0)` by the same map in NumPy
  float64 (for tests)."""
  xs = [x0]
  x, y = x0, y0
  for _ in range(num_steps):
    x, y = 1.0 - A_PARAM * x * x + y, B_PARAM * x
    xs.append(x)
  return np.array(xs)


def stream_init(
  key: jax.Array, batch_size: int
) -> dynamical_streams.SeriesStream:
  """`batch_size` lanes on the attractor (random starts, warmed up)."""
  validation.positive_int("batch_size", batch_size)
  dtype = dynamical_streams.work_dtype()
  x0 = jax.random.uniform(key, (batch_size,), dtype, 0.0, 0.2)
  states = jnp.stack([x0, jnp.zeros_like(x0)], axis=-1)
  states = dynamical_streams.iterate(henon_map, states, WARMUP_STEPS)
  return dynamical_streams.init(states)


def chunk(
  stream: dynamical_streams.SeriesStream,
  num_steps: int,
  sequence_length: int = 200,
) -> tuple[dynamical_streams.SeriesStream, StepBatch]:
  """`num_steps` time-major steps: inputs and targets `(num_steps, B, 1)`."""
  return dynamical_streams.chunk(
    stream, num_steps, henon_map, MEAN, STD, sequence_length
  )


def metric() -> task_metrics.Metric:
  """MSE per step (standardised), beside 1.0 (predicting the mean)."""
  return task_metrics.mse(1.0, "predict the mean")


__all__ = [
  "A_PARAM",
  "B_PARAM",
  "LAST_VALUE_MSE",
  "MEAN",
  "STD",
  "WARMUP_STEPS",
  "chunk",
  "henon_map",
  "metric",
  "reference_orbit",
  "stream_init",
]
