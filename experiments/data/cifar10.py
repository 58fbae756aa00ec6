"""CIFAR-10 from the standard python-pickle batches, given a folder or downloaded.

The folder is found as for every dataset (see `files`): `data_dir`, else
`$DATA_DIR/cifar10`, each either the `cifar-10-batches-py/` folder itself or
a folder that contains it; else the cache (`cache_dir`, default
`files.cache_dir("cifar10")`), where the canonical `cifar-10-python.tar.gz` is
downloaded, its md5 checked, and extracted.

The full dataset has `data_batch_1..5` (10,000 images each) and `test_batch`
(10,000). The loader needs `test_batch` and at least one training batch, and
works with whatever subset of the five training batches exists; it says which
batches it found and whether any holds fewer than 10,000 images (the
`../shared/data/cifar10` copy is such a subset: 4,000 training images in
`data_batch_1`, 1,000 test images). A missing test batch, no training batch at
all, or a corrupt pickle is a `ValueError`/`FileNotFoundError` naming the file.

Pickles are read with a restricted unpickler that only rebuilds numpy arrays,
lists, dicts and bytes, so a malicious file cannot run code.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pickle
import tarfile

from absl import logging
import numpy as np

from experiments.data import files

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
MD5 = "c58f30108f718f92721af3b95e74349a"
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
IMAGES_PER_BATCH = 10_000
# Labels 0..9: airplane, automobile, bird, cat, deer, dog, frog, horse, ship,
# truck.
NUM_CLASSES = 10

# The only globals a CIFAR-10 pickle (python 2 or 3, any numpy) refers to.
_ALLOWED_GLOBALS = {
  ("numpy.core.multiarray", "_reconstruct"),
  ("numpy._core.multiarray", "_reconstruct"),
  ("numpy", "ndarray"),
  ("numpy", "dtype"),
  ("numpy.core.multiarray", "scalar"),
  ("numpy._core.multiarray", "scalar"),
  ("_codecs", "encode"),
}


class CifarFormatError(files.DataFormatError):
  """A batch file is not a CIFAR-10 python pickle of the expected shape."""


class _NumpyOnlyUnpickler(pickle.Unpickler):
  def find_class(self, module, name):
    if (module, name) in _ALLOWED_GLOBALS:
      return super().find_class(module, name)
    raise pickle.UnpicklingError(
      f"global {module}.{name} is not allowed in a CIFAR-10 batch"
    )


@dataclasses.dataclass(frozen=True)
class BatchReport:
  """What `find_batches` found in a `cifar-10-batches-py` folder.

  Attributes:
    folder: the folder read.
    train_batches: names of the training batch files present, in order.
    missing_train_batches: names of the absent ones among `data_batch_1..5`.
  """

  folder: pathlib.Path
  train_batches: tuple[str, ...]
  missing_train_batches: tuple[str, ...]

  @property
  def is_complete(self) -> bool:
    return not self.missing_train_batches


def read_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
  """Reads one batch file.

  Args:
    path: a CIFAR-10 python pickle (`data_batch_k` or `test_batch`): a dict
      with `data` (n, 3072) uint8, channel-major rows, and `labels` (n ints).

  Returns:
    `(images (n, 32, 32, 3) uint8, labels (n,) int32)`.

  Raises:
    CifarFormatError: the file is not such a pickle (names the file).
  """
  path = pathlib.Path(path)
  try:
    with open(path, "rb") as f:
      batch = _NumpyOnlyUnpickler(f, encoding="bytes").load()
  except (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    UnicodeDecodeError,
  ) as e:
    raise CifarFormatError(
      f"{path}: not a readable CIFAR-10 python pickle ({type(e).__name__}: "
      f"{e}); the file is corrupt or truncated. Re-download "
      f"{URL} (md5 {MD5})."
    ) from e
  if not isinstance(batch, dict):
    raise CifarFormatError(
      f"{path}: expected a pickled dict, got {type(batch).__name__}"
    )
  batch = {
    k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()
  }
  if "data" not in batch or "labels" not in batch:
    raise CifarFormatError(
      f"{path}: the dict has keys {sorted(batch)}; expected 'data' and 'labels'"
    )
  data = np.asarray(batch["data"])
  labels = np.asarray(batch["labels"])
  if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
    raise CifarFormatError(
      f"{path}: 'data' must be uint8 (n, 3072), got {data.dtype} {data.shape}"
    )
  if labels.shape != (data.shape[0],):
    raise CifarFormatError(
      f"{path}: {data.shape[0]} images but labels of shape {labels.shape}"
    )
  if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
    raise CifarFormatError(f"{path}: labels outside 0..{NUM_CLASSES - 1}")
  images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return np.ascontiguousarray(images), labels.astype(np.int32)


def write_batch(
  path: str | os.PathLike,
  images: np.ndarray,
  labels: np.ndarray,
  batch_label: str = "test fixture",
) -> None:
  """Writes a batch in the standard format (inverse of `read_batch`)."""
  images = np.asarray(images, np.uint8)
  data = images.transpose(0, 3, 1, 2).reshape(images.shape[0], -1)
  batch = {
    b"batch_label": batch_label.encode(),
    b"labels": [int(y) for y in labels],
    b"data": data,
    b"filenames": [f"{i}.png".encode() for i in range(len(labels))],
  }
  with open(path, "wb") as f:
    pickle.dump(batch, f, protocol=2)


def _batches_folder(root: pathlib.Path) -> pathlib.Path:
  """`root` if it holds the batch files, else `root/cifar-10-batches-py`."""
  if (root / TEST_BATCH).exists() or any(
    (root / name).exists() for name in TRAIN_BATCHES
  ):
    return root
  return root / FOLDER


def find_batches(folder: str | os.PathLike) -> BatchReport:
  """Which standard batch files a folder holds; raises if unusable.

  Raises:
    FileNotFoundError: no `test_batch`, or none of `data_batch_1..5`; the
      message lists what is there and what is expected.
  """
  folder = _batches_folder(pathlib.Path(folder).expanduser())
  present = tuple(n for n in TRAIN_BATCHES if (folder / n).is_file())
  missing = tuple(n for n in TRAIN_BATCHES if n not in present)
  if not present or not (folder / TEST_BATCH).is_file():
    absent = ([TEST_BATCH] if not (folder / TEST_BATCH).is_file() else []) + (
      ["any of " + ", ".join(TRAIN_BATCHES)] if not present else []
    )
    raise files.DataNotFoundError(
      f"CIFAR-10: {folder} lacks {' and '.join(absent)} (it has: "
      f"{files.listing(folder)}). Put the standard python batches "
      f"({FOLDER}/ from {URL}) in a folder and "
      f"{files.how_to_provide('cifar10')}."
    )
  return BatchReport(folder, present, missing)


def _extract(archive_path: pathlib.Path, into: pathlib.Path) -> None:
  with tarfile.open(archive_path, "r:gz") as tar:
    members = [
      m
      for m in tar.getmembers()
      if m.name.startswith(FOLDER + "/") and m.isfile()
    ]
    tar.extractall(into, members=members, filter="data")


def resolve_folder(
  data_dir=None, cache_dir=None, download: bool = True
) -> pathlib.Path:
  """The folder to read: `data_dir`, `$DATA_DIR/cifar10`, or the cache."""
  folder = files.data_folder(data_dir, "cifar10")
  if folder is not None:
    return folder
  cache = pathlib.Path(cache_dir or files.cache_dir("cifar10"))
  if not (cache / FOLDER / TEST_BATCH).is_file():
    tgz = files.cached_archive(URL, MD5, cache, download, "CIFAR-10")
    _extract(tgz, cache)
  return cache / FOLDER


def load_cifar10(
  data_dir: str | os.PathLike | None = None,
  cache_dir: str | os.PathLike | None = None,
  download: bool = True,
) -> dict[str, np.ndarray]:
  """Loads CIFAR-10 as float images in [0, 1] (NHWC) and int32 labels.

  Args:
    data_dir: `cifar-10-batches-py/` or its parent. None or "":
      `$DATA_DIR/cifar10` if `DATA_DIR` is set, else the download cache.
    cache_dir: download cache (default `files.cache_dir("cifar10")`).
    download: whether the archive may be downloaded into the cache.

  Returns:
    `train_images` (n, 32, 32, 3) float32, `train_labels` (n,) int32 from the
    training batches found (n = 50,000 for the full set), and `test_images`,
    `test_labels` from `test_batch`. The log says which batches were found,
    and warns when the set is a subset.
  """
  report = find_batches(resolve_folder(data_dir, cache_dir, download))
  train = [read_batch(report.folder / name) for name in report.train_batches]
  test_images, test_labels = read_batch(report.folder / TEST_BATCH)
  train_images = np.concatenate([images for images, _ in train])
  train_labels = np.concatenate([labels for _, labels in train])
  sizes = ", ".join(
    f"{name} ({len(labels)})"
    for name, (_, labels) in zip(report.train_batches, train)
  )
  message = (
    f"CIFAR-10 from {report.folder}: training batches {sizes}; "
    f"test_batch ({len(test_labels)})."
  )
  short = [
    name
    for name, (_, labels) in zip(report.train_batches, train)
    if len(labels) < IMAGES_PER_BATCH
  ]
  if len(test_labels) < IMAGES_PER_BATCH:
    short.append(TEST_BATCH)
  if report.missing_train_batches or short:
    logging.warning(
      "%s This is a SUBSET of CIFAR-10 (%d of 50,000 training and %d of "
      "10,000 test images): missing %s; partial %s.",
      message,
      len(train_labels),
      len(test_labels),
      ", ".join(report.missing_train_batches) or "none",
      ", ".join(short) or "none",
    )
  else:
    logging.info("%s The full set.", message)
  scale = np.float32(1 / 255)
  return {
    "train_images": train_images.astype(np.float32) * scale,
    "train_labels": train_labels,
    "test_images": test_images.astype(np.float32) * scale,
    "test_labels": test_labels,
  }
