"""MNIST loader: IDX parsing, where files come from, and its error messages.

Fixtures are tiny IDX files in the standard format written by the tests; the
download path is exercised with a fake `urlopen` (no network).
"""

import gzip
import hashlib
import io
import pathlib
import urllib.error
import urllib.request

from conftest import dataset_dir_or_skip
import numpy as np
import pytest

from experiments.data import mnist

pytestmark = pytest.mark.usefixtures("no_data_dir_env")

NUM_TRAIN, NUM_TEST = 6, 4


def fake_mnist(seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  return {
    "train_images": rng.integers(0, 256, (NUM_TRAIN, 28, 28), np.uint8),
    "train_labels": rng.integers(0, 10, (NUM_TRAIN,), np.uint8),
    "test_images": rng.integers(0, 256, (NUM_TEST, 28, 28), np.uint8),
    "test_labels": rng.integers(0, 10, (NUM_TEST,), np.uint8),
  }


def write_fake_mnist(
  folder: pathlib.Path, arrays=None, gz: bool = True, dotted: bool = False
) -> dict[str, np.ndarray]:
  """Writes the four files with the standard names; returns the arrays."""
  arrays = arrays or fake_mnist()
  folder.mkdir(parents=True, exist_ok=True)
  for split, (base, _) in mnist.FILES.items():
    name = base.replace("-idx", ".idx") if dotted else base
    mnist.write_idx(folder / (name + (".gz" if gz else "")), arrays[split])
  return arrays


def check_loaded(loaded, arrays):
  for part, n in (("train", NUM_TRAIN), ("test", NUM_TEST)):
    images = loaded[f"{part}_images"]
    assert images.shape == (n, 784) and images.dtype == np.float32
    np.testing.assert_allclose(
      images, arrays[f"{part}_images"].reshape(n, 784) / 255.0, rtol=1e-6
    )
    assert loaded[f"{part}_labels"].dtype == np.int32
    np.testing.assert_array_equal(
      loaded[f"{part}_labels"], arrays[f"{part}_labels"]
    )


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("dotted", [False, True])
def test_reads_gzipped_and_raw_files(tmp_path, gz, dotted):
  arrays = write_fake_mnist(tmp_path, gz=gz, dotted=dotted)
  check_loaded(mnist.load_mnist(tmp_path), arrays)


def test_data_dir_from_environment(tmp_path, monkeypatch):
  arrays = write_fake_mnist(tmp_path / "mnist")
  monkeypatch.setenv("DATA_DIR", str(tmp_path))
  check_loaded(mnist.load_mnist(), arrays)


@pytest.mark.parametrize(
  "dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]
)
def test_idx_round_trip_every_type(dtype):
  array = (np.arange(24) - 5).astype(dtype).reshape(2, 3, 4)
  parsed = mnist.parse_idx(mnist.encode_idx(array))
  assert parsed.dtype == array.dtype and parsed.shape == (2, 3, 4)
  np.testing.assert_array_equal(parsed, array)


def test_idx_is_big_endian():
  data = bytes([0, 0, 0x0B, 1, 0, 0, 0, 2]) + b"\x01\x02\xff\xfe"
  np.testing.assert_array_equal(mnist.parse_idx(data), [258, -2])


@pytest.mark.parametrize(
  "data, message",
  [
    (b"<html>", "not an IDX file"),
    (bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 7]), "unknown IDX type code 0x42"),
    (bytes([0, 0, 8, 3, 0, 0]), "truncated header"),
    (bytes([0, 0, 8, 1, 0, 0, 0, 5, 1, 2]), "corrupt or truncated"),
    (bytes([0, 0, 8, 1, 0, 0, 0, 1, 1, 2]), "corrupt or truncated"),
  ],
)
def test_corrupt_idx_is_an_error(data, message):
  with pytest.raises(mnist.IdxFormatError, match=message):
    mnist.parse_idx(data, "x.idx")


def test_truncated_file_error_names_the_file(tmp_path):
  write_fake_mnist(tmp_path)
  path = tmp_path / "train-images-idx3-ubyte.gz"
  path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-10]))
  with pytest.raises(
    mnist.IdxFormatError, match="train-images-idx3-ubyte.gz.*truncated"
  ):
    mnist.load_mnist(tmp_path)


def test_broken_gzip_is_an_error(tmp_path):
  write_fake_mnist(tmp_path)
  path = tmp_path / "t10k-labels-idx1-ubyte.gz"
  path.write_bytes(path.read_bytes()[:12])
  with pytest.raises(mnist.IdxFormatError, match="corrupt gzip"):
    mnist.load_mnist(tmp_path)


