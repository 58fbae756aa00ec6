"""Next-value prediction on the Mackey-Glass chaotic time series: regression.

The Mackey-Glass delay differential equation

    dx/dt = beta * x(t - tau) / (1 + x(t - tau)^power) - gamma * x(t)

with beta = 0.2, gamma = 0.1, power = 10 and tau = 17 is chaotic (its
classical benchmark setting). It is integrated by forward Euler with step
`DT` = 0.1 and a constant initial history x0 ~ U(0.5, 1.5) per stream, which
runs for `WARMUP_STEPS` Euler steps (200 time units) before the first sample
so that each stream is on the attractor; the streams are independent. One
sample is taken every `sample_every` Euler steps (default 10: one time unit)
and standardised with the attractor's mean and standard deviation (`MEAN`,
`STD`, measured once with this integrator over 64 streams of 20,000 time
units). In standardised units, predicting the mean has a mean squared error
of 1; predicting the last value about 0.021 at one time unit per sample and
0.19 at three (`sample_every=30`); linear extrapolation `2 x_t - x_{t-1}`
about 0.001 and 0.07.

`next_value_chunk` turns samples into a time-major `StepBatch`: the input at
step t is `x_t`, the target `x_{t+1}` (both `(B, 1)` float), weights 1, and a
reset where a sequence starts. Train with `losses.squared_error` and a readout
with one output. Everything is a pure function of a key and sizes (jittable).

`stream_init` / `stream_chunk` stream the same series chunk by chunk (the
lanes of the `mackey_glass` task of `rtrl.tasks.suite`, through
`rtrl.tasks.dynamical_streams`): each lane's state packs x, the ring
buffer's slot and the buffer, and its targets are exactly `mackey_glass`'s
samples for the same key. sonaradarcn/sketched-rtrl's `MackeyGlassTask`
has the same equation and constants but integrates with Euler steps of one
time unit (ours: 0.1) from a history drawn from U(1.2, 1.4), one sample a
time unit, washout 200; it reports NMSE 0.0180 ± 0.0218 for exact RTRL
(10 seeds, 15,000 steps).

References:
  Mackey & Glass, "Oscillation and chaos in physiological control systems",
  Science 1977.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.tasks import dynamical_streams

BETA, GAMMA, POWER, TAU = 0.2, 0.1, 10, 17.0
DT = 0.1
DELAY_STEPS = 170  # TAU / DT
WARMUP_STEPS = 2000  # 200 time units
MEAN, STD = 0.930, 0.226


def _euler_step(carry, _):
  """One Euler step; `history` is a ring buffer of the last `DELAY_STEPS`
  values, `history[k % DELAY_STEPS]` holding x(t - tau) at step k."""
  x, history, k = carry
  slot = k % DELAY_STEPS
  delayed = history[slot]
  dx = BETA * delayed / (1.0 + delayed**POWER) - GAMMA * x
  history = history.at[slot].set(x)
  return (x + DT * dx, history, k + 1), None


def mackey_glass(
  key: jax.Array,
  batch_size: int,
  num_samples: int,
  sample_every: int = 10,
  dtype=None,
) -> jax.Array:
  """`(num_samples, batch_size)` standardised samples, one independent
  stream per column, `sample_every` Euler steps (of `DT`) apart."""
  validation.positive_int("batch_size", batch_size)
  validation.positive_int("num_samples", num_samples)
  validation.positive_int("sample_every", sample_every)
  dtype = dtype or jnp.asarray(0.0).dtype
  # A half-precision request still integrates in float32: over thousands of
  # Euler steps its rounding would change the dynamics, not just the output.
  work = jnp.promote_types(dtype, jnp.float32)
  x0 = jax.random.uniform(key, (batch_size,), work, 0.5, 1.5)

  def sample(carry, _):
    carry, _ = jax.lax.scan(_euler_step, carry, None, length=sample_every)
    return carry, carry[0]

  def stream(x0):
    carry = (x0, jnp.full((DELAY_STEPS,), x0), jnp.zeros((), jnp.int32))
    carry, _ = jax.lax.scan(_euler_step, carry, None, length=WARMUP_STEPS)
    _, samples = jax.lax.scan(sample, carry, None, length=num_samples)
    return samples

  samples = jax.vmap(stream, out_axes=1)(x0)
  return ((samples - MEAN) / STD).astype(dtype)


def next_value_chunk(
  series: jax.Array, sequence_length: int | None = None
) -> StepBatch:
  """A time-major `StepBatch` of `T = series.shape[0] - 1` steps.

  Args:
    series: `(T + 1, B)` samples (e.g. `mackey_glass`).
    sequence_length: reset state and tangents every this many steps (None:
      only at step 0, one sequence per stream).

  Returns:
    `StepBatch(inputs (T, B, 1) = series[:-1], targets (T, B, 1) =
    series[1:], weights (T, B) ones, resets (T, B))`.
  """
  num_steps, batch_size = series.shape[0] - 1, series.shape[1]
  validation.positive_int("series.shape[0] - 1", num_steps)
  period = (
    num_steps
    if sequence_length is None
    else validation.positive_int("sequence_length", sequence_length)
  )
  starts = jnp.arange(num_steps) % period == 0
  return StepBatch(
    inputs=series[:-1, :, None],
    targets=series[1:, :, None],
    weights=jnp.ones((num_steps, batch_size), series.dtype),
    resets=jnp.broadcast_to(starts[:, None], (num_steps, batch_size)),
  )


def generate(
  key: jax.Array,
  batch_size: int,
  num_steps: int,
  sequence_length: int | None = None,
  sample_every: int = 10,
  dtype=None,
) -> StepBatch:
  """`next_value_chunk` of `num_steps + 1` fresh Mackey-Glass samples."""
  series = mackey_glass(key, batch_size, num_steps + 1, sample_every, dtype)
  return next_value_chunk(series, sequence_length)


def last_value_mse(chunk: StepBatch) -> jax.Array:
  """Weighted mean squared error of predicting `x_{t+1}` by `x_t`: the
  baseline a trained model must beat (per output, standardised units)."""
  error = jnp.mean((chunk.targets - chunk.inputs) ** 2, axis=-1)
  return jnp.sum(chunk.weights * error) / jnp.sum(chunk.weights)


def _packed_euler_step(state: jax.Array) -> jax.Array:
  """One Euler step of a lane's packed state `(x, slot, history...)`, `(2 +
  DELAY_STEPS,)`: x first (the observed coordinate), then the ring
  buffer's slot (exact as a float: below `DELAY_STEPS`)."""
  slot = state[1].astype(jnp.int32)
  (x, history, _), _ = _euler_step((state[0], state[2:], slot), None)
  next_slot = ((slot + 1) % DELAY_STEPS).astype(state.dtype)
  return jnp.concatenate([x[None], next_slot[None], history])


def stream_init(
  key: jax.Array, batch_size: int
) -> dynamical_streams.SeriesStream:
  """`batch_size` lanes after the warm-up, from the same initial values as
  `mackey_glass(key, batch_size, ...)`."""
  validation.positive_int("batch_size", batch_size)
  work = dynamical_streams.work_dtype()
  x0 = jax.random.uniform(key, (batch_size,), work, 0.5, 1.5)
  states = jnp.concatenate(
    [
      x0[:, None],
      jnp.zeros((batch_size, 1), work),
      jnp.broadcast_to(x0[:, None], (batch_size, DELAY_STEPS)),
    ],
    axis=1,
  )
  states = dynamical_streams.iterate(_packed_euler_step, states, WARMUP_STEPS)
  return dynamical_streams.init(states)


def stream_chunk(
  stream: dynamical_streams.SeriesStream,
  num_steps: int,
  sample_every: int = 10,
  sequence_length: int = 200,
) -> tuple[dynamical_streams.SeriesStream, StepBatch]:
  """`num_steps` time-major steps of the lanes: input `x_t`, target the
  sample `sample_every` Euler steps later (standardised), resets every
  `sequence_length` steps (0: the first only)."""
  validation.positive_int("sample_every", sample_every)

  def advance(state):
    return jax.lax.fori_loop(
      0, sample_every, lambda _, s: _packed_euler_step(s), state
    )

  return dynamical_streams.chunk(
    stream, num_steps, advance, MEAN, STD, sequence_length
  )
