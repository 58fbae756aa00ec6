"""The Copy task of Mujika et al. (2018) and Benzing et al. (2019), section 4.1.1.

A binary string of length L is shown, then the network must reproduce it. The
vocabulary has 4 symbols: bits 0 and 1, a marker `#` and a blank `*`. For
L = 5 and bits 01101:

    input   # 0 1 1 0 1 * * * * * *
    target  * * * * * * # 0 1 1 0 1

(2L + 2 steps). The *output phase* is the marker and the L bits of the target,
where the target carries information. Each batch element runs its own stream
of back-to-back sequences, so elements start new sequences at different steps
(the trainer's per-example reset mask); state and tangents reset at every new
sequence. Everything is generated inside jit.

Two curriculum protocols (`curriculum=`), both starting at T = 1:

- `"official"`: what the official OK code runs, and what the paper's Figure 1
  was made with. The loss covers every position (input-phase target: the
  blank). The error is an exponential moving average (decay 0.999, starting at
  1 bit) of the per-step batch-mean cross-entropy in bits over all positions,
  updated after every training step. It is checked whenever a sequence starts,
  before that sequence's length is drawn: below 0.15, T += 1 and the average
  is set to 0.3. Lengths (`length_rule`): "uniform" on max(1, T - 4) .. T,
  or "clipped", the official script's max(1, T - k) with k uniform on 0..4,
  which differs while T < 5: there it puts the clipped mass on length 1
  (at T = 2, length 1 with probability 4/5, not 1/2), so the early
  curriculum climbs faster (the `official` Copy preset uses it).
  Within a step the official code checks at each starting example in turn
  (example index order) against the same average. `check_at_starts` computes
  that sequential rule in closed form: the first starting example fires iff
  the average is below the threshold; a later one fires only if the reset
  value is itself below the threshold (never with 0.3 > 0.15), so with the
  defaults at most one increase happens per step and every example starting at
  that step draws its length from the increased T. Exact for any constants.
- `"output_only"`: the loss and the error count the output phase only; the
  error is the output-phase mean over a chunk of steps, checked at the end of
  the chunk (T += 1 if below 0.15, `curriculum_update`); lengths are uniform
  on max(1, T - 5) .. T.

T never exceeds the stream's `max_length` (its bit buffer). `run_chunk`
interleaves stream generation, a training step and the curriculum update in
one `lax.scan`, so T can change mid-chunk with no host synchronisation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.readout import LOG2

BIT0, BIT1, MARKER, BLANK = 0, 1, 2, 3
VOCAB_SIZE = 4
ERROR_THRESHOLD = 0.15  # bits/char
LENGTH_WINDOW = 5  # output_only: lengths are drawn from T - 5 .. T
CURRICULA = ("official", "output_only")
LENGTH_RULES = ("uniform", "clipped")
LENGTH_WINDOWS = {"official": 4, "output_only": 5}
EMA_DECAY = 0.999  # official: decay of the error's moving average
EMA_INITIAL_BITS = 1.0  # official: its starting value
EMA_RESET_BITS = 0.3  # official: its value after each increase of T


def check_curriculum(curriculum: str) -> str:
  """Returns `curriculum` if it names a protocol, else raises ValueError."""
  if curriculum not in CURRICULA:
    raise ValueError(
      f"curriculum must be one of {CURRICULA}, got {curriculum!r}"
    )
  return curriculum


def encode(
  bits, curriculum: str = "output_only"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The explicit token sequences of one Copy-task example (NumPy, for tests
  and display).

  Args:
    bits: sequence of 0/1 of length L >= 1.
    curriculum: "official" (loss weight 1 everywhere) or "output_only" (1 on
      the output phase, 0 on the input phase).

  Returns:
    `(input_tokens, target_tokens, loss_weights)`, each of length 2L + 2.
  """
  check_curriculum(curriculum)
  bits = [int(b) for b in bits]
  if not bits or any(b not in (0, 1) for b in bits):
    raise ValueError(f"bits must be a non-empty sequence of 0/1, got {bits}")
  length = len(bits)
  inputs = [MARKER] + bits + [BLANK] * (length + 1)
  targets = [BLANK] * (length + 1) + [MARKER] + bits
  input_weight = 1.0 if curriculum == "official" else 0.0
  weights = [input_weight] * (length + 1) + [1.0] * (length + 1)
  return np.array(inputs), np.array(targets), np.array(weights)


