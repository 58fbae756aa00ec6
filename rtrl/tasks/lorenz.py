"""Next-value prediction on the Lorenz system (Lorenz 1963): regression.

`dx/dt = σ (y - x)`, `dy/dt = x (ρ - z) - y`, `dz/dt = x y - β z` with
σ = 10, ρ = 28, β = 8/3 is chaotic. It is integrated by forward Euler with
step `DT` = 0.01 (sonaradarcn/sketched-rtrl's integrator and step, kept so
that runs compare) from `(1, 1, 1) + 0.1 N(0, I)` per lane, run for
`WARMUP_STEPS` Euler steps before the first sample; one sample every
`sample_every` Euler steps (default 2, sketched-rtrl's: 0.02 time units).
Only x is observed: input `x_t`, target `x_{t+1}`, standardised by `MEAN`
= 0 (the attractor's symmetry) and `STD` (measured once with NumPy in
float64 over 64 orbits of 20,000 samples with this integrator); resets every
`sequence_length` steps (default 200), the orbit going on
(`rtrl.tasks.dynamical_streams`). Loss: `rtrl.losses.squared_error`.

Metric: MSE per step in standardised units (NMSE). Baselines: predicting the
mean, 1.0 (the metric's baseline); predicting the last value, 0.0106 at
`sample_every=2` (`LAST_VALUE_MSE`; it grows with the interval: compute it
for other settings with `dynamical_streams.last_value_mse`).

Peers' settings (see docs/results/task_suite.md): sketched-rtrl's
`LorenzTask`: the parameters, integrator, step and subsampling above, 100
warm-up steps, x observed, 1-step horizon, each lane standardised by its own
series (ours: the attractor's), washout 200, tanh RNN of 64 units, batch 8,
Adam 1e-3, 15,000 online steps, 10 seeds; it reports NMSE 0.0051 ± 0.0040
for exact RTRL.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.tasks import dynamical_streams
from rtrl.tasks import task_metrics

SIGMA, RHO, BETA = 10.0, 28.0, 8.0 / 3.0
DT = 0.01
WARMUP_STEPS = 1000  # Euler steps, 10 time units
MEAN, STD = 0.0, 8.234  # of x on the (Euler, DT) attractor
LAST_VALUE_MSE = 0.0106  # standardised, sample_every=2


def derivative(state):
  """The Lorenz vector field at `(x, y, z)` (NumPy or JAX arrays)."""
  x, y, z = state[0], state[1], state[2]
  return (SIGMA * (y - x), x * (RHO - z) - y, x * y - BETA * z)


def euler_step(state: jax.Array) -> jax.Array:
  """One forward-Euler step of `DT`."""
  return state + DT * jnp.stack(derivative(state))


def advance(state: jax.Array, sample_every: int) -> jax.Array:
  """`sample_every` Euler steps."""
  return jax.lax.fori_loop(0, sample_every, lambda _, s: euler_step(s), state)


def reference_orbit(
  state0: np.ndarray, num_samples: int, sample_every: int = 2
) -> np.ndarray:
  """`(num_samples + 1,)` x values from `state0` by the same Euler scheme
  in NumPy float64 (for tests)."""
  state = np.asarray(state0, np.float64)
  xs = [state[0]]
  for _ in range(num_samples):
    for _ in range(sample_every):
      state = state + DT * np.array(derivative(state))
    xs.append(state[0])
  return np.array(xs)


def stream_init(
  key: jax.Array, batch_size: int
) -> dynamical_streams.SeriesStream:
  """`batch_size` lanes on the attractor (random starts, warmed up)."""
  validation.positive_int("batch_size", batch_size)
  dtype = dynamical_streams.work_dtype()
  states = 1.0 + 0.1 * jax.random.normal(key, (batch_size, 3), dtype)
  states = dynamical_streams.iterate(euler_step, states, WARMUP_STEPS)
  return dynamical_streams.init(states)


def chunk(
  stream: dynamical_streams.SeriesStream,
  num_steps: int,
  sample_every: int = 2,
  sequence_length: int = 200,
) -> tuple[dynamical_streams.SeriesStream, StepBatch]:
  """`num_steps` time-major steps: inputs and targets `(num_steps, B, 1)`."""
  validation.positive_int("sample_every", sample_every)
  return dynamical_streams.chunk(
    stream,
    num_steps,
    lambda state: advance(state, sample_every),
    MEAN,
    STD,
    sequence_length,
  )


def metric() -> task_metrics.Metric:
  """MSE per step (standardised), beside 1.0 (predicting the mean)."""
  return task_metrics.mse(1.0, "predict the mean")


__all__ = [
  "BETA",
  "DT",
  "LAST_VALUE_MSE",
  "MEAN",
  "RHO",
  "SIGMA",
  "STD",
  "WARMUP_STEPS",
  "advance",
  "chunk",
  "derivative",
  "euler_step",
  "metric",
  "reference_orbit",
  "stream_init",
]
