"""Back-to-back episodes in every batch lane: the stream of the episodic
suite tasks (adding, copy-memory, rotation, aⁿbⁿ).

A task gives a pure `sample(key) -> (Episode, length)`: one episode's
per-step inputs, targets and loss weights, padded to a fixed maximum length
so that shapes are static, and its true length (1 .. max). Each lane plays
its episode one step at a time and draws the next one (with its own key)
when the last has finished, setting `resets` at that step, so that state
and tangents start afresh there; lanes with variable-length episodes drift
apart as the Copy streams do (`rtrl.tasks.copy_task`). Everything runs
inside jit; `chunk` returns a time-major `rtrl.online.StepBatch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.online import StepBatch


class Episode(NamedTuple):
  """One episode, padded to `max_length` steps.

  Attributes:
    inputs: (max_length, input_size) float.
    targets: (max_length,) int labels or (max_length, output_size) float.
    weights: (max_length,) float loss mask (0 where no target).
  """

  inputs: jax.Array
  targets: jax.Array
  weights: jax.Array


Sampler = Callable[[jax.Array], tuple[Episode, jax.Array]]


class EpisodeStream(NamedTuple):
  """Per-lane generator state (every leaf has the leading lane axis B)."""

  episode: Episode  # the current episode, leaves (B, max_length, ...)
  length: jax.Array  # (B,) int32, its true length
  position: jax.Array  # (B,) int32, the next step to play
  key: jax.Array  # (B, ...) per-lane keys


def init(key: jax.Array, batch_size: int, sample: Sampler) -> EpisodeStream:
  """`batch_size` lanes positioned so that their first step starts an
  episode (drawn then, from each lane's key)."""
  validation.positive_int("batch_size", batch_size)
  keys = jax.random.split(key, batch_size)
  shapes, _ = jax.eval_shape(sample, keys[0])
  episode = jax.tree_util.tree_map(
    lambda s: jnp.zeros((batch_size,) + s.shape, s.dtype), shapes
  )
  zeros = jnp.zeros((batch_size,), jnp.int32)
  return EpisodeStream(episode, zeros, zeros, keys)


def _lane_step(sample: Sampler, lane: EpisodeStream):
  """One lane's step: draw a fresh episode if the current one has ended,
  then play its next step."""
  finished = lane.position >= lane.length
  key, draw_key = jax.random.split(lane.key)
  fresh, fresh_length = sample(draw_key)
  episode = jax.tree_util.tree_map(
    lambda new, old: jnp.where(finished, new, old), fresh, lane.episode
  )
  length = jnp.where(finished, fresh_length, lane.length).astype(jnp.int32)
  position = jnp.where(finished, 0, lane.position)
  key = jnp.where(finished, key, lane.key)
  step = jax.tree_util.tree_map(lambda a: a[position], episode)
  lane = EpisodeStream(episode, length, position + 1, key)
  return lane, StepBatch(step.inputs, step.targets, step.weights, finished)


def chunk(
  stream: EpisodeStream, num_steps: int, sample: Sampler
) -> tuple[EpisodeStream, StepBatch]:
  """`num_steps` time-major steps of the lanes.

  Returns:
    `(stream, StepBatch)`, the batch's leaves `(num_steps, B, ...)` with
    `resets` True where a lane starts an episode.
  """
  validation.positive_int("num_steps", num_steps)

  def body(stream, _):
    return jax.vmap(lambda lane: _lane_step(sample, lane))(stream)

  return jax.lax.scan(body, stream, None, length=num_steps)


__all__ = ["Episode", "EpisodeStream", "chunk", "init"]