def curriculum_update(length, error_bits, threshold: float = ERROR_THRESHOLD):
  """Chunk rule (output_only): `length + 1` if `error_bits < threshold`."""
  return length + (error_bits < threshold)


class CurriculumState(NamedTuple):
  """The curriculum of one run (scalars; part of the checkpointed state)."""

  length: jax.Array  # () int32, T
  error_ema: jax.Array  # () float, official: moving average (bits); unused
  # (stays at its start) under output_only


def curriculum_init(dtype=None) -> CurriculumState:
  """T = 1, moving average at 1 bit."""
  dtype = dtype or jnp.asarray(0.0).dtype
  return CurriculumState(
    length=jnp.ones((), jnp.int32),
    error_ema=jnp.full((), EMA_INITIAL_BITS, dtype),
  )


def check_at_starts(
  state: CurriculumState,
  starts: jax.Array,
  max_length: int,
  threshold: float = ERROR_THRESHOLD,
  reset_bits: float = EMA_RESET_BITS,
):
  """Official check at the sequence starts of one step, in example order.

  Equals the loop `for b: if starts[b]: if ema < threshold: T = min(T + 1,
  max_length); ema = reset_bits; T_b = T` (see the module docstring).

  Args:
    state: the curriculum before this step's starts.
    starts: (B,) bool, example b starts a sequence at this step.
    max_length: cap on T.

  Returns:
    `(state, lengths)`: the curriculum after the checks and the (B,) int32 T
    each example sees when it draws its length.
  """
  below = state.error_ema < threshold
  first = starts & (jnp.cumsum(starts.astype(jnp.int32)) == 1)
  fires = starts & below & (first | (reset_bits < threshold))
  seen = jnp.minimum(
    state.length + jnp.cumsum(fires.astype(jnp.int32)), max_length
  ).astype(jnp.int32)
  fired = fires.any()
  state = CurriculumState(
    length=jnp.where(fired, seen[-1], state.length),
    error_ema=jnp.where(
      fired, jnp.asarray(reset_bits, state.error_ema.dtype), state.error_ema
    ),
  )
  return state, seen


def ema_update(
  state: CurriculumState, loss_bits, decay: float = EMA_DECAY
) -> CurriculumState:
  """Official: `ema <- decay * ema + (1 - decay) * loss_bits`, with
  `loss_bits` the step's batch-mean cross-entropy over all positions."""
  ema = decay * state.error_ema + (1.0 - decay) * loss_bits
  return state._replace(error_ema=ema.astype(state.error_ema.dtype))


class CopyStream(NamedTuple):
  """Per-example generator state (batched: leading axis B)."""

  bits: jax.Array  # (max_length,) int32, the current string (padded)
  length: jax.Array  # () int32, current sequence length L
  position: jax.Array  # () int32, next position in 0 .. 2L + 1
  key: jax.Array


def stream_init(key: jax.Array, batch_size: int, max_length: int) -> CopyStream:
  """Batched streams positioned so that the first step starts a sequence."""
  validation.positive_int("max_length", max_length)
  keys = jax.random.split(key, batch_size)
  zeros = jnp.zeros((batch_size,), jnp.int32)
  return CopyStream(
    bits=jnp.zeros((batch_size, max_length), jnp.int32),
    length=zeros,
    position=zeros + 2,
    key=keys,
  )


def sample_length(
  key: jax.Array,
  curriculum_length,
  window: int = LENGTH_WINDOW,
  length_rule: str = "uniform",
) -> jax.Array:
  """ "uniform": uniform on `max(1, T - window) .. T`; "clipped": `max(1, T -
  k)`, `k` uniform on `0 .. window` (the official script's draw)."""
  if length_rule == "clipped":
    k = jax.random.randint(key, (), 0, window + 1, dtype=jnp.int32)
    return jnp.maximum(1, curriculum_length - k).astype(jnp.int32)
  low = jnp.maximum(1, curriculum_length - window)
  return jax.random.randint(
    key, (), low, curriculum_length + 1, dtype=jnp.int32
  )


