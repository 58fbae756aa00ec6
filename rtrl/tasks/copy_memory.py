"""Delayed recall of symbols: the copy-memory task (Hochreiter & Schmidhuber
1997; Arjovsky et al. 2016) in two protocols: classification.

`num_recall` = k symbols drawn uniformly from `num_symbols` are shown one a
step, then `delay` steps pass, then the network must output the k symbols in
order. Inputs are one-hot over `num_symbols + 2` tokens: the symbols, a
blank (`num_symbols`) and a cue (`num_symbols + 1`). An episode has
`2k + delay` steps and lanes run episodes back to back, every lane resetting
at the same steps (`rtrl.tasks.episodes`).

- `protocol="recall"` (sonaradarcn/sketched-rtrl's `CopyTask`, the default):
  k symbol steps, `delay` blank steps, then k steps showing the cue while
  the network names the symbols; loss (softmax cross-entropy over
  `num_symbols` logits) on those k recall steps only.
- `protocol="arjovsky"` (Arjovsky et al. 2016's copying memory problem with
  T = `delay`): k symbols, T - 1 blanks, the cue (their delimiter), k
  blanks; the target is the blank for the first T + k steps and the k
  symbols after, over `num_symbols + 1` logits (the blank the last), the
  loss on every step. Its baseline, blanks then a uniform guess, has a
  cross-entropy of `k log(num_symbols) / (T + 2k)` nats a step
  (`arjovsky_baseline`).

Metric: the fraction of recalled symbols right (arg-max over the recall
steps only, `task_metrics.accuracy`); chance is `1 / num_symbols`.

Peers' settings (see docs/results/task_suite.md):

- sketched-rtrl: `num_symbols` = 8, k = 5, delay 40 (50-step episodes),
  the recall protocol, all lanes reset at each episode start; a tanh RNN of
  64 units, batch 8, Adam 1e-3, 20,000 online steps; its metric is the
  per-step accuracy on the recall steps.
- Arjovsky et al. 2016: 8 data symbols, k = 10, T in {100, 200, 300, 500}
  (`protocol="arjovsky", num_recall=10, delay=100`); loss and baseline as
  above (their figures plot that cross-entropy).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.tasks import episodes
from rtrl.tasks import task_metrics

PROTOCOLS = ("recall", "arjovsky")


def check_settings(
  num_symbols: int, num_recall: int, delay: int, protocol: str
) -> None:
  """Raises a ValueError naming the first bad setting."""
  validation.positive_int("num_symbols", num_symbols)
  validation.positive_int("num_recall", num_recall)
  validation.positive_int("delay", delay)
  if protocol not in PROTOCOLS:
    raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


def sizes(num_symbols: int, protocol: str) -> tuple[int, int]:
  """`(input_size, output_size)`: symbols, blank and cue in; the symbols
  (recall) or the symbols and the blank (arjovsky) out."""
  return num_symbols + 2, num_symbols + (protocol == "arjovsky")


def sample(
  key: jax.Array,
  num_symbols: int = 8,
  num_recall: int = 5,
  delay: int = 40,
  protocol: str = "recall",
) -> tuple[episodes.Episode, jax.Array]:
  """One episode of `2 * num_recall + delay` steps: inputs `(L,
  num_symbols + 2)` one-hot, integer targets `(L,)`, weights `(L,)`."""
  check_settings(num_symbols, num_recall, delay, protocol)
  dtype = jnp.asarray(0.0).dtype
  blank, cue = num_symbols, num_symbols + 1
  k, length = num_recall, 2 * num_recall + delay
  symbols = jax.random.randint(key, (k,), 0, num_symbols, dtype=jnp.int32)
  steps = jnp.arange(length)
  shown = symbols[jnp.clip(steps, 0, k - 1)]
  recalled = symbols[jnp.clip(steps - k - delay, 0, k - 1)]
  recall_phase = steps >= k + delay
  if protocol == "recall":
    tokens = jnp.where(steps < k, shown, jnp.where(recall_phase, cue, blank))
    targets = jnp.where(recall_phase, recalled, 0)
    weights = recall_phase.astype(dtype)
  else:
    tokens = jnp.where(
      steps < k, shown, jnp.where(steps == k + delay - 1, cue, blank)
    )
    targets = jnp.where(recall_phase, recalled, blank)
    weights = jnp.ones((length,), dtype)
  episode = episodes.Episode(
    inputs=jax.nn.one_hot(tokens, num_symbols + 2, dtype=dtype),
    targets=targets.astype(jnp.int32),
    weights=weights,
  )
  return episode, jnp.asarray(length, jnp.int32)


def stream_init(
  key: jax.Array,
  batch_size: int,
  num_symbols: int = 8,
  num_recall: int = 5,
  delay: int = 40,
  protocol: str = "recall",
) -> episodes.EpisodeStream:
  """`batch_size` lanes whose first step starts an episode."""
  settings = (num_symbols, num_recall, delay, protocol)
  return episodes.init(key, batch_size, lambda k: sample(k, *settings))


def chunk(
  stream: episodes.EpisodeStream,
  num_steps: int,
  num_symbols: int = 8,
  num_recall: int = 5,
  delay: int = 40,
  protocol: str = "recall",
) -> tuple[episodes.EpisodeStream, StepBatch]:
  """`num_steps` time-major steps of the lanes."""
  settings = (num_symbols, num_recall, delay, protocol)
  return episodes.chunk(stream, num_steps, lambda k: sample(k, *settings))


def arjovsky_baseline(num_symbols: int, num_recall: int, delay: int) -> float:
  """Cross-entropy (nats a step) of predicting blanks, then a uniform
  symbol, under `protocol="arjovsky"`."""
  return num_recall * math.log(num_symbols) / (delay + 2 * num_recall)


def metric(num_symbols: int = 8) -> task_metrics.Metric:
  """Accuracy over the recall steps (weighted steps whose target is a
  symbol, not the blank), beside chance `1 / num_symbols`."""
  return task_metrics.accuracy(
    1.0 / num_symbols,
    "chance (a uniform guess)",
    counted=lambda batch: batch.targets < num_symbols,
  )


__all__ = [
  "PROTOCOLS",
  "arjovsky_baseline",
  "check_settings",
  "chunk",
  "metric",
  "sample",
  "sizes",
  "stream_init",
]
