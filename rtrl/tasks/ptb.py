"""Character-level Penn Treebank (Mikolov et al. 2012 split): files and streams.

The standard files `ptb.char.{train,valid,test}.txt` hold one sentence per
line, symbols separated by spaces and `_` between words. The vocabulary has
50 symbols: the 49 that occur in the training text plus an end-of-line symbol
(`EOL`, id 49). Every line of `text.split("\\n")` becomes its symbols followed
by `EOL`; this is how the standard counts 5,017,483 / 393,043 / 442,424 arise
(each file ends with a newline and one space, which yields a last, empty line).

Files are found in `data_dir`, else `$DATA_DIR/ptb`, else the download cache
(`$RTRL_CACHE_DIR/ptb`, default `~/.cache/rtrl/ptb`), else the canonical
archive (Mikolov's `simple-examples.tgz`) is downloaded into the cache. Every
file is checked against the canonical md5 unless `verify_md5=False`.

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

import functools
import hashlib
import io
import os
import pathlib
import shutil
import tarfile
import tempfile
from typing import NamedTuple
import urllib.request

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.online import StepBatch

SYMBOLS = tuple("#$&'*-./0123456789<>N\\_abcdefghijklmnopqrstuvwxyz")
EOL = "\n"
VOCAB = SYMBOLS + (EOL,)
VOCAB_SIZE = len(VOCAB)   # 50
EOL_ID = VOCAB.index(EOL)  # 49
SPLITS = ("train", "valid", "test")
FILE_NAMES = {split: f"ptb.char.{split}.txt" for split in SPLITS}
NUM_SYMBOLS = {"train": 5_017_483, "valid": 393_043, "test": 442_424}
MD5 = {"train": "874909f99060142f6b88cc74c34baaa2",
       "valid": "9e0fe5bec2a8bf43fd686dc23d5ab8bb",
       "test": "1f9a2d1afe00f76e8bfbe09a65439681"}
ARCHIVE_URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
ARCHIVE_DIR = "simple-examples/data"  # where the archive keeps the files

_SYMBOL_IDS = {s: i for i, s in enumerate(SYMBOLS)}


# -- encoding -----------------------------------------------------------------


def encode(text: str, source: str = "text") -> np.ndarray:
  """Symbol ids (uint8) of a text in the char-PTB format.

  Args:
    text: lines of space-separated symbols.
    source: named in errors (e.g. the file's path).

  Raises:
    ValueError: a symbol outside the 49-symbol vocabulary, naming `source`,
      its line and the symbol.
  """
  ids = []
  for line_number, line in enumerate(text.split("\n"), start=1):
    try:
      ids.extend([_SYMBOL_IDS[s] for s in line.split()])
    except KeyError:
      bad = next(s for s in line.split() if s not in _SYMBOL_IDS)
      raise ValueError(
          f"{source}, line {line_number}: symbol {bad!r} is not in the "
          f"char-PTB vocabulary {''.join(SYMBOLS)!r} (symbols are single "
          "characters separated by spaces)") from None
    ids.append(EOL_ID)
  return np.asarray(ids, np.uint8)


def decode(ids) -> str:
  """Inverse of `encode` up to spacing: lines of space-separated symbols.

  `encode(decode(ids)) == ids` for any ids whose last symbol is `EOL`."""
  symbols = [VOCAB[int(i)] for i in np.asarray(ids).reshape(-1)]
  if symbols and symbols[-1] == EOL:
    symbols = symbols[:-1]
  lines = " ".join(symbols).split(EOL)
  return "\n".join(line.strip() for line in lines)


def md5sum(path) -> str:
  digest = hashlib.md5()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def read_file(path, split: str | None = None, verify_md5: bool = False
              ) -> np.ndarray:
  """Encodes one file; with `verify_md5` (needs `split`) checks it first.

  Raises:
    FileNotFoundError: no such file.
    ValueError: md5 mismatch, or a symbol outside the vocabulary.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"char-PTB file {path} not found")
  if verify_md5:
    actual = md5sum(path)
    if actual != MD5[split]:
      raise ValueError(
          f"{path} has md5 {actual}, but the canonical {FILE_NAMES[split]} "
          f"has {MD5[split]}: the file is corrupt or not the standard one. "
          "Replace it (or delete it to re-download), or pass "
          "verify_md5=False (config.verify_md5=False) to use it anyway.")
  with open(path, encoding="utf-8") as f:
    return encode(f.read(), source=str(path))


# -- finding and downloading the files ----------------------------------------


