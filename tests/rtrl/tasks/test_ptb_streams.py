"""Char-PTB symbols, training streams and BPC evaluation (rtrl/tasks/ptb*.py).

Hand-made texts, checked against plain Python loops in float64; the files
themselves are tested with their loader (tests/experiments/data).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import cells
from rtrl import readout
from rtrl.tasks import ptb
from rtrl.tasks import ptb_eval

HAND_MADE = "a b _ c\n d _ e f _ g \n h\n "  # 4 lines in the PTB layout


def test_encode_hand_made_text():
  ids = ptb.encode(HAND_MADE)
  symbols = "".join(ptb.VOCAB[i] for i in ids)
  assert symbols == "ab_c\nd_ef_g\nh\n\n"
  assert ptb.decode(ids) == "a b _ c\nd _ e f _ g\nh\n"


def test_official_layout_puts_a_separator_at_both_ends_of_every_line():
  ids = ptb.encode(HAND_MADE, layout="official")
  symbols = "".join(ptb.VOCAB[i] for i in ids)
  # Empty lines vanish; every other line is `_`, its symbols, `_`, EOL.
  assert symbols == "_ab_c_\n_d_ef_g_\n_h_\n"
  with pytest.raises(ValueError, match="layout must be one of"):
    ptb.encode(HAND_MADE, layout="word")


def test_out_of_vocabulary_symbol_is_named():
  with pytest.raises(ValueError, match="symbol 'ab'"):
    ptb.encode("a ab")


def test_streams_are_contiguous_text_with_next_symbol_targets():
  text = ptb.encode(HAND_MADE)
  n, batch, steps = text.size, 3, 7  # n = 15: offsets 0, 5, 10
  state = ptb.stream_init(jax.random.PRNGKey(0), n, batch)
  np.testing.assert_array_equal(state.position, [0, 5, 10])
  device_text = jnp.asarray(text)
  chunk_fn = jax.jit(ptb.stream_chunk, static_argnums=(2, 4))
  inputs, targets = [], []
  for _ in range(3):  # 21 steps: wraps around n
    state, chunk = chunk_fn(device_text, state, steps, 0.0, 0)
    assert chunk.inputs.shape == (steps, batch, ptb.VOCAB_SIZE)
    np.testing.assert_array_equal(chunk.inputs.sum(-1), 1.0)
    np.testing.assert_array_equal(chunk.weights, 1.0)
    assert not chunk.resets.any()
    inputs.append(np.asarray(chunk.inputs.argmax(-1)))
    targets.append(np.asarray(chunk.targets))
  inputs, targets = np.concatenate(inputs), np.concatenate(targets)
  for b, offset in enumerate([0, 5, 10]):
    expected = [text[(offset + t) % n] for t in range(3 * steps)]
    expected_next = [text[(offset + t + 1) % n] for t in range(3 * steps)]
    np.testing.assert_array_equal(inputs[:, b], expected)
    np.testing.assert_array_equal(targets[:, b], expected_next)
  np.testing.assert_array_equal(
    state.position, [(o + 21) % n for o in (0, 5, 10)]
  )


def test_stream_offsets_even_and_official():
  """ "even": b N // B; "official": the official code's linspace(0, N-1, B)
  truncated (first stream at 0, last at N-1); anything else is named."""
  np.testing.assert_array_equal(ptb.stream_offsets(1000, 4), [0, 250, 500, 750])
  np.testing.assert_array_equal(
    ptb.stream_offsets(1000, 4, "official"), [0, 333, 666, 999]
  )
  state = ptb.stream_init(jax.random.PRNGKey(0), 5_101_618, 32, "official")
  assert int(state.position[-1]) == 5_101_617
  assert int(state.position[1]) == 164_568  # int(5_101_617 / 31)
  with pytest.raises(ValueError, match="'even', 'official'.*'random'"):
    ptb.stream_offsets(1000, 4, "random")


def test_resets_every_period_and_with_probability():
  text = jnp.asarray(np.arange(1000) % 50, jnp.uint8)
  state = ptb.stream_init(jax.random.PRNGKey(1), 1000, 4)  # 0,250,500,750
  _, chunk = ptb.stream_chunk(text, state, 300, reset_every=100)
  positions = np.asarray(state.position)[None] + np.arange(300)[:, None]
  np.testing.assert_array_equal(chunk.resets, positions % 100 == 0)
  p = 0.01
  state = ptb.stream_init(jax.random.PRNGKey(2), 1000, 64)
  _, chunk = ptb.stream_chunk(text, state, 1000, reset_probability=p)
  count, total = int(chunk.resets.sum()), chunk.resets.size
  # Binomial(64000, 0.01): mean 640, sd 25.2; allow 5 sd.
  assert abs(count - p * total) < 5 * math.sqrt(total * p * (1 - p))


def python_loop_bpc(cell, params, ids, batch, reset_every=0):
  """Plain loop: stream b predicts targets [b L, (b+1) L), from zero state."""
  ids = [int(i) for i in ids]
  n = len(ids)
  length = -(-n // batch)
  inputs = [ptb.EOL_ID] + ids[:-1]
  total, count = 0.0, 0
  for b in range(batch):
    state = cell.initial_state()
    for i in range(b * length, min((b + 1) * length, n)):
      if reset_every and i % reset_every == 0:
        state = cell.initial_state()
      x = jax.nn.one_hot(inputs[i], ptb.VOCAB_SIZE, dtype=jnp.float64)
      state = cell.step(params["cell"], state, x)
      logits = (
        cell.output(state) @ params["readout"]["w"] + params["readout"]["b"]
      )
      total -= float(jax.nn.log_softmax(logits)[ids[i]]) / math.log(2.0)
      count += 1
  assert count == n
  return total / count


@pytest.mark.parametrize("batch,reset_every", [(1, 0), (3, 0), (4, 5)])
def test_bpc_equals_python_loop(x64, batch, reset_every):
  ids = ptb.encode(HAND_MADE + "a b c\nx y _ z")  # n = 23: padding for 3, 4
  cell = cells.make("rhn", 5)
  cell_key, readout_key = jax.random.split(jax.random.PRNGKey(3))
  params = {
    "cell": cell.init(cell_key, ptb.VOCAB_SIZE),
    "readout": readout.linear().init(
      readout_key, cell.hidden_size, ptb.VOCAB_SIZE
    ),
  }
  streams = ptb_eval.make_eval_streams(ids, batch, reset_every)
  assert float(streams.weights.sum()) == ids.size
  got = ptb_eval.bpc(cell, params, streams)
  want = python_loop_bpc(cell, params, ids, batch, reset_every)
  np.testing.assert_allclose(got, want, rtol=1e-12)


def test_bad_batch():
  with pytest.raises(ValueError, match="batch_size"):
    ptb_eval.make_eval_streams(np.zeros(5, np.uint8), 0)