def check_length_rule(length_rule: str) -> str:
  """`length_rule` if it is one of `LENGTH_RULES`, else a ValueError."""
  if length_rule not in LENGTH_RULES:
    raise ValueError(
      f"length_rule must be one of {LENGTH_RULES}, got {length_rule!r}"
    )
  return length_rule


def _example_step(
  stream: CopyStream,
  curriculum_length,
  window: int,
  all_positions: bool,
  length_rule: str,
):
  """One step of one example's stream (a new sequence of length drawn from
  `curriculum_length` starts if the last one has finished)."""
  max_length = stream.bits.shape[0]
  finished = stream.position >= 2 * stream.length + 2
  key, length_key, bits_key = jax.random.split(stream.key, 3)
  new_length = sample_length(
    length_key, jnp.minimum(curriculum_length, max_length), window, length_rule
  )
  new_bits = jax.random.randint(bits_key, (max_length,), 0, 2, dtype=jnp.int32)
  bits = jnp.where(finished, new_bits, stream.bits)
  length = jnp.where(finished, new_length, stream.length)
  position = jnp.where(finished, 0, stream.position)
  key = jnp.where(finished, key, stream.key)

  p = position
  input_bit = bits[jnp.clip(p - 1, 0, max_length - 1)]
  input_token = jnp.where(
    p == 0, MARKER, jnp.where(p <= length, input_bit, BLANK)
  )
  target_bit = bits[jnp.clip(p - length - 2, 0, max_length - 1)]
  target_token = jnp.where(
    p <= length, BLANK, jnp.where(p == length + 1, MARKER, target_bit)
  )
  output_weight = (p > length).astype(jnp.float32)
  weight = jnp.ones_like(output_weight) if all_positions else output_weight
  step = (
    jax.nn.one_hot(input_token, VOCAB_SIZE),
    target_token,
    weight,
    output_weight,
    finished,
  )
  return CopyStream(bits, length, position + 1, key), step


def _batch_step(
  stream: CopyStream,
  lengths,
  curriculum: str,
  dtype,
  length_rule: str = "uniform",
):
  """All examples' step with per-example (or shared) curriculum lengths."""
  in_axes = (0, 0 if jnp.ndim(lengths) else None)
  stream, (inputs, targets, weights, output_weights, resets) = jax.vmap(
    lambda s, t: _example_step(
      s, t, LENGTH_WINDOWS[curriculum], curriculum == "official", length_rule
    ),
    in_axes=in_axes,
  )(stream, lengths)
  batch = StepBatch(
    inputs.astype(dtype), targets, weights.astype(dtype), resets
  )
  return stream, batch, output_weights.astype(dtype)


def stream_step(
  stream: CopyStream,
  state: CurriculumState,
  curriculum: str,
  threshold: float = ERROR_THRESHOLD,
  reset_bits: float = EMA_RESET_BITS,
  dtype=None,
  length_rule: str = "uniform",
):
  """One step of the batched streams under a curriculum protocol.

  Under "official" the examples that start a sequence here are first checked
  (`check_at_starts`), then draw their lengths; under "output_only" they draw
  from `state.length` and the state is unchanged.

  Returns:
    `(stream, state, batch, output_weights)`: `batch` a `StepBatch` with
    leaves `(B, ...)` whose weights follow the protocol, `output_weights`
    (B,) the output-phase mask (for the output-phase error under both).
  """
  check_curriculum(curriculum)
  check_length_rule(length_rule)
  dtype = dtype or jnp.asarray(0.0).dtype
  lengths = state.length
  if curriculum == "official":
    starts = stream.position >= 2 * stream.length + 2
    state, lengths = check_at_starts(
      state, starts, stream.bits.shape[-1], threshold, reset_bits
    )
  stream, batch, output_weights = _batch_step(
    stream, lengths, curriculum, dtype, length_rule
  )
  return stream, state, batch, output_weights