def test_label_count_must_match_images(tmp_path):
  arrays = fake_mnist()
  arrays["test_labels"] = arrays["test_labels"][:-1]
  write_fake_mnist(tmp_path, arrays)
  with pytest.raises(mnist.IdxFormatError, match="expected 4 labels"):
    mnist.load_mnist(tmp_path)


def test_labels_must_be_digits(tmp_path):
  arrays = fake_mnist()
  arrays["train_labels"][0] = 10
  write_fake_mnist(tmp_path, arrays)
  with pytest.raises(mnist.IdxFormatError, match="outside 0..9"):
    mnist.load_mnist(tmp_path)


def test_incomplete_data_dir_says_which_files(tmp_path):
  write_fake_mnist(tmp_path)
  (tmp_path / "t10k-images-idx3-ubyte.gz").unlink()
  with pytest.raises(FileNotFoundError) as error:
    mnist.load_mnist(tmp_path)
  message = str(error.value)
  assert f"Missing in {tmp_path}: t10k-images-idx3-ubyte.gz" in message
  assert "train-labels-idx1-ubyte.gz" in message  # The full list to provide.
  assert "data_dir" in message and "DATA_DIR" in message


def test_no_source_error_names_cache_and_files(tmp_path):
  cache = tmp_path / "cache"
  with pytest.raises(FileNotFoundError) as error:
    mnist.load_mnist(cache_dir=cache, download=False)
  message = str(error.value)
  assert str(cache) in message and "downloads are off" in message
  for base, _ in mnist.FILES.values():
    assert base + ".gz" in message


class FakeResponse(io.BytesIO):
  def __enter__(self):
    return self

  def __exit__(self, *args):
    self.close()


def fake_server(monkeypatch, files: dict[str, bytes], requested: list):
  """Serves `files` (name -> bytes) from the first mirror only."""

  def urlopen(url, timeout=None):
    del timeout
    requested.append(url)
    name = url.rsplit("/", 1)[-1]
    if url.startswith(mnist.MIRRORS[0]) and name in files:
      return FakeResponse(files[name])
    raise urllib.error.URLError("unreachable in tests")

  monkeypatch.setattr(urllib.request, "urlopen", urlopen)


def gz_archives(arrays) -> dict[str, bytes]:
  return {
    base + ".gz": gzip.compress(mnist.encode_idx(arrays[split]))
    for split, (base, _) in mnist.FILES.items()
  }


def test_download_into_cache_checks_md5(tmp_path, monkeypatch):
  arrays = fake_mnist()
  archives = gz_archives(arrays)
  monkeypatch.setattr(
    mnist,
    "FILES",
    {
      split: (base, hashlib.md5(archives[base + ".gz"]).hexdigest())
      for split, (base, _) in mnist.FILES.items()
    },
  )
  requested = []
  fake_server(monkeypatch, archives, requested)
  cache = tmp_path / "cache"
  check_loaded(mnist.load_mnist(cache_dir=cache), arrays)
  assert sorted(p.name for p in cache.iterdir()) == sorted(archives)
  # A second load uses the cache and asks the network for nothing.
  requested.clear()
  check_loaded(mnist.load_mnist(cache_dir=cache), arrays)
  assert not requested


def test_download_with_wrong_md5_is_rejected(tmp_path, monkeypatch):
  arrays = fake_mnist()
  requested = []
  fake_server(monkeypatch, gz_archives(arrays), requested)  # Real md5s.
  cache = tmp_path / "cache"
  with pytest.raises(FileNotFoundError) as error:
    mnist.load_mnist(cache_dir=cache)
  message = str(error.value)
  assert "md5" in message and "download failed" in message
  assert "unreachable in tests" in message  # The other mirrors' errors.
  assert not list(cache.glob("*.gz")) and not list(cache.glob("*.part"))
  assert len(requested) == len(mnist.FILES) * len(mnist.MIRRORS)


def test_real_mnist_files():
  folder = dataset_dir_or_skip("mnist")
  for base, md5 in mnist.FILES.values():
    path = folder / (base + ".gz")
    assert hashlib.md5(path.read_bytes()).hexdigest() == md5, path
  data = mnist.load_mnist(folder)
  assert data["train_images"].shape == (60000, 784)
  assert data["test_images"].shape == (10000, 784)
  assert data["train_labels"].shape == (60000,)
  assert data["test_labels"].shape == (10000,)
  assert data["train_images"].min() == 0.0 and data["train_images"].max() == 1.0
  # Digit counts of the canonical files.
  assert np.bincount(data["train_labels"])[1] == 6742
  assert np.bincount(data["test_labels"])[0] == 980
