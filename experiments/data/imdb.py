"""IMDB movie reviews (Maas et al. 2011) as padded token-id sequences.

The source is found as for every dataset (see `files`): `data_dir`, else
`$DATA_DIR/imdb`, else the cache (`cache_dir`, default
`files.cache_dir("imdb")`), where the canonical `aclImdb_v1.tar.gz` is
downloaded (md5 checked). A data folder may hold the extracted `aclImdb/`
folder (or be it), or a `.tar.gz` of it (`aclImdb_v1.tar.gz`, or
`aclImdb_labeled.tar.gz` as in `../shared/data/imdb`). Only
`{train,test}/{pos,neg}/*.txt` are read (label 1 = pos); `train/unsup` is
ignored.

Tokenizer (`tokenize`, documented because results depend on it): lower-case;
HTML line breaks `<br />` become spaces; a token is a maximal run of letters
and digits, with apostrophes inside a word kept (`don't`, `director's`);
everything else (punctuation, quotes, dashes) separates tokens and is dropped.
So `tokenize(" ".join(tokenize(text))) == tokenize(text)`.

Vocabulary (`build_vocabulary`), from the TRAINING reviews only: id 0 is
padding, id 1 is out-of-vocabulary, ids 2.. are the `vocab_size - 2` most
frequent training tokens (ties broken alphabetically). Words seen only in the
test set are always out-of-vocabulary.

Sequences (`encode`): each review's ids, truncated to `max_length` tokens and
padded with 0 to exactly `max_length`. `truncate='pre'` (default) drops the
beginning and keeps the last tokens; `pad='pre'` (default) puts the padding
first, so that a model reading the final hidden state sees the review's end
last. `'post'` does the opposite.

Cache: the tokenised corpus (every review as ids into the full train-frequency
ranking of words, independent of `vocab_size` and `max_length`) is kept as
`imdb_tokens_v1_<key>.npz` in the same cache folder, keyed by the source's
path, size and modification time, so a second run (any vocabulary size or
length) starts in about a second.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
import hashlib
import os
import pathlib
import re
import tarfile

from absl import logging
import numpy as np

from experiments.data import files

URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
MD5 = "7c2ac02c03563afcf9b574c7e56c153a"
ARCHIVE_NAMES = (
  "aclImdb_v1.tar.gz",
  "aclImdb_labeled.tar.gz",
  "aclImdb.tar.gz",
)
SPLITS = ("train", "test")
LABELS = {"neg": 0, "pos": 1}
PAD_ID = 0
OOV_ID = 1
NUM_SPECIAL = 2
NUM_CLASSES = 2
CACHE_VERSION = "v1"

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def tokenize(text: str) -> list[str]:
  """Splits a review into lower-case word tokens (see the module docstring)."""
  return _TOKEN.findall(_BREAK.sub(" ", text.lower()))


def _review_path_parts(name: str) -> tuple[str, str] | None:
  """`(split, label)` for `.../aclImdb/{split}/{pos,neg}/*.txt`, else None."""
  parts = name.replace("\\", "/").split("/")
  if len(parts) < 3 or not parts[-1].endswith(".txt"):
    return None
  split, label = parts[-3], parts[-2]
  if split in SPLITS and label in LABELS:
    return split, label
  return None


def _review_sort_key(name: str) -> tuple:
  """Orders `123_8.txt` numerically, so the order does not depend on the OS."""
  stem = pathlib.PurePosixPath(name).stem
  head = stem.split("_")[0]
  return (int(head) if head.isdigit() else -1, stem)


def read_reviews_from_folder(folder: pathlib.Path) -> dict:
  """`{(split, label): [text, ...]}` from an extracted `aclImdb/` folder.

  Raises:
    DataNotFoundError: a `{split}/{pos,neg}` folder is missing.
    DataFormatError: one of them holds no `.txt` review (names the
      folder).
  """
  reviews = {}
  for split in SPLITS:
    for label in LABELS:
      sub = folder / split / label
      if not sub.is_dir():
        raise files.DataNotFoundError(
          f"IMDB: {sub} is missing; an aclImdb folder needs "
          "{train,test}/{pos,neg}/*.txt."
        )
      texts = sorted(
        (p for p in sub.iterdir() if p.suffix == ".txt"),
        key=lambda p: _review_sort_key(p.name),
      )
      if not texts:
        raise files.DataFormatError(
          f"IMDB: review folder {sub} is empty (no .txt "
          "files); the dataset is incomplete."
        )
      reviews[split, label] = [
        p.read_text(encoding="utf-8", errors="replace") for p in texts
      ]
  return reviews


def read_reviews_from_archive(path: pathlib.Path) -> dict:
  """`{(split, label): [text, ...]}` streamed from an `aclImdb` `.tar.gz`."""
  named = collections.defaultdict(list)
  try:
    with tarfile.open(path, "r:gz") as tar:
      for member in tar:
        where = member.isfile() and _review_path_parts(member.name)
        if where:
          data = tar.extractfile(member).read()
          named[where].append(
            (
              _review_sort_key(member.name),
              data.decode("utf-8", errors="replace"),
            )
          )
  except (tarfile.TarError, OSError, EOFError) as e:
    raise files.DataFormatError(
      f"IMDB: cannot read archive {path} ({e}); is it a truncated download?"
    ) from e
  reviews = {}
  for split in SPLITS:
    for label in LABELS:
      items = sorted(named.get((split, label), []))
      if not items:
        raise files.DataFormatError(
          f"IMDB: archive {path} has no reviews in "
          f"aclImdb/{split}/{label}/; the dataset is "
          "incomplete."
        )
      reviews[split, label] = [text for _, text in items]
  return reviews


def find_source(
  data_dir=None, cache_dir=None, download: bool = True
) -> pathlib.Path:
  """The `aclImdb/` folder or `.tar.gz` to read (see the module docstring)."""
  root = files.data_folder(data_dir, "imdb")
  if root is None:
    cache = pathlib.Path(cache_dir or files.cache_dir("imdb"))
    return files.cached_archive(URL, MD5, cache, download, "IMDB")
  if root.is_file():
    return root
  for folder in (root, root / "aclImdb"):
    if (folder / "train").is_dir() or (folder / "test").is_dir():
      return folder
  for name in ARCHIVE_NAMES:
    if (root / name).is_file():
      return root / name
  raise files.DataNotFoundError(
    f"IMDB: {root} holds neither an aclImdb/ folder nor one of "
    f"{ARCHIVE_NAMES} ({files.listing(root)}). Put the Large Movie Review "
    f"Dataset ({URL}, md5 {MD5}) in a folder and "
    f"{files.how_to_provide('imdb')}."
  )


def read_reviews(source: pathlib.Path) -> dict:
  if source.is_file():
    return read_reviews_from_archive(source)
  return read_reviews_from_folder(source)


def build_vocabulary(token_lists: Iterable[list[str]]) -> list[str]:
  """All tokens of `token_lists`, most frequent first, ties alphabetical."""
  counts = collections.Counter()
  for tokens in token_lists:
    counts.update(tokens)
  return sorted(counts, key=lambda w: (-counts[w], w))


def _source_key(source: pathlib.Path) -> str:
  stat = source.stat()
  text = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
  if source.is_dir():  # A folder's mtime misses edits inside it.
    text += "|" + "|".join(
      f"{s}/{l}:{len(os.listdir(source / s / l))}"
      for s in SPLITS
      for l in LABELS
      if (source / s / l).is_dir()
    )
  return hashlib.sha1(f"{CACHE_VERSION}|{text}".encode()).hexdigest()[:16]


def _build_corpus(source: pathlib.Path) -> dict:
  """Reads and tokenises every review (see `tokenized_corpus`)."""
  reviews = read_reviews(source)
  tokens = {
    split: [tokenize(t) for label in LABELS for t in reviews[split, label]]
    for split in SPLITS
  }
  train_words = build_vocabulary(tokens["train"])
  test_only = sorted(
    set(w for r in tokens["test"] for w in r) - set(train_words)
  )
  words = train_words + test_only
  rank = {w: i for i, w in enumerate(words)}
  corpus = {
    "words": np.asarray(words, dtype=str),
    "num_train_words": np.asarray(len(train_words), np.int64),
  }
  for split in SPLITS:
    corpus[f"{split}_ranks"] = np.asarray(
      [rank[w] for r in tokens[split] for w in r], np.int32
    )
    corpus[f"{split}_lengths"] = np.asarray(
      [len(r) for r in tokens[split]], np.int32
    )
    corpus[f"{split}_labels"] = np.concatenate(
      [
        np.full(len(reviews[split, label]), value, np.int32)
        for label, value in LABELS.items()
      ]
    )
  return corpus


def _write_corpus(path: pathlib.Path, corpus: dict) -> None:
  """Saves the corpus as .npz; a cache that cannot be written is a warning."""
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    # The words as one newline-joined string: 4 MB instead of 30 MB.
    np.savez(tmp, **dict(corpus, words=np.asarray("\n".join(corpus["words"]))))
    os.replace(tmp, path)
    logging.info("IMDB: cached the tokenised corpus in %s", path)
  except OSError as e:
    logging.warning("IMDB: could not write the cache %s (%s)", path, e)


def tokenized_corpus(source: pathlib.Path, cache_dir=None) -> dict:
  """The corpus as ranks into the train-frequency word list, cached as .npz.

  Returns:
    A dict with `words` (all train words by rank, then test-only words),
    `num_train_words`, and per split `{split}_ranks` (all reviews' ranks
    concatenated, int32), `{split}_lengths` (tokens per review) and
    `{split}_labels` (int32, 1 = pos). Reviews are ordered neg then pos, each
    by file number.
  """
  cache = pathlib.Path(cache_dir or files.cache_dir("imdb"))
  path = cache / f"imdb_tokens_{CACHE_VERSION}_{_source_key(source)}.npz"
  if path.is_file():
    with np.load(path, allow_pickle=False) as f:
      logging.info("IMDB: tokenised corpus from cache %s", path)
      corpus = {k: f[k] for k in f.files}
    corpus["words"] = np.asarray(str(corpus["words"]).split("\n"))
    return corpus
  corpus = _build_corpus(source)
  _write_corpus(path, corpus)
  return corpus


def encode(
  ranks: np.ndarray,
  lengths: np.ndarray,
  vocab_size: int,
  max_length: int,
  num_train_words: int,
  truncate: str = "pre",
  pad: str = "pre",
) -> np.ndarray:
  """Fixed-length id sequences from concatenated word ranks.

  Args:
    ranks: (sum(lengths),) ranks into the word list (0 = most frequent).
    lengths: (num_reviews,) tokens per review.
    vocab_size: ids in use, padding and OOV included (>= 3).
    max_length: sequence length (>= 1).
    num_train_words: words ranked below this occur in the training set.
    truncate: 'pre' keeps the last `max_length` tokens, 'post' the first.
    pad: 'pre' pads at the start, 'post' at the end.

  Returns:
    (num_reviews, max_length) int32 ids.
  """
  check_sequence_args(vocab_size, max_length, truncate, pad)
  in_vocab = ranks < min(vocab_size - NUM_SPECIAL, num_train_words)
  ids = np.where(in_vocab, ranks + NUM_SPECIAL, OOV_ID).astype(np.int32)
  out = np.full((len(lengths), max_length), PAD_ID, np.int32)
  ends = np.cumsum(lengths)
  for i, (end, n) in enumerate(zip(ends, lengths)):
    review = ids[end - n : end]
    review = review[-max_length:] if truncate == "pre" else review[:max_length]
    if len(review):
      if pad == "pre":
        out[i, max_length - len(review) :] = review
      else:
        out[i, : len(review)] = review
  return out


def check_sequence_args(vocab_size, max_length, truncate="pre", pad="pre"):
  if int(max_length) < 1:
    raise ValueError(
      f"max_length (the sequence length) must be >= 1, got {max_length}."
    )
  if int(vocab_size) < NUM_SPECIAL + 1:
    raise ValueError(
      f"vocab_size must be >= 3 (padding, OOV and one word), got {vocab_size}."
    )
  for name, value in (("truncate", truncate), ("pad", pad)):
    if value not in ("pre", "post"):
      raise ValueError(f"{name} must be 'pre' or 'post', got {value!r}.")


def decode(ids: Iterable[int], words: np.ndarray) -> list[str]:
  """Tokens of a sequence of ids (padding dropped, OOV as `<unk>`)."""
  out = []
  for i in ids:
    i = int(i)
    if i == PAD_ID:
      continue
    out.append("<unk>" if i == OOV_ID else str(words[i - NUM_SPECIAL]))
  return out


def load_imdb(
  data_dir: str | os.PathLike | None = None,
  vocab_size: int = 20_000,
  max_length: int = 200,
  truncate: str = "pre",
  pad: str = "pre",
  cache_dir: str | os.PathLike | None = None,
  download: bool = True,
) -> dict[str, np.ndarray]:
  """Loads IMDB as padded id sequences.

  Args:
    data_dir: see the module docstring; None or "": `$DATA_DIR/imdb` or
      download.
    vocab_size: ids in use, including padding (0) and OOV (1).
    max_length: tokens per sequence after truncating / padding (>= 1).
    truncate, pad: 'pre' or 'post' (see `encode`).
    cache_dir: download and token cache (default `files.cache_dir("imdb")`).
    download: whether the archive may be downloaded.

  Returns:
    `train_tokens` / `test_tokens` (n, max_length) int32, `train_labels` /
    `test_labels` (n,) int32 (1 = positive), and `words` (the word of id
    `i + 2` is `words[i]`).
  """
  check_sequence_args(vocab_size, max_length, truncate, pad)
  source = find_source(data_dir, cache_dir, download)
  corpus = tokenized_corpus(source, cache_dir)
  num_train_words = int(corpus["num_train_words"])
  result = {
    "words": corpus["words"][: min(vocab_size - NUM_SPECIAL, num_train_words)]
  }
  for split in SPLITS:
    result[f"{split}_tokens"] = encode(
      corpus[f"{split}_ranks"],
      corpus[f"{split}_lengths"],
      vocab_size,
      max_length,
      num_train_words,
      truncate,
      pad,
    )
    result[f"{split}_labels"] = corpus[f"{split}_labels"]
  logging.info(
    "IMDB from %s: %d train / %d test reviews, vocabulary %d, length %d",
    source,
    len(result["train_labels"]),
    len(result["test_labels"]),
    vocab_size,
    max_length,
  )
  return result
