"""IMDB loader: real counts, the tokenizer, train-only vocabulary, padding,
the token cache, and errors (empty review folder, sequence length < 1).

The real-data test tokenises 50,000 reviews once (~12 s) and keeps the result
in the standard cache (`experiments.data.files.cache_dir("imdb")`), so
later runs take about a second. Edge cases use tiny `aclImdb/` folders and
`.tar.gz` archives written by the tests.
"""

import io
import pathlib
import tarfile

from conftest import dataset_dir_or_skip
import numpy as np
import pytest

from experiments.data import imdb

pytestmark = pytest.mark.usefixtures("no_data_dir_env")

REVIEWS = {
  ("train", "pos"): [
    "A great film.<br /><br />Great acting!",
    "I loved it, great fun",
    "Don't miss it: great",
  ],
  ("train", "neg"): [
    "A bad film; bad acting.",
    "Boring and bad",
    "I didn't love it",
  ],
  ("test", "pos"): ["great great zebra zebra zebra"],
  ("test", "neg"): ["bad zebra zebra zebra"],
}


def write_folder(root: pathlib.Path, reviews=REVIEWS) -> pathlib.Path:
  folder = root / "aclImdb"
  for (split, label), texts in reviews.items():
    (folder / split / label).mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
      (folder / split / label / f"{i}_7.txt").write_text(text)
  return folder


def write_archive(root: pathlib.Path, name="aclImdb_v1.tar.gz") -> pathlib.Path:
  source = write_folder(root / "src")
  path = root / name
  with tarfile.open(path, "w:gz") as tar:
    tar.add(source, arcname="aclImdb")
  return path


@pytest.fixture(scope="module")
def real_imdb():
  root = dataset_dir_or_skip("imdb")
  source = imdb.find_source(root)
  return source, imdb.tokenized_corpus(source)


def test_real_counts_and_balance(real_imdb):
  source, corpus = real_imdb
  for split in ("train", "test"):
    labels = corpus[f"{split}_labels"]
    assert labels.shape == (25_000,)
    assert int(labels.sum()) == 12_500  # Balanced: 12,500 pos, 12,500 neg.
    assert corpus[f"{split}_lengths"].min() >= 1
  data = imdb.load_imdb(source, vocab_size=10_000, max_length=64)
  assert data["train_tokens"].shape == (25_000, 64)
  assert data["test_tokens"].shape == (25_000, 64)
  assert data["train_tokens"].max() == 9_999
  assert list(data["words"][:3]) == ["the", "and", "a"]


def test_real_tokenizer_round_trip(real_imdb):
  _, corpus = real_imdb
  words = corpus["words"]
  lengths = corpus["train_lengths"][:50]
  ranks = corpus["train_ranks"][: lengths.sum()]
  vocab_size = len(words) + 2  # Every word in the vocabulary: no OOV.
  ids = imdb.encode(
    ranks,
    lengths,
    vocab_size,
    int(lengths.max()),
    int(corpus["num_train_words"]),
    pad="post",
  )
  for row, n in zip(ids, lengths):
    tokens = imdb.decode(row, words)
    assert len(tokens) == n
    assert imdb.tokenize(" ".join(tokens)) == tokens


def test_real_vocabulary_is_from_train_only(real_imdb):
  _, corpus = real_imdb
  num_train_words = int(corpus["num_train_words"])
  lengths = corpus["test_lengths"][:2000]
  ranks = corpus["test_ranks"][: lengths.sum()]
  test_only = ranks >= num_train_words
  assert test_only.any()  # The test set has words never seen in training.
  # Even a vocabulary of every word in the corpus maps them to OOV.
  ids = imdb.encode(
    ranks,
    lengths,
    len(corpus["words"]) + 2,
    int(lengths.max()),
    num_train_words,
    pad="post",
  )
  flat = ids[np.arange(ids.shape[1]) < lengths[:, None]]
  np.testing.assert_array_equal(flat == imdb.OOV_ID, test_only)
  assert flat.max() < num_train_words + imdb.NUM_SPECIAL


def test_tokenizer_rules():
  assert imdb.tokenize("Don't<br />STOP--now! It's 10/10.") == [
    "don't",
    "stop",
    "now",
    "it's",
    "10",
    "10",
  ]
  assert imdb.tokenize("'quoted' words") == ["quoted", "words"]
  text = "A film<br/>that's \"great\", isn't it?"
  assert imdb.tokenize(" ".join(imdb.tokenize(text))) == imdb.tokenize(text)


