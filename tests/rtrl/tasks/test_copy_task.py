"""Copy task: the paper's explicit example, streams that decode into valid
`encode` examples with lengths in max(1, T-5)..T (output_only) or
max(1, T-4)..T (official) and resets at sequence starts, and the chunk
curriculum threshold (advance iff error < 0.15 bits/char). The official
protocol's per-step rule is tested in test_copy_curriculum.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl.tasks import copy_task
from rtrl.tasks.copy_task import BIT0
from rtrl.tasks.copy_task import BIT1
from rtrl.tasks.copy_task import BLANK
from rtrl.tasks.copy_task import MARKER

SYMBOLS = {BIT0: "0", BIT1: "1", MARKER: "#", BLANK: "*"}


def as_text(tokens):
  return " ".join(SYMBOLS[int(t)] for t in tokens)


def test_vocabulary_has_four_distinct_symbols():
  """Two bits, a marker and a blank: 4 distinct ids in 0..3."""
  assert copy_task.VOCAB_SIZE == 4
  assert sorted({BIT0, BIT1, MARKER, BLANK}) == [0, 1, 2, 3]
  assert copy_task.ERROR_THRESHOLD == 0.15


def test_encode_paper_example():
  """bits 01101 -> input `# 0 1 1 0 1 * * * * * *`, target
  `* * * * * * # 0 1 1 0 1`, loss on the output phase (marker + bits) only."""
  inputs, targets, weights = copy_task.encode([0, 1, 1, 0, 1])
  assert as_text(inputs) == "# 0 1 1 0 1 * * * * * *"
  assert as_text(targets) == "* * * * * * # 0 1 1 0 1"
  np.testing.assert_array_equal(weights, [0] * 6 + [1] * 6)


def test_encode_official_weights_every_position():
  """Under the official protocol the loss covers every position (the input
  phase's target is the blank); tokens are the same as output_only's."""
  inputs, targets, weights = copy_task.encode([0, 1, 1, 0, 1], "official")
  assert as_text(inputs) == "# 0 1 1 0 1 * * * * * *"
  assert as_text(targets) == "* * * * * * # 0 1 1 0 1"
  np.testing.assert_array_equal(weights, [1] * 12)


@pytest.mark.parametrize(
  "bits,inp,tgt",
  [
    ([1], "# 1 *", "* * # 1"),
    ([0, 0], "# 0 0 * * *", "* * * # 0 0"),
  ],
)
def test_encode_small_examples(bits, inp, tgt):
  """Explicit L=1 and L=2 examples (lengths 2L+2, blanks pad)."""
  inputs, targets, weights = copy_task.encode(bits)
  assert as_text(inputs) == inp + (" *" if len(bits) == 1 else "")
  assert as_text(targets) == tgt
  assert len(inputs) == len(targets) == len(weights) == 2 * len(bits) + 2
  np.testing.assert_array_equal(
    weights, [0] * (len(bits) + 1) + [1] * (len(bits) + 1)
  )


def _decode_streams(chunk):
  """Splits each example's stream at its resets; returns, per example, a list
  of `(complete, inputs, targets, weights)` segments (last may be partial)."""
  inputs = np.asarray(chunk.inputs)
  tokens = inputs.argmax(-1)
  # One-hot rows: exactly one 1 per step.
  np.testing.assert_array_equal(inputs.sum(-1), 1.0)
  targets, weights = np.asarray(chunk.targets), np.asarray(chunk.weights)
  resets = np.asarray(chunk.resets)
  out = []
  for b in range(tokens.shape[1]):
    starts = list(np.flatnonzero(resets[:, b])) + [tokens.shape[0]]
    assert starts[0] == 0, "the first step of every stream starts a sequence"
    segs = []
    for lo, hi in zip(starts[:-1], starts[1:]):
      segs.append(
        (
          hi < tokens.shape[0],
          tokens[lo:hi, b],
          targets[lo:hi, b],
          weights[lo:hi, b],
        )
      )
    out.append(segs)
  return out


# One compiled generator shape shared by the tests below (compiles are slow).
BATCH, MAX_LENGTH, STEPS = 4, 12, 200
_generate = jax.jit(
  copy_task.generate, static_argnums=2, static_argnames="curriculum"
)


def generate(seed, length, curriculum="output_only"):
  stream = copy_task.stream_init(jax.random.PRNGKey(seed), BATCH, MAX_LENGTH)
  return _generate(
    stream, jnp.asarray(length, jnp.int32), STEPS, curriculum=curriculum
  )


def check_segments(chunk, low, high, curriculum="output_only"):
  """Asserts every segment between resets is (a prefix of) `encode(bits)`
  with a length in low..high; returns the complete lengths and all bits."""
  lengths, all_bits = set(), []
  for segs in _decode_streams(chunk):
    assert len(segs) > 3  # several sequences per example
    for complete, inp, tgt, w in segs:
      if complete:
        assert len(inp) % 2 == 0
        length = (len(inp) - 2) // 2
      else:  # a partial last sequence: bits are the non-blank inputs
        length = int(np.sum(inp[1:] != BLANK))
        if length == 0:
          continue
      bits = inp[1 : 1 + length]
      assert set(bits.tolist()) <= {BIT0, BIT1}
      e_inp, e_tgt, e_w = copy_task.encode(bits, curriculum)
      n = len(inp)
      assert n <= len(e_inp)
      np.testing.assert_array_equal(inp, e_inp[:n])
      np.testing.assert_array_equal(tgt, e_tgt[:n])
      np.testing.assert_array_equal(w, e_w[:n])
      if complete:
        assert low <= length <= high
        lengths.add(length)
        all_bits.extend(bits.tolist())
  return lengths, all_bits


@pytest.mark.parametrize(
  "curriculum,protocol",
  [(1, "output_only"), (3, "output_only"), (9, "output_only"), (9, "official")],
)
def test_generate_streams_agree_with_encode(curriculum, protocol):
  """Every complete sequence between resets == `encode(bits, protocol)`
  (bits read from its input; weights per protocol); lengths lie in
  max(1, T-w)..T (w = 5 output_only, 4 official) and all of them occur;
  a reset comes exactly at each sequence start; a partial last segment is a
  prefix of a valid example."""
  _, chunk = generate(curriculum, curriculum, protocol)
  assert chunk.inputs.shape == (STEPS, BATCH, copy_task.VOCAB_SIZE)
  assert (
    chunk.targets.shape
    == chunk.weights.shape
    == chunk.resets.shape
    == (STEPS, BATCH)
  )
  assert chunk.resets.dtype == jnp.bool_
  assert chunk.inputs.dtype == chunk.weights.dtype == jnp.float32
  low = max(1, curriculum - copy_task.LENGTH_WINDOWS[protocol])
  lengths, all_bits = check_segments(chunk, low, curriculum, protocol)
  assert lengths == set(range(low, curriculum + 1))
  assert 0.3 < np.mean(all_bits) < 0.7  # bits are random, not constant
  if curriculum > 1:  # examples are different streams: resets differ
    resets = np.asarray(chunk.resets)
    assert not np.array_equal(resets[:, 0], resets[:, 1])


def test_generate_continues_across_calls():
  """A second `generate` call continues the sequences cut by the first: the
  concatenation decodes into valid examples, including the one that spans
  the boundary (a fresh stream would start with a reset instead)."""
  stream = copy_task.stream_init(jax.random.PRNGKey(5), BATCH, MAX_LENGTH)
  mid, part1 = _generate(stream, jnp.asarray(6, jnp.int32), STEPS)
  _, part2 = _generate(mid, jnp.asarray(6, jnp.int32), STEPS)
  whole = jax.tree_util.tree_map(
    lambda a, b: np.concatenate([a, b]), part1, part2
  )
  check_segments(whole, 1, 6)
  # Some example is mid-sequence at the boundary (no reset at part2's start).
  assert not np.all(np.asarray(part2.resets)[0])


def test_generate_caps_length_at_max_length():
  """A curriculum beyond `max_length` yields lengths in max_length-5 ..
  max_length."""
  _, chunk = generate(11, 40)
  lengths, _ = check_segments(chunk, MAX_LENGTH - 5, MAX_LENGTH)
  assert MAX_LENGTH in lengths


def test_generate_dtype_follows_x64(x64):
  """Under x64 the generator runs (its int32 stream state stays int32) and
  inputs and weights are float64."""
  stream = copy_task.stream_init(jax.random.PRNGKey(0), 2, 4)
  _, chunk = copy_task.generate(stream, jnp.asarray(2), 5)
  assert chunk.inputs.dtype == chunk.weights.dtype == jnp.float64


@pytest.mark.parametrize(
  "error,expected",
  [
    (0.0, 5),
    (0.1, 5),
    (float(np.nextafter(0.15, 0.0)), 5),  # just below the threshold
    (0.15, 4),  # exactly at it: no advance
    (float(np.nextafter(0.15, 1.0)), 4),
    (0.7, 4),
  ],
)
def test_curriculum_advances_strictly_below_threshold(error, expected):
  """T -> T+1 iff error < 0.15 bits/char (Python floats)."""
  assert int(copy_task.curriculum_update(4, error)) == expected


def test_curriculum_update_on_jax_scalars():
  """Same rule on traced int32/float32 scalars (as in the training loop)."""
  update = jax.jit(copy_task.curriculum_update)
  length = jnp.asarray(4, jnp.int32)
  below = np.nextafter(np.float32(0.15), np.float32(0.0))
  assert int(update(length, jnp.asarray(below))) == 5
  assert int(update(length, jnp.asarray(0.3, jnp.float32))) == 4
  assert update(length, jnp.asarray(0.1, jnp.float32)).dtype == jnp.int32


def test_curriculum_custom_threshold():
  """The threshold argument is honoured."""
  assert int(copy_task.curriculum_update(2, 0.25, threshold=0.3)) == 3
  assert int(copy_task.curriculum_update(2, 0.3, threshold=0.3)) == 2
