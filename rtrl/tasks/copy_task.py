"""The Copy task of Mujika et al. (2018) and Benzing et al. (2019), section 4.1.1.

A binary string of length L is shown, then the network must reproduce it. The
vocabulary has 4 symbols: bits 0 and 1, a marker `#` and a blank `*`. For
L = 5 and bits 01101:

    input   # 0 1 1 0 1 * * * * * *
    target  * * * * * * # 0 1 1 0 1

(2L + 2 steps). The loss and the reported error count the output phase only
(the marker and the L bits, where the target carries information), in bits per
character. Curriculum: start at T = 1 and add one whenever the error drops
below 0.15 bits/char; each sequence's length is drawn uniformly from
`max(1, T - 5) .. T`; state and tangents reset at every new sequence.

Each batch element runs its own stream of back-to-back sequences, so elements
start new sequences at different steps (the trainer's per-example reset mask).
The stream is generated inside jit with `lax.scan`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.online import StepBatch

BIT0, BIT1, MARKER, BLANK = 0, 1, 2, 3
VOCAB_SIZE = 4
ERROR_THRESHOLD = 0.15  # bits/char
LENGTH_WINDOW = 5       # lengths are drawn from T - 5 .. T


def encode(bits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The explicit token sequences of one Copy-task example (NumPy, for tests
  and display).

  Args:
    bits: sequence of 0/1 of length L >= 1.

  Returns:
    `(input_tokens, target_tokens, loss_weights)`, each of length 2L + 2.
  """
  bits = [int(b) for b in bits]
  if not bits or any(b not in (0, 1) for b in bits):
    raise ValueError(f"bits must be a non-empty sequence of 0/1, got {bits}")
  length = len(bits)
  inputs = [MARKER] + bits + [BLANK] * (length + 1)
  targets = [BLANK] * (length + 1) + [MARKER] + bits
  weights = [0.0] * (length + 1) + [1.0] * (length + 1)
  return np.array(inputs), np.array(targets), np.array(weights)


def curriculum_update(length, error_bits, threshold: float = ERROR_THRESHOLD):
  """`length + 1` if `error_bits < threshold`, else `length`."""
  return length + (error_bits < threshold)


class CopyStream(NamedTuple):
  """Per-example generator state (batched: leading axis B)."""
  bits: jax.Array      # (max_length,) int32, the current string (padded)
  length: jax.Array    # () int32, current sequence length L
  position: jax.Array  # () int32, next position in 0 .. 2L + 1
  key: jax.Array


def stream_init(key: jax.Array, batch_size: int, max_length: int) -> CopyStream:
  """Batched streams positioned so that the first step starts a sequence."""
  if isinstance(max_length, bool) or not isinstance(max_length, int) or \
      max_length < 1:
    raise ValueError(f"max_length must be a positive integer, got "
                     f"{max_length!r}")
  keys = jax.random.split(key, batch_size)
  zeros = jnp.zeros((batch_size,), jnp.int32)
  return CopyStream(bits=jnp.zeros((batch_size, max_length), jnp.int32),
                    length=zeros, position=zeros + 2, key=keys)


def sample_length(key: jax.Array, curriculum_length) -> jax.Array:
  """Uniform on `max(1, T - 5) .. T`."""
  low = jnp.maximum(1, curriculum_length - LENGTH_WINDOW)
  return jax.random.randint(key, (), low, curriculum_length + 1,
                            dtype=jnp.int32)


def _stream_step(stream: CopyStream, curriculum_length):
  """One step of one example's stream."""
  max_length = stream.bits.shape[0]
  finished = stream.position >= 2 * stream.length + 2
  key, length_key, bits_key = jax.random.split(stream.key, 3)
  new_length = sample_length(length_key, jnp.minimum(curriculum_length,
                                                     max_length))
  new_bits = jax.random.randint(bits_key, (max_length,), 0, 2, dtype=jnp.int32)
  bits = jnp.where(finished, new_bits, stream.bits)
  length = jnp.where(finished, new_length, stream.length)
  position = jnp.where(finished, 0, stream.position)
  key = jnp.where(finished, key, stream.key)

  p = position
  input_bit = bits[jnp.clip(p - 1, 0, max_length - 1)]
  input_token = jnp.where(p == 0, MARKER, jnp.where(p <= length, input_bit,
                                                    BLANK))
  target_bit = bits[jnp.clip(p - length - 2, 0, max_length - 1)]
  target_token = jnp.where(p <= length, BLANK,
                           jnp.where(p == length + 1, MARKER, target_bit))
  weight = (p > length).astype(jnp.float32)
  step = (jax.nn.one_hot(input_token, VOCAB_SIZE), target_token, weight,
          finished)
  return CopyStream(bits, length, position + 1, key), step


def generate(stream: CopyStream, curriculum_length, num_steps: int,
             dtype=None):
  """`num_steps` time-major steps of the batched streams.

  Returns:
    `(stream, StepBatch)` with leaves `(num_steps, B, ...)`.
  """
  dtype = dtype or jnp.asarray(0.0).dtype
  step_all = jax.vmap(_stream_step, in_axes=(0, None))

  def body(stream, _):
    stream, (inputs, targets, weights, resets) = step_all(stream,
                                                          curriculum_length)
    return stream, StepBatch(inputs.astype(dtype), targets,
                             weights.astype(dtype), resets)

  return jax.lax.scan(body, stream, None, length=num_steps)
