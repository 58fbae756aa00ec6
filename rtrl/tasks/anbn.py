"""aⁿbⁿ next-symbol prediction (Gers & Schmidhuber 2001; the online-RTRL
papers' form from sonaradarcn/sketched-rtrl and the UORO demo code):
classification.

Each sequence is `a^n b^n` with n drawn uniformly from `n_min .. n_max`
(per sequence, so lanes drift apart), and the network predicts the next
symbol at every step (softmax cross-entropy over the 3 symbols a, b, T;
loss weight 1 everywhere). Token ids: a = 0, b = 1, T = 2 (the terminal,
sketched-rtrl's separator), S = 3 (the start symbol). Two encodings
(`start_symbol`), each of 2n + 1 steps:

- `start_symbol=False` (sketched-rtrl's `AnbnTask`, the default): inputs
  `a^n b^n T`, targets `a^(n-1) b^n T T` (at the final T the target is T
  again; the next sequence starts at the next step), one-hot over 3 tokens.
- `start_symbol=True` (Gers & Schmidhuber's strings `S a^n b^n T`): inputs
  `S a^n b^n`, targets `a^n b^n T`, one-hot over 4 tokens.

The first a's target (after S) and every target after the first b are
determined by the prefix; after an a the next symbol (a or b) is not. A
step is deterministic iff its input is S, b or T (`deterministic`).

Metric (`metric=`): "sequences_solved" (Gers & Schmidhuber's criterion, the
default): the fraction of sequences whose deterministic steps were all
predicted right (arg-max); a predictor that reads only the current symbol
can solve only n = 1 (after the single b it may predict T), so its score is
`1 / (n_max - n_min + 1)` when `n_min` = 1, else 0 (the metric's
baseline). "accuracy": sketched-rtrl's per-step arg-max accuracy over all
steps.

Peers' settings (see docs/results/task_suite.md): sketched-rtrl: n uniform
on 1 .. 16, no start symbol, loss on every step, per-lane sequences back to
back with a reset at each one's first step; tanh RNN of 64 units, batch 8,
Adam 1e-3, 20,000 online steps (12,000 in its adaptive-rank table); metric:
per-step accuracy. UORO's demo code (the artemis-based `uoro_demo`):
n uniform on 1 .. 32 (`k=1, l=32`), 3 tokens with 0 as a separator, one
long stream. Gers & Schmidhuber 2001 trained on n = 1 .. 10 and tested
generalisation to larger n; their LSTM setting is not reproduced here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.tasks import episodes
from rtrl.tasks import task_metrics

A, B, T, S = 0, 1, 2, 3
NUM_OUTPUTS = 3  # a, b, T
METRICS = ("sequences_solved", "accuracy")


def check_settings(n_min: int, n_max: int) -> None:
  """Raises a ValueError naming a bad `n_min` or `n_max`."""
  validation.positive_int("n_min", n_min)
  validation.positive_int("n_max", n_max)
  if n_max < n_min:
    raise ValueError(f"n_max must be at least n_min ({n_min}), got {n_max!r}")


def input_size(start_symbol: bool) -> int:
  """3 tokens (a, b, T), or 4 with the start symbol S."""
  return 3 + bool(start_symbol)


def encode(n: int, start_symbol: bool = False):
  """The token sequences of one string (NumPy-free lists, for tests and
  display): `(inputs, targets)`, each of length 2n + 1."""
  validation.positive_int("n", n)
  if start_symbol:
    inputs = [S] + [A] * n + [B] * n
    return inputs, [A] * n + [B] * n + [T]
  inputs = [A] * n + [B] * n + [T]
  return inputs, [A] * (n - 1) + [B] * n + [T, T]


def sample(
  key: jax.Array, n_min: int = 1, n_max: int = 16, start_symbol: bool = False
) -> tuple[episodes.Episode, jax.Array]:
  """One sequence, padded to `2 n_max + 1` steps: inputs one-hot `(L,
  input_size)`, integer targets `(L,)`, weights 1."""
  check_settings(n_min, n_max)
  dtype = jnp.asarray(0.0).dtype
  n = jax.random.randint(key, (), n_min, n_max + 1, dtype=jnp.int32)
  steps = jnp.arange(2 * n_max + 1)
  if start_symbol:
    inputs = jnp.where(steps == 0, S, jnp.where(steps <= n, A, B))
    targets = jnp.where(steps < n, A, jnp.where(steps < 2 * n, B, T))
  else:
    inputs = jnp.where(steps < n, A, jnp.where(steps < 2 * n, B, T))
    targets = jnp.where(steps < n - 1, A, jnp.where(steps < 2 * n - 1, B, T))
  episode = episodes.Episode(
    inputs=jax.nn.one_hot(inputs, input_size(start_symbol), dtype=dtype),
    targets=targets.astype(jnp.int32),
    weights=jnp.ones(steps.shape, dtype),
  )
  return episode, 2 * n + 1


def stream_init(
  key: jax.Array,
  batch_size: int,
  n_min: int = 1,
  n_max: int = 16,
  start_symbol: bool = False,
) -> episodes.EpisodeStream:
  """`batch_size` lanes whose first step starts a sequence."""
  settings = (n_min, n_max, start_symbol)
  return episodes.init(key, batch_size, lambda k: sample(k, *settings))


def chunk(
  stream: episodes.EpisodeStream,
  num_steps: int,
  n_min: int = 1,
  n_max: int = 16,
  start_symbol: bool = False,
) -> tuple[episodes.EpisodeStream, StepBatch]:
  """`num_steps` time-major steps of the lanes."""
  settings = (n_min, n_max, start_symbol)
  return episodes.chunk(stream, num_steps, lambda k: sample(k, *settings))


def deterministic(batch: StepBatch) -> jax.Array:
  """`(B,)` bool: the step's target follows from the prefix (its input is
  S, b or T, not a)."""
  return batch.inputs[..., A] < 0.5


def metric(
  name: str = "sequences_solved", n_min: int = 1, n_max: int = 16
) -> task_metrics.Metric:
  """ "sequences_solved" or "accuracy" (see the module docstring)."""
  if name not in METRICS:
    raise ValueError(f"metric must be one of {METRICS}, got {name!r}")
  if name == "accuracy":
    return task_metrics.accuracy(None, "")
  return task_metrics.sequences_solved(
    deterministic,
    1.0 / (n_max - n_min + 1) if n_min == 1 else 0.0,
    "reads the current symbol only (solves n = 1)",
  )


__all__ = [
  "A",
  "B",
  "METRICS",
  "NUM_OUTPUTS",
  "S",
  "T",
  "check_settings",
  "chunk",
  "deterministic",
  "encode",
  "input_size",
  "metric",
  "sample",
  "stream_init",
]