@pytest.mark.parametrize("form", ["folder", "archive", "parent_of_folder"])
def test_fixture_forms_give_the_same_result(tmp_path, form):
  if form == "archive":
    source = write_archive(tmp_path)
  elif form == "folder":
    source = write_folder(tmp_path)
  else:
    write_folder(tmp_path)
    source = tmp_path
  data = imdb.load_imdb(
    source, vocab_size=6, max_length=4, cache_dir=tmp_path / "cache"
  )
  # Train counts: great 4, bad 3, it 3, a 2, acting 2, film 2, i 2, ...:
  # ids 2..5 = great, bad, it, a (ties alphabetical).
  assert list(data["words"]) == ["great", "bad", "it", "a"]
  np.testing.assert_array_equal(data["train_labels"], [0, 0, 0, 1, 1, 1])
  # Train neg 0 "a bad film bad acting" keeps its last 4 tokens, pre-padded.
  np.testing.assert_array_equal(data["train_tokens"][0], [3, 1, 3, 1])
  # "zebra" occurs only in the test set: out of vocabulary however large the
  # vocabulary is.
  np.testing.assert_array_equal(data["test_tokens"][0], [3, 1, 1, 1])
  big = imdb.load_imdb(
    source, vocab_size=1000, max_length=6, cache_dir=tmp_path / "cache"
  )
  assert "zebra" not in set(big["words"])
  np.testing.assert_array_equal(big["test_tokens"][1], [0, 2, 2, 1, 1, 1])


def test_truncate_and_pad_options():
  ranks = np.array([0, 1, 2, 3, 4, 0, 1], np.int32)
  lengths = np.array([5, 2])
  enc = lambda t, p: imdb.encode(ranks, lengths, 100, 3, 10, t, p)
  np.testing.assert_array_equal(enc("pre", "pre"), [[4, 5, 6], [0, 2, 3]])
  np.testing.assert_array_equal(enc("post", "post"), [[2, 3, 4], [2, 3, 0]])
  np.testing.assert_array_equal(enc("post", "pre"), [[2, 3, 4], [0, 2, 3]])


def test_second_load_comes_from_the_cache(tmp_path, monkeypatch):
  source = write_folder(tmp_path)
  first = imdb.load_imdb(
    source, vocab_size=8, max_length=5, cache_dir=tmp_path / "cache"
  )
  assert len(list((tmp_path / "cache").glob("imdb_tokens_*.npz"))) == 1

  def no_reading(*args):
    raise AssertionError("read the reviews again instead of the cache")

  monkeypatch.setattr(imdb, "read_reviews", no_reading)
  second = imdb.load_imdb(
    source, vocab_size=8, max_length=5, cache_dir=tmp_path / "cache"
  )
  for key in first:
    np.testing.assert_array_equal(first[key], second[key])


@pytest.mark.parametrize("max_length", [0, -3])
def test_sequence_length_below_one_is_an_error(tmp_path, max_length):
  with pytest.raises(ValueError, match="max_length"):
    imdb.load_imdb(
      write_folder(tmp_path),
      max_length=max_length,
      cache_dir=tmp_path / "cache",
    )


def test_vocab_size_too_small_is_an_error(tmp_path):
  with pytest.raises(ValueError, match="vocab_size"):
    imdb.load_imdb(
      write_folder(tmp_path), vocab_size=2, cache_dir=tmp_path / "cache"
    )


def test_empty_review_folder_is_an_error(tmp_path):
  reviews = dict(REVIEWS)
  reviews["test", "neg"] = []
  folder = write_folder(tmp_path, reviews)
  (folder / "test" / "neg").mkdir(parents=True, exist_ok=True)
  with pytest.raises(ValueError, match=r"test/neg.*empty"):
    imdb.load_imdb(folder, cache_dir=tmp_path / "cache")


def test_archive_without_a_split_is_an_error(tmp_path):
  path = tmp_path / "aclImdb_v1.tar.gz"
  with tarfile.open(path, "w:gz") as tar:
    data = b"good"
    info = tarfile.TarInfo("aclImdb/train/pos/0_9.txt")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
  with pytest.raises(ValueError, match="train/neg"):
    imdb.load_imdb(path, cache_dir=tmp_path / "cache")


def test_corrupt_archive_is_an_error(tmp_path):
  path = tmp_path / "aclImdb_v1.tar.gz"
  path.write_bytes(b"\x1f\x8b not really gzip")
  with pytest.raises(ValueError, match="cannot read archive"):
    imdb.load_imdb(tmp_path, cache_dir=tmp_path / "cache")


def test_folder_without_the_dataset_says_what_to_do(tmp_path):
  with pytest.raises(FileNotFoundError, match="aclImdb"):
    imdb.load_imdb(tmp_path, cache_dir=tmp_path / "cache")