def cache_dir() -> pathlib.Path:
  root = os.environ.get("RTRL_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "rtrl")
  return pathlib.Path(root) / "ptb"


def _has_files(folder) -> bool:
  return all((pathlib.Path(folder) / name).is_file()
             for name in FILE_NAMES.values())


def download(target_dir, url: str = ARCHIVE_URL) -> pathlib.Path:
  """Fetches the canonical archive and extracts the three char-PTB files into
  `target_dir`, after checking each one's md5 (nothing is written otherwise).

  Raises:
    OSError: the download failed.
    ValueError: a file is missing from the archive or has the wrong md5.
  """
  target_dir = pathlib.Path(target_dir)
  with urllib.request.urlopen(url, timeout=60) as response:
    archive = response.read()
  with tempfile.TemporaryDirectory() as tmp:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
      members = {m.name.lstrip("./"): m for m in tar.getmembers()}
      for split, name in FILE_NAMES.items():
        member = members.get(f"{ARCHIVE_DIR}/{name}")
        if member is None:
          raise ValueError(f"{url} holds no {ARCHIVE_DIR}/{name}")
        extracted = tar.extractfile(member)
        path = pathlib.Path(tmp) / name
        path.write_bytes(extracted.read())
        if md5sum(path) != MD5[split]:
          raise ValueError(f"{name} from {url} has md5 {md5sum(path)}, "
                           f"expected {MD5[split]}")
    target_dir.mkdir(parents=True, exist_ok=True)
    for name in FILE_NAMES.values():
      shutil.move(os.path.join(tmp, name), target_dir / name)
  return target_dir


def _missing_message(where: str) -> str:
  names = ", ".join(FILE_NAMES.values())
  return (f"char-PTB files not found {where}. Put {names} (Mikolov's split, "
          f"from {ARCHIVE_URL}, folder {ARCHIVE_DIR}) in a folder and pass "
          "it as config.data_dir (or data_dir=), or set $DATA_DIR so that "
          "they are in $DATA_DIR/ptb.")


def find_data_dir(data_dir: str | None = None, allow_download: bool = True
                  ) -> pathlib.Path:
  """The folder holding the three files (see the module docstring).

  Raises:
    FileNotFoundError: naming the files and where to put them.
  """
  if data_dir:
    folder = pathlib.Path(data_dir)
    if not _has_files(folder):
      missing = [n for n in FILE_NAMES.values()
                 if not (folder / n).is_file()]
      raise FileNotFoundError(_missing_message(f"in data_dir={folder} "
                                               f"(missing: {missing})"))
    return folder
  candidates = []
  if os.environ.get("DATA_DIR"):
    candidates.append(pathlib.Path(os.environ["DATA_DIR"]) / "ptb")
  candidates.append(cache_dir())
  for folder in candidates:
    if _has_files(folder):
      return folder
  where = " or ".join(str(c) for c in candidates)
  if not allow_download:
    raise FileNotFoundError(_missing_message(f"in {where}"))
  try:
    print(f"Downloading char-PTB from {ARCHIVE_URL} into {cache_dir()} ...")
    return download(cache_dir())
  except OSError as e:
    raise FileNotFoundError(_missing_message(
        f"in {where}, and the download failed ({e})")) from e


@functools.lru_cache(maxsize=8)
def _load_split_cached(folder: str, split: str, verify_md5: bool,
                       mtime: float) -> np.ndarray:
  del mtime  # part of the cache key only
  ids = read_file(pathlib.Path(folder) / FILE_NAMES[split], split, verify_md5)
  ids.setflags(write=False)
  return ids


def load_split(split: str, data_dir: str | None = None,
               verify_md5: bool = True) -> np.ndarray:
  """`(num_symbols,)` uint8 ids of one split ('train', 'valid' or 'test').

  Cached per file (and its modification time)."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  folder = find_data_dir(data_dir)
  path = folder / FILE_NAMES[split]
  return _load_split_cached(str(folder), split, bool(verify_md5),
                            path.stat().st_mtime)


# -- training streams (inside jit) --------------------------------------------


class StreamState(NamedTuple):
  """Where each of the B training streams is.

  Attributes:
    position: (B,) int32, index in the text of each stream's next input.
    key: PRNG key for the random resets.
  """
  position: jax.Array
  key: jax.Array


def stream_init(key: jax.Array, num_symbols: int, batch_size: int
                ) -> StreamState:
  """Streams at the evenly spaced offsets `b * num_symbols // batch_size`."""
  if batch_size < 1 or num_symbols < 2:
    raise ValueError(f"need batch_size >= 1 and a text of >= 2 symbols, got "
                     f"batch_size={batch_size}, num_symbols={num_symbols}")
  offsets = (np.arange(batch_size, dtype=np.int64) * num_symbols) // batch_size
  return StreamState(position=jnp.asarray(offsets, jnp.int32), key=key)


def stream_chunk(text: jax.Array, state: StreamState, num_steps: int,
                 reset_probability: float = 0.0, reset_every: int = 0,
                 dtype=None) -> tuple[StreamState, StepBatch]:
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
  index = (state.position[None, :] + jnp.arange(num_steps)[:, None]) \
      % num_symbols
  inputs = text[index].astype(jnp.int32)
  targets = text[(index + 1) % num_symbols].astype(jnp.int32)
  key, reset_key = jax.random.split(state.key)
  if reset_every > 0:
    resets = index % reset_every == 0
  else:
    resets = jax.random.bernoulli(reset_key, reset_probability, index.shape)
  batch = StepBatch(inputs=jax.nn.one_hot(inputs, VOCAB_SIZE, dtype=dtype),
                    targets=targets, weights=jnp.ones(index.shape, dtype),
                    resets=resets)
  position = ((state.position + num_steps) % num_symbols).astype(jnp.int32)
  return StreamState(position=position, key=key), batch
