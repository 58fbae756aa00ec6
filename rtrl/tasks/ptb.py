"""Character-level Penn Treebank (Mikolov et al. 2012 split): symbols and
training streams.

The standard files hold one sentence per line, symbols separated by spaces
and `_` between words (`experiments/data/ptb.py` finds and reads them). The
vocabulary has 50 symbols: the 49 that occur in the training text plus an
end-of-line symbol (`EOL`, id 49). Every line of `text.split("\\n")` becomes its
symbols followed by `EOL`; this is how the standard counts arise (each file
ends with a newline and one space, which yields a last, empty line).

Two layouts of the same text (`LAYOUTS`). "standard": every line of
`text.split("\n")` is its symbols then `EOL` (5,017,483 / 393,043 / 442,424
symbols). "official": what the official OK code trains and evaluates on (its
repository's `ptb.{train,valid,test}.npy`): the characters of the
*word-level* files, space as `_` and newline as `EOL`, which read from the
char-level file is, per non-empty line, `_`, its symbols, `_`, `EOL`
(5,101,618 / 399,782 / 449,945 symbols; the official `ptb.test.npy` equals
this encoding exactly, `ptb.valid.npy` lacks only its final `EOL`). The two
extra symbols per line are nearly free to predict (`_` always follows `EOL`
and ends a word), so BPC on the official layout is about 1.7% lower than on
the standard one for the same model (393,043 / 399,782 = 0.983): the paper's
and the official logs' BPCs are on the official layout. Symbol ids are ours
(`VOCAB`) in both.

Training batches are `B` contiguous streams that start at evenly spaced
offsets of the training text and wrap around at its end; at each step every
stream reads one symbol and predicts the next. They are sliced inside jit
(`stream_chunk`). The state and tangents reset with probability
`reset_probability` per step and example (the paper's 0.01) or, with
`reset_every > 0`, when a stream's position is a multiple of it (the official
code's period 100).

References:
  Benzing et al., "Optimal Kronecker-Sum Approximation of Real Time Recurrent
  Learning", ICML 2019, section 4.1.2.
  Mikolov et al., "Subword language modeling with neural networks", 2012.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.online import StepBatch

SYMBOLS = tuple("#$&'*-./0123456789<>N\\_abcdefghijklmnopqrstuvwxyz")
EOL = "\n"
VOCAB = SYMBOLS + (EOL,)
VOCAB_SIZE = len(VOCAB)  # 50
EOL_ID = VOCAB.index(EOL)  # 49
_SYMBOL_IDS = {s: i for i, s in enumerate(SYMBOLS)}
WORD_SEPARATOR = "_"
LAYOUTS = ("standard", "official")


def check_layout(layout: str) -> str:
  """`layout` if it is one of `LAYOUTS`, else a ValueError naming it."""
  if layout not in LAYOUTS:
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
  return layout


def encode(
  text: str, source: str = "text", layout: str = "standard"
) -> np.ndarray:
  """Symbol ids (uint8) of a text in the char-PTB format.

  Args:
    text: lines of space-separated symbols.
    source: named in errors (e.g. the file's path).
    layout: "standard" (every line: its symbols, then `EOL`) or "official"
      (every line with symbols: `_`, its symbols, `_`, `EOL`); see the
      module docstring.

  Raises:
    ValueError: a symbol outside the 49-symbol vocabulary, naming `source`,
      its line and the symbol; an unknown layout.
  """
  official = check_layout(layout) == "official"
  separator = _SYMBOL_IDS[WORD_SEPARATOR]
  ids = []
  for line_number, line in enumerate(text.split("\n"), start=1):
    symbols = line.split()
    if official and not symbols:
      continue
    try:
      line_ids = [_SYMBOL_IDS[s] for s in symbols]
    except KeyError:
      bad = next(s for s in symbols if s not in _SYMBOL_IDS)
      raise ValueError(
        f"{source}, line {line_number}: symbol {bad!r} is not in the "
        f"char-PTB vocabulary {''.join(SYMBOLS)!r} (symbols are single "
        "characters separated by spaces)"
      ) from None
    if official:
      line_ids = [separator] + line_ids + [separator]
    ids.extend(line_ids + [EOL_ID])
  return np.asarray(ids, np.uint8)


def decode(ids) -> str:
  """Inverse of `encode` up to spacing: lines of space-separated symbols.

  `encode(decode(ids)) == ids` for any ids whose last symbol is `EOL`."""
  symbols = [VOCAB[int(i)] for i in np.asarray(ids).reshape(-1)]
  if symbols and symbols[-1] == EOL:
    symbols = symbols[:-1]
  lines = " ".join(symbols).split(EOL)
  return "\n".join(line.strip() for line in lines)


class StreamState(NamedTuple):
  """Where each of the B training streams is.

  Attributes:
    position: (B,) int32, index in the text of each stream's next input.
    key: PRNG key for the random resets.
  """

  position: jax.Array
  key: jax.Array


STREAM_OFFSETS = ("even", "official")


def stream_offsets(
  num_symbols: int, batch_size: int, rule: str = "even"
) -> np.ndarray:
  """`(B,)` start positions of the training streams.

  "even": `b * N // B`, every stream the same distance apart (the text
  wraps). "official": the official OK code's `linspace(0, N - 1, B)`
  truncated to integers, whose first and last stream start at the two ends
  of the text. Which text each stream reads when matters to the training
  loss's moving average (some passages are harder): "official" makes ours
  read the official runs' text at every step.
  """
  if batch_size < 1 or num_symbols < 2:
    raise ValueError(
      f"need batch_size >= 1 and a text of >= 2 symbols, got "
      f"batch_size={batch_size}, num_symbols={num_symbols}"
    )
  if rule == "even":
    return (np.arange(batch_size, dtype=np.int64) * num_symbols) // batch_size
  if rule == "official":
    return np.linspace(0, num_symbols - 1, batch_size).astype(np.int64)
  raise ValueError(
    f"stream offsets must be one of {STREAM_OFFSETS}, got {rule!r}"
  )


def stream_init(
  key: jax.Array, num_symbols: int, batch_size: int, offsets: str = "even"
) -> StreamState:
  """Streams at `stream_offsets(num_symbols, batch_size, offsets)`."""
  start = stream_offsets(num_symbols, batch_size, offsets)
  return StreamState(position=jnp.asarray(start, jnp.int32), key=key)


def stream_chunk(
  text: jax.Array,
  state: StreamState,
  num_steps: int,
  reset_probability: float = 0.0,
  reset_every: int = 0,
  dtype=None,
) -> tuple[StreamState, StepBatch]:
  """The next `num_steps` steps of every stream (jittable; `num_steps`,
  `reset_every` static).

  Args:
    text: (N,) integer symbol ids (the whole training split, on device).
    state: the streams' positions and reset key.
    num_steps: chunk length T.
    reset_probability: per step and example (ignored if `reset_every > 0`).
    reset_every: > 0: reset where a stream's position is a multiple of it.
    dtype: float dtype of the one-hot inputs (default: JAX's default float).

  Returns:
    `(state, StepBatch)` with time-major `(T, B, ...)` leaves: inputs one-hot
    `text[i]`, targets `text[i + 1]` (indices modulo N), weights 1.
  """
  num_symbols = text.shape[0]
  dtype = dtype or jnp.asarray(0.0).dtype
  index = (
    state.position[None, :] + jnp.arange(num_steps)[:, None]
  ) % num_symbols
  inputs = text[index].astype(jnp.int32)
  targets = text[(index + 1) % num_symbols].astype(jnp.int32)
  key, reset_key = jax.random.split(state.key)
  if reset_every > 0:
    resets = index % reset_every == 0
  else:
    resets = jax.random.bernoulli(reset_key, reset_probability, index.shape)
  batch = StepBatch(
    inputs=jax.nn.one_hot(inputs, VOCAB_SIZE, dtype=dtype),
    targets=targets,
    weights=jnp.ones(index.shape, dtype),
    resets=resets,
  )
  position = ((state.position + num_steps) % num_symbols).astype(jnp.int32)
  return StreamState(position=position, key=key), batch