def generate(
  stream: CopyStream,
  curriculum_length,
  num_steps: int,
  dtype=None,
  curriculum: str = "output_only",
  length_rule: str = "uniform",
):
  """`num_steps` time-major steps of the batched streams at a fixed T (no
  curriculum checks; weights and length window follow `curriculum`).

  Returns:
    `(stream, StepBatch)` with leaves `(num_steps, B, ...)`.
  """
  check_curriculum(curriculum)
  dtype = dtype or jnp.asarray(0.0).dtype

  def body(stream, _):
    stream, batch, _ = _batch_step(
      stream,
      curriculum_length,
      curriculum,
      dtype,
      check_length_rule(length_rule),
    )
    return stream, batch

  return jax.lax.scan(body, stream, None, length=num_steps)


class CopyStepMetrics(NamedTuple):
  """One training step's losses (nats), summed over the batch."""

  loss_sum: jax.Array  # Σ_b w_b CE_b, w the protocol's loss weights
  weight_sum: jax.Array  # Σ_b w_b (B under official)
  output_loss_sum: jax.Array  # Σ_b o_b CE_b, o the output-phase mask
  output_weight_sum: jax.Array  # Σ_b o_b


class ChunkOutputs(NamedTuple):
  """Per-step outputs of `run_chunk`, leaves `(num_steps, ...)`."""

  metrics: CopyStepMetrics  # what `train_step` reported
  curriculum: CurriculumState  # the curriculum after each step
  batches: StepBatch  # what `train_step` was given
  output_weights: jax.Array  # (num_steps, B) output-phase masks


def run_chunk(
  train_step: Callable[..., Any],
  train_state: Any,
  stream: CopyStream,
  state: CurriculumState,
  num_steps: int,
  curriculum: str,
  threshold: float = ERROR_THRESHOLD,
  decay: float = EMA_DECAY,
  reset_bits: float = EMA_RESET_BITS,
  dtype=None,
  length_rule: str = "uniform",
):
  """`num_steps` interleaved steps: stream step, training step, curriculum.

  Args:
    train_step: pure `(train_state, batch, output_weights) -> (train_state,
      CopyStepMetrics)`; trains on `batch` (its weights follow the protocol).
      It may also be a forward pass with fixed parameters (TBPTT: the
      batches are returned for the window's update).
    curriculum: "official" (checks at sequence starts, moving average updated
      with `loss_sum / weight_sum` in bits after every step) or "output_only"
      (T += 1 at the end if the chunk's output-phase error is below
      `threshold`; within the chunk T is fixed).
    length_rule: how a new sequence's length is drawn from T: "uniform" or
      "clipped" (the official script's; see the module docstring).

  Returns:
    `((train_state, stream, state), ChunkOutputs)`.
  """
  check_curriculum(curriculum)
  official = curriculum == "official"

  def body(carry, _):
    train_state, stream, state = carry
    stream, state, batch, output_weights = stream_step(
      stream, state, curriculum, threshold, reset_bits, dtype, length_rule
    )
    train_state, metrics = train_step(train_state, batch, output_weights)
    if official:
      state = ema_update(
        state,
        metrics.loss_sum / jnp.maximum(metrics.weight_sum, 1) / LOG2,
        decay,
      )
    return (train_state, stream, state), ChunkOutputs(
      metrics, state, batch, output_weights
    )

  (train_state, stream, state), outputs = jax.lax.scan(
    body, (train_state, stream, state), None, length=num_steps
  )
  if not official:
    state = check_after_chunk(
      state, outputs.metrics, stream.bits.shape[-1], threshold
    )
  return (train_state, stream, state), outputs


def check_after_chunk(
  state: CurriculumState,
  metrics: CopyStepMetrics,
  max_length: int,
  threshold: float = ERROR_THRESHOLD,
) -> CurriculumState:
  """Output_only's check at a chunk's end: T += 1 (at most `max_length`) if
  the output-phase error of `metrics` (leaves `(num_steps,)`), in bits, is
  below `threshold`."""
  error_bits = (
    metrics.output_loss_sum.sum()
    / jnp.maximum(metrics.output_weight_sum.sum(), 1)
    / LOG2
  )
  length = jnp.minimum(
    curriculum_update(state.length, error_bits, threshold), max_length
  )
  return state._replace(length=length.astype(jnp.int32))
