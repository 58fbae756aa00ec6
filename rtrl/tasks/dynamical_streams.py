"""Next-value prediction on a deterministic dynamical system, streamed: the
lanes of the Hénon and Lorenz tasks (`rtrl.tasks.henon`,
`rtrl.tasks.lorenz`).

Each lane follows its own trajectory (its own initial condition, already
on the attractor). At each step the input is the observed coordinate
`x_t` and the target `x_{t+1}`, both `(B, 1)` and standardised with the
attractor's mean and standard deviation; loss weight 1 at every step
(`rtrl.losses.squared_error`). Every `sequence_length` steps `resets` is
set in every lane, so state and tangents start afresh while the trajectory
goes on (sonaradarcn/sketched-rtrl's "washout"); `sequence_length=0`
resets only at the stream's first step. Everything runs inside jit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.online import StepBatch


class SeriesStream(NamedTuple):
  """Per-lane state (every leaf has the leading lane axis B)."""

  state: jax.Array  # (B, dim) the system's state, float32 or wider
  position: jax.Array  # (B,) int32 steps taken


def work_dtype():
  """The dtype trajectories are computed in: the default float dtype, at
  least float32 (a chaotic orbit's rounding would change its course)."""
  return jnp.promote_types(jnp.asarray(0.0).dtype, jnp.float32)


def init(states: jax.Array) -> SeriesStream:
  """Lanes starting at `states` `(B, dim)`, their first step a reset."""
  return SeriesStream(
    states.astype(work_dtype()), jnp.zeros(states.shape[:1], jnp.int32)
  )


def check_sequence_length(sequence_length: int) -> int:
  """`sequence_length` if it is an int >= 0 (0: one sequence), else a
  ValueError naming it."""
  return validation.nonnegative_int(
    "sequence_length",
    sequence_length,
    zero_means="reset at the first step only",
  )


def chunk(
  stream: SeriesStream,
  num_steps: int,
  advance: Callable[[jax.Array], jax.Array],
  mean: float,
  std: float,
  sequence_length: int,
) -> tuple[SeriesStream, StepBatch]:
  """`num_steps` time-major steps.

  Args:
    advance: one sample interval of the system, `(dim,) -> (dim,)`; the
      observed coordinate is the first.
    mean, std: standardisation of the observed coordinate.
    sequence_length: steps between resets (0: the first step only).

  Returns:
    `(stream, StepBatch(inputs (num_steps, B, 1), targets (num_steps, B,
    1), weights ones (num_steps, B), resets (num_steps, B)))`.
  """
  validation.positive_int("num_steps", num_steps)
  period = check_sequence_length(sequence_length)
  dtype = jnp.asarray(0.0).dtype

  def standardise(x):
    return ((x - mean) / std).astype(dtype)[:, None]

  def body(stream, _):
    state = jax.vmap(advance)(stream.state)
    if period:
      resets = stream.position % period == 0
    else:
      resets = stream.position == 0
    batch = StepBatch(
      inputs=standardise(stream.state[:, 0]),
      targets=standardise(state[:, 0]),
      weights=jnp.ones(resets.shape, dtype),
      resets=resets,
    )
    return SeriesStream(state, stream.position + 1), batch

  return jax.lax.scan(body, stream, None, length=num_steps)


def iterate(
  advance: Callable[[jax.Array], jax.Array], states: jax.Array, times: int
) -> jax.Array:
  """`advance` applied `times` times to each row of `states` `(B, dim)`."""

  def body(states, _):
    return jax.vmap(advance)(states), None

  return jax.lax.scan(body, states, None, length=times)[0]


def last_value_mse(batch: StepBatch) -> jax.Array:
  """Weighted MSE of predicting `x_{t+1}` by `x_t` (standardised units)."""
  error = jnp.mean((batch.targets - batch.inputs) ** 2, axis=-1)
  return jnp.sum(batch.weights * error) / jnp.sum(batch.weights)


__all__ = [
  "SeriesStream",
  "check_sequence_length",
  "chunk",
  "init",
  "iterate",
  "last_value_mse",
  "work_dtype",
]
