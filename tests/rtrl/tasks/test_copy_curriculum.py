"""Copy-task curriculum protocols: the official rule (moving average of the
all-position loss, checked at every sequence start, T += 1 and reset to 0.3
below 0.15) against a plain Python reimplementation on hand-built loss
sequences; lengths uniform on max(1, T-4)..T (official) and max(1, T-5)..T
(output_only) by exact support and chi-square; loss weights per protocol; the
output_only chunk rule."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rtrl.tasks import copy_task
from rtrl.tasks.copy_task import BLANK
from rtrl.tasks.copy_task import CopyStepMetrics
from rtrl.tasks.copy_task import CurriculumState

CHI2_P = 1e-4  # false-failure probability of each chi-square bound
# One shape (steps, batch, max_length) for the float32 runs below, so that
# each protocol compiles once.
STEPS, BATCH, MAX_LENGTH = 2000, 8, 20


class Recorded(NamedTuple):
  """What the train step saw, leaves (num_steps, B)."""

  tokens: np.ndarray
  targets: np.ndarray
  weights: np.ndarray
  output_weights: np.ndarray
  resets: np.ndarray


def fake_train_step(losses_bits):
  """A `train_step` whose step t reports batch-mean loss `losses_bits[t]`
  (bits) under the protocol's weights, and output-phase sums of the same
  per-example loss; its state is the step counter t."""

  def train_step(t, batch, output_weights):
    ce = losses_bits[t] * copy_task.LOG2  # nats, every example alike
    metrics = CopyStepMetrics(
      loss_sum=ce * batch.weights.sum(),
      weight_sum=batch.weights.sum(),
      output_loss_sum=ce * output_weights.sum(),
      output_weight_sum=output_weights.sum(),
    )
    return t + 1, metrics

  return train_step


@functools.partial(jax.jit, static_argnames=("curriculum", "rule"))
def _run_chunk(losses_bits, stream, state, curriculum, rule):
  return copy_task.run_chunk(
    fake_train_step(losses_bits),
    jnp.zeros((), jnp.int32),
    stream,
    state,
    losses_bits.shape[0],
    curriculum,
    **dict(rule),
  )


def run(
  losses_bits, curriculum, batch_size, max_length, state=None, seed=0, **rule
):
  """`run_chunk` over `len(losses_bits)` steps with the fake train step.

  Returns `(final curriculum, metrics, trace, Recorded)`."""
  stream = copy_task.stream_init(
    jax.random.PRNGKey(seed), batch_size, max_length
  )
  state = state or copy_task.curriculum_init()
  dtype = jnp.asarray(0.0).dtype
  state = CurriculumState(
    jnp.asarray(state.length, jnp.int32), jnp.asarray(state.error_ema, dtype)
  )
  (steps, _, final), out = _run_chunk(
    jnp.asarray(losses_bits, dtype),
    stream,
    state,
    curriculum,
    tuple(sorted(rule.items())),
  )
  assert int(steps) == len(losses_bits)
  out = jax.device_get(out)
  recorded = Recorded(
    out.batches.inputs.argmax(-1),
    out.batches.targets,
    out.batches.weights,
    out.output_weights,
    out.batches.resets,
  )
  return final, out.metrics, out.curriculum, recorded


def sequence_lengths(recorded):
  """Per example, the list of `(start_step, L, complete)` of its sequences
  (the last one possibly partial: L then counts the bits shown so far)."""
  tokens = np.asarray(recorded.tokens)
  resets = np.asarray(recorded.resets)
  out = []
  for b in range(tokens.shape[1]):
    starts = list(np.flatnonzero(resets[:, b])) + [tokens.shape[0]]
    seqs = []
    for lo, hi in zip(starts[:-1], starts[1:]):
      seg = tokens[lo:hi, b]
      if hi < tokens.shape[0]:
        assert len(seg) % 2 == 0
        seqs.append((lo, (len(seg) - 2) // 2, True))
      else:
        seqs.append((lo, int(np.sum(seg[1:] != BLANK)), False))
    out.append(seqs)
  return out


def python_official(
  losses_bits,
  seqs,
  batch_size,
  max_length,
  decay=0.999,
  reset_bits=0.3,
  threshold=0.15,
  initial=1.0,
):
  """The official loop, written plainly: each step, each example in index
  order whose sequence has ended checks `ema < threshold` (T += 1, ema =
  reset) and then starts its next sequence (length taken from `seqs`); after
  the training step, ema = decay * ema + (1 - decay) * loss."""
  T, ema = 1, initial
  position = [None] * batch_size
  length = [0] * batch_size
  nxt = [0] * batch_size
  starts, seen, lengths, emas = [], [], [], []
  for t, loss in enumerate(losses_bits):
    for b in range(batch_size):
      if position[b] is None or position[b] == 2 * length[b] + 2:
        if ema < threshold:
          T = min(T + 1, max_length)
          ema = reset_bits
        start, length[b], _ = seqs[b][nxt[b]]
        assert start == t, f"example {b}: sequence expected at step {t}"
        nxt[b] += 1
        position[b] = 0
        starts.append((t, b))
        seen.append((T, length[b]))
      position[b] += 1
    ema = decay * ema + (1 - decay) * loss
    lengths.append(T)
    emas.append(ema)
  return starts, seen, np.array(lengths), np.array(emas)


@pytest.mark.parametrize(
  "rule,steps",
  [
    ({}, 5000),  # the official constants
    ({"decay": 0.9, "reset_bits": 0.1}, 400),  # fast, and a reset below
  ],
)  # the threshold
def test_official_rule_matches_python_loop(x64, rule, steps):
  """Hand-built per-step losses (uniform 0..0.12 bits, with a burst of 2
  bits): T, the moving average after every step, the steps where sequences
  start, and the T each example draws from equal the plain loop; every
  drawn length lies in max(1, T-4)..T for the T just after its own check."""
  rng = np.random.default_rng(1)
  losses = rng.uniform(0.0, 0.12, size=steps)
  losses[steps // 3 : steps // 3 + 20] = 2.0
  batch_size, max_length = 4, 40
  final, _, trace, recorded = run(
    losses, "official", batch_size, max_length, **rule
  )
  seqs = sequence_lengths(recorded)
  starts, seen, lengths, emas = python_official(
    losses, seqs, batch_size, max_length, **{k: v for k, v in rule.items()}
  )
  resets = np.asarray(recorded.resets)
  assert sorted(starts) == sorted(zip(*np.nonzero(resets)))
  np.testing.assert_array_equal(np.asarray(trace.length), lengths)
  np.testing.assert_allclose(np.asarray(trace.error_ema), emas, rtol=1e-12)
  assert int(final.length) == lengths[-1] >= 4  # T did grow
  if rule.get("reset_bits", 0.3) < 0.15:
    assert np.max(np.diff(lengths)) >= 2  # several increases in one step
  for (t, b), (T, L) in zip(starts, seen):
    complete = [c for s, _, c in seqs[b] if s == t][0]
    if complete:
      assert max(1, T - 4) <= L <= T, (t, b, T, L)


def test_check_at_starts_explicit_cases():
  """Below the threshold, the first starting example raises T and resets the
  average; later starters see the raised T and do not fire again (0.3 >
  0.15); no start or an average at the threshold changes nothing; with a
  reset below the threshold every starter fires in turn."""
  state = CurriculumState(jnp.asarray(5, jnp.int32), jnp.asarray(0.1))
  starts = jnp.asarray([False, True, False, True])
  new, seen = copy_task.check_at_starts(state, starts, 100)
  assert int(new.length) == 6 and float(new.error_ema) == pytest.approx(0.3)
  np.testing.assert_array_equal(seen[jnp.asarray(starts)], [6, 6])

  new, _ = copy_task.check_at_starts(state, jnp.zeros(4, bool), 100)
  assert int(new.length) == 5 and float(new.error_ema) == pytest.approx(0.1)
  at = state._replace(error_ema=jnp.asarray(0.15))
  new, _ = copy_task.check_at_starts(at, starts, 100)
  assert int(new.length) == 5  # strictly below only

  new, seen = copy_task.check_at_starts(state, starts, 100, reset_bits=0.1)
  assert int(new.length) == 7
  np.testing.assert_array_equal(seen[jnp.asarray(starts)], [6, 7])
  new, _ = copy_task.check_at_starts(state, starts, 5)
  assert int(new.length) == 5  # capped at max_length


def chi_square_uniform(values, support):
  counts = np.array([np.sum(values == v) for v in support])
  expected = len(values) / len(support)
  return np.sum((counts - expected) ** 2 / expected), len(support) - 1


@pytest.mark.parametrize("curriculum", ["official", "output_only"])
@pytest.mark.parametrize("T", [1, 3, 5, 12])
def test_sample_length_uniform(curriculum, T):
  """20000 draws: support exactly max(1, T-w)..T (w = 4 official, 5
  output_only) and frequencies within the chi-square bound."""
  window = copy_task.LENGTH_WINDOWS[curriculum]
  keys = jax.random.split(jax.random.PRNGKey(T), 20000)
  values = np.asarray(
    jax.vmap(lambda k: copy_task.sample_length(k, T, window))(keys)
  )
  support = list(range(max(1, T - window), T + 1))
  assert sorted(set(values.tolist())) == support
  if len(support) > 1:
    stat, df = chi_square_uniform(values, support)
    assert stat < stats.chi2.isf(CHI2_P, df), (stat, df)


@pytest.mark.parametrize("T", [1, 2, 3, 5, 12])
def test_sample_length_clipped_is_the_official_draw(T):
  """ "clipped": max(1, T - k), k uniform on 0..4 (the official script): at
  T = 2 length 1 has probability 4/5; 20000 draws pass the chi-square
  bound against those exact probabilities."""
  keys = jax.random.split(jax.random.PRNGKey(T), 20000)
  values = np.asarray(
    jax.vmap(lambda k: copy_task.sample_length(k, T, 4, "clipped"))(keys)
  )
  probabilities = {}
  for k in range(5):
    length = max(1, T - k)
    probabilities[length] = probabilities.get(length, 0) + 0.2
  support = sorted(probabilities)
  assert sorted(set(values.tolist())) == support
  if len(support) > 1:
    counts = np.array([(values == v).sum() for v in support])
    expected = np.array([probabilities[v] for v in support]) * values.size
    stat = np.sum((counts - expected) ** 2 / expected)
    assert stat < stats.chi2.isf(CHI2_P, len(support) - 1), stat


def test_unknown_length_rule_is_named():
  with pytest.raises(ValueError, match="length_rule.*'uniform', 'clipped'"):
    copy_task.stream_step(
      copy_task.stream_init(jax.random.PRNGKey(0), 2, 4),
      copy_task.curriculum_init(),
      "official",
      length_rule="official",
    )


@pytest.mark.parametrize("curriculum", ["official", "output_only"])
def test_stream_lengths_uniform(curriculum):
  """Through the stream at T = 9 held fixed (losses of 1 bit: the official
  average never drops below 0.15): complete sequences' lengths have exact
  support 9-w..9 and pass the chi-square bound."""
  state = CurriculumState(jnp.asarray(9, jnp.int32), jnp.asarray(1.0))
  final, _, trace, recorded = run(
    np.ones(STEPS), curriculum, BATCH, MAX_LENGTH, state=state
  )
  assert int(final.length) == 9 and np.all(np.asarray(trace.length) == 9)
  values = np.array(
    [
      L
      for seqs in sequence_lengths(recorded)
      for _, L, complete in seqs
      if complete
    ]
  )
  assert len(values) > 800
  support = list(range(9 - copy_task.LENGTH_WINDOWS[curriculum], 10))
  assert sorted(set(values.tolist())) == support
  stat, df = chi_square_uniform(values, support)
  assert stat < stats.chi2.isf(CHI2_P, df), (stat, df)


@pytest.mark.parametrize("curriculum", ["official", "output_only"])
def test_loss_weights_per_protocol(curriculum):
  """Official: weight 1 at every position; output_only: the weights are the
  output-phase mask. The output-phase mask is the same under both and is 1
  exactly on the marker and bits of the target (encode's output phase)."""
  state = CurriculumState(jnp.asarray(6, jnp.int32), jnp.asarray(1.0))
  _, _, _, recorded = run(
    np.ones(STEPS), curriculum, BATCH, MAX_LENGTH, state=state
  )
  weights = np.asarray(recorded.weights)
  out_w = np.asarray(recorded.output_weights)
  if curriculum == "official":
    np.testing.assert_array_equal(weights, 1.0)
  else:
    np.testing.assert_array_equal(weights, out_w)
  assert 0 < out_w.mean() < 1
  tokens, targets = recorded.tokens, recorded.targets
  for b in range(BATCH):
    for start, L, complete in sequence_lengths(recorded)[b]:
      if not complete:
        continue
      seg = slice(start, start + 2 * L + 2)
      inp, tgt, w = copy_task.encode(tokens[seg, b][1 : L + 1], curriculum)
      np.testing.assert_array_equal(targets[seg, b], tgt)
      np.testing.assert_array_equal(weights[seg, b], w)
      np.testing.assert_array_equal(
        out_w[seg, b], [0] * (L + 1) + [1] * (L + 1)
      )


@pytest.mark.parametrize("loss_bits,grows", [(0.149, True), (0.15, False)])
def test_output_only_checks_once_per_chunk(loss_bits, grows):
  """output_only: T is constant within the chunk and grows by one at its end
  iff the chunk's output-phase error is below 0.15; the moving average is
  untouched."""
  state = CurriculumState(jnp.asarray(3, jnp.int32), jnp.asarray(1.0))
  final, metrics, trace, _ = run(
    np.full(STEPS, loss_bits), "output_only", BATCH, MAX_LENGTH, state=state
  )
  assert np.all(np.asarray(trace.length) == 3)
  assert int(final.length) == 3 + grows
  assert float(final.error_ema) == 1.0
  error = float(
    metrics.output_loss_sum.sum()
    / metrics.output_weight_sum.sum()
    / copy_task.LOG2
  )
  assert error == pytest.approx(loss_bits, rel=1e-5)


def test_unknown_curriculum_is_rejected():
  """A misspelt protocol is a ValueError naming `curriculum`."""
  stream = copy_task.stream_init(jax.random.PRNGKey(0), 2, 4)
  with pytest.raises(ValueError, match="curriculum"):
    copy_task.stream_step(stream, copy_task.curriculum_init(), "offical")
  with pytest.raises(ValueError, match="curriculum"):
    copy_task.encode([0, 1], curriculum="all")
