"""CIFAR-10 loader: the real subset, hand-made batches in the standard format,
where files come from, and its errors (missing batch, corrupt pickle).

Fixtures are tiny python-pickle batches written by `cifar10.write_batch` (the
layout of `cifar-10-batches-py/`); the download path uses a fake `urlopen`.
"""

import io
import logging
import os
import pathlib
import pickle
import tarfile
import urllib.request

from conftest import dataset_dir_or_skip
import numpy as np
import pytest

from experiments.data import cifar10
from experiments.data import files

pytestmark = pytest.mark.usefixtures("no_data_dir_env")


def random_batch(rng, n):
  images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
  return images, rng.integers(0, 10, n)


def write_set(
  folder: pathlib.Path, train_batches=(1, 2, 3, 4, 5), n=3, seed=0
) -> dict:
  """Writes tiny batches; returns {name: (images, labels)}."""
  folder.mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(seed)
  written = {}
  for name in [f"data_batch_{i}" for i in train_batches] + ["test_batch"]:
    written[name] = random_batch(rng, n)
    cifar10.write_batch(folder / name, *written[name])
  return written


def test_real_subset_shapes_labels_and_report(caplog):
  root = dataset_dir_or_skip("cifar10")
  with caplog.at_level(logging.INFO):
    data = cifar10.load_cifar10(root)
  assert data["train_images"].shape == (4000, 32, 32, 3)
  assert data["test_images"].shape == (1000, 32, 32, 3)
  assert data["train_images"].dtype == np.float32
  assert data["train_images"].min() >= 0.0 and data["train_images"].max() <= 1
  for split in ("train", "test"):
    labels = data[f"{split}_labels"]
    assert labels.dtype == np.int32
    assert set(np.unique(labels)) == set(range(10))  # Every class occurs.
  # First training image of real batch 1 is a frog (label 6), first test
  # image a cat (label 3): channel layout and order are the canonical ones.
  assert data["train_labels"][0] == 6 and data["test_labels"][0] == 3
  report = cifar10.find_batches(root)
  assert report.train_batches == ("data_batch_1",)
  assert not report.is_complete
  assert "SUBSET" in caplog.text and "data_batch_2" in caplog.text


def test_full_set_in_standard_format_round_trips(tmp_path, caplog):
  written = write_set(tmp_path / cifar10.FOLDER)
  with caplog.at_level(logging.INFO):
    data = cifar10.load_cifar10(tmp_path)  # The parent folder works too.
  expected = np.concatenate(
    [written[f"data_batch_{i}"][0] for i in range(1, 6)]
  )
  np.testing.assert_array_equal(np.round(data["train_images"] * 255), expected)
  np.testing.assert_array_equal(data["test_labels"], written["test_batch"][1])
  assert cifar10.find_batches(tmp_path).is_complete
  assert "data_batch_5 (3)" in caplog.text


def test_pixel_layout_is_channel_major_rows(tmp_path):
  # One image whose red plane is 1, green 2, blue 3: `data` rows are
  # 1024 red, then 1024 green, then 1024 blue values.
  data = np.repeat(np.array([1, 2, 3], np.uint8), 1024)[None]
  with open(tmp_path / "test_batch", "wb") as f:
    pickle.dump({b"data": data, b"labels": [4]}, f, protocol=2)
  images, labels = cifar10.read_batch(tmp_path / "test_batch")
  assert images.shape == (1, 32, 32, 3)
  np.testing.assert_array_equal(images[0, 5, 7], [1, 2, 3])
  assert labels.tolist() == [4]


def test_missing_training_batch_is_reported_not_fatal(tmp_path, caplog):
  write_set(tmp_path, train_batches=(1, 2, 4, 5))
  with caplog.at_level(logging.INFO):
    data = cifar10.load_cifar10(tmp_path)
  assert data["train_images"].shape[0] == 12
  assert "missing data_batch_3" in caplog.text


def test_missing_test_batch_is_an_error(tmp_path):
  write_set(tmp_path)
  (tmp_path / "test_batch").unlink()
  with pytest.raises(FileNotFoundError, match="test_batch"):
    cifar10.load_cifar10(tmp_path)


def test_no_training_batch_is_an_error(tmp_path):
  write_set(tmp_path, train_batches=())
  with pytest.raises(FileNotFoundError, match="data_batch_1"):
    cifar10.load_cifar10(tmp_path)


@pytest.mark.parametrize(
  "contents",
  [
    b"this is not a pickle",
    pickle.dumps(
      {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}, protocol=2
    )[:-40],  # Truncated.
    pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}),
    pickle.dumps({b"labels": [0]}),
    pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}),
  ],
)
def test_corrupt_pickle_names_the_file(tmp_path, contents):
  write_set(tmp_path)
  (tmp_path / "data_batch_2").write_bytes(contents)
  with pytest.raises(cifar10.CifarFormatError, match="data_batch_2"):
    cifar10.load_cifar10(tmp_path)


def test_pickle_cannot_run_code(tmp_path):

  class Evil:
    def __reduce__(self):
      return (os.system, ("echo pwned",))

  (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": Evil()}))
  with pytest.raises(cifar10.CifarFormatError, match="not allowed"):
    cifar10.read_batch(tmp_path / "test_batch")


def test_data_dir_from_environment(tmp_path, monkeypatch):
  written = write_set(tmp_path / "cifar10" / cifar10.FOLDER, n=2)
  monkeypatch.setenv("DATA_DIR", str(tmp_path))
  data = cifar10.load_cifar10()
  np.testing.assert_array_equal(
    data["train_labels"][:2], written["data_batch_1"][1]
  )


def _fake_archive(tmp_path) -> bytes:
  source = tmp_path / "src"
  write_set(source / cifar10.FOLDER, n=2)
  buffer = io.BytesIO()
  with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
    tar.add(source / cifar10.FOLDER, arcname=cifar10.FOLDER)
  return buffer.getvalue()


def test_download_into_cache_checks_md5(tmp_path, monkeypatch):
  payload = _fake_archive(tmp_path)
  (tmp_path / "a").write_bytes(payload)
  urls = []

  def fake_urlopen(url, timeout):
    urls.append(url)
    return io.BytesIO(payload)

  monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
  monkeypatch.setattr(cifar10, "MD5", files.md5_of(tmp_path / "a"))
  data = cifar10.load_cifar10(cache_dir=tmp_path / "cache")
  assert urls == [cifar10.URL]
  assert data["train_images"].shape == (10, 32, 32, 3)
  cifar10.load_cifar10(cache_dir=tmp_path / "cache")  # Cached: no download.
  assert len(urls) == 1

  monkeypatch.setattr(cifar10, "MD5", "0" * 32)
  with pytest.raises(FileNotFoundError, match="md5"):
    cifar10.load_cifar10(cache_dir=tmp_path / "cache2")
  assert not list((tmp_path / "cache2").glob("*.tar.gz"))


def test_no_source_and_no_download_says_what_to_do(tmp_path):
  with pytest.raises(FileNotFoundError, match="downloads are off"):
    cifar10.load_cifar10(cache_dir=tmp_path, download=False)
