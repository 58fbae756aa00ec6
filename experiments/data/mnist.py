"""MNIST from the four standard IDX files, given a folder or downloaded.

The folder is found as for every dataset (see `files`): `data_dir`, else
`$DATA_DIR/mnist`, else the cache (`cache_dir`, default
`files.cache_dir("mnist")`), where missing archives are downloaded from the
canonical mirrors and their md5 checked before they are used. A data folder
holds the four IDX files, gzipped (`train-images-idx3-ubyte.gz`) or not
(`train-images-idx3-ubyte`). If none of these works, the error names the
exact files and folders.
"""

from __future__ import annotations

import gzip
import os
import pathlib

import numpy as np

from experiments.data import files

# Split name -> (file name without `.gz`, md5 of the canonical `.gz` archive).
FILES = {
  "train_images": (
    "train-images-idx3-ubyte",
    "f68b3c2dcbeaaa9fbdd348bbdeb94873",
  ),
  "train_labels": (
    "train-labels-idx1-ubyte",
    "d53e105ee54ea40749a09fcbcd1e9432",
  ),
  "test_images": ("t10k-images-idx3-ubyte", "9fb629c4189551a2d022fa330f9573f3"),
  "test_labels": ("t10k-labels-idx1-ubyte", "ec29112dd5afa0611ce80d1b7f02629c"),
}

# Canonical copies of the same four archives (identical md5s). Yann LeCun's
# original site is listed last because it often refuses scripted downloads.
MIRRORS = (
  "https://ossci-datasets.s3.amazonaws.com/mnist/",
  "https://storage.googleapis.com/cvdf-datasets/mnist/",
  "http://yann.lecun.com/exdb/mnist/",
)

NUM_CLASSES = 10

# IDX type byte -> numpy big-endian dtype (the IDX format is big-endian).
_IDX_DTYPES = {
  0x08: np.dtype(">u1"),
  0x09: np.dtype(">i1"),
  0x0B: np.dtype(">i2"),
  0x0C: np.dtype(">i4"),
  0x0D: np.dtype(">f4"),
  0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


class IdxFormatError(files.DataFormatError):
  """A file is not a well-formed IDX file (wrong magic, size or contents)."""


def parse_idx(data: bytes, name: str = "<bytes>") -> np.ndarray:
  """Decodes the bytes of one (uncompressed) IDX file into an array.

  Args:
    data: the file contents: 2 zero bytes, a type byte, a byte with the number
      of dimensions `d`, `d` big-endian uint32 sizes, then the values.
    name: used in error messages.

  Returns:
    The array with the file's shape and a native-endian dtype.

  Raises:
    IdxFormatError: the magic number, type code or size is wrong.
  """
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise IdxFormatError(
      f"{name}: not an IDX file (magic number must start with two zero "
      f"bytes, got {data[:4]!r}); is it a truncated or HTML download?"
    )
  type_code, ndim = data[2], data[3]
  if type_code not in _IDX_DTYPES:
    raise IdxFormatError(f"{name}: unknown IDX type code 0x{type_code:02x}")
  header_size = 4 + 4 * ndim
  if len(data) < header_size:
    raise IdxFormatError(
      f"{name}: truncated header ({len(data)} bytes for {ndim} dimensions)"
    )
  shape = tuple(int(s) for s in np.frombuffer(data, ">u4", ndim, offset=4))
  dtype = _IDX_DTYPES[type_code]
  expected = header_size + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if len(data) != expected:
    raise IdxFormatError(
      f"{name}: header says shape {shape} of {dtype} ({expected} bytes in "
      f"all) but the file has {len(data)} bytes; the file is corrupt or "
      f"truncated"
    )
  values = np.frombuffer(data, dtype, offset=header_size).reshape(shape)
  return values.astype(dtype.newbyteorder("="))


def encode_idx(array: np.ndarray) -> bytes:
  """The IDX bytes of `array` (inverse of `parse_idx`); for test fixtures."""
  array = np.asarray(array)
  codes = {dtype.newbyteorder("="): code for code, dtype in _IDX_DTYPES.items()}
  code = codes.get(array.dtype.newbyteorder("="))
  if code is None:
    raise ValueError(f"IDX cannot store dtype {array.dtype}")
  header = (
    bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
  )
  return header + array.astype(_IDX_DTYPES[code]).tobytes()


def write_idx(
  path: str | os.PathLike, array: np.ndarray, compress: bool | None = None
) -> None:
  """Writes `array` as an IDX file, gzipped if `compress` (default: `.gz`)."""
  data = encode_idx(array)
  if compress if compress is not None else str(path).endswith(".gz"):
    data = gzip.compress(data)
  with open(path, "wb") as f:
    f.write(data)


def read_idx_file(path: str | os.PathLike) -> np.ndarray:
  """Reads an IDX file, gzipped or not (told apart by content, not name)."""
  with open(path, "rb") as f:
    data = f.read()
  if data[:2] == _GZIP_MAGIC:
    try:
      data = gzip.decompress(data)
    except (OSError, EOFError) as e:
      raise IdxFormatError(f"{path}: corrupt gzip archive ({e})") from e
  return parse_idx(data, str(path))


def _candidates(folder: pathlib.Path, base: str) -> list[pathlib.Path]:
  # `train-images.idx3-ubyte` is the spelling of some re-distributions.
  dotted = base.replace("-idx", ".idx")
  return [folder / f"{b}{ext}" for b in (base, dotted) for ext in (".gz", "")]


def _find(folder: pathlib.Path, base: str) -> pathlib.Path | None:
  return next((p for p in _candidates(folder, base) if p.is_file()), None)


def _missing_files_message(
  folder: pathlib.Path, missing: list[str], why: str
) -> str:
  return (
    f"MNIST: {why} Missing in {folder}: "
    + ", ".join(f"{m}.gz" for m in missing)
    + ". Put the four standard files (gzipped or not) "
    f"{', '.join(base + '.gz' for base, _ in FILES.values())} "
    f"in a folder and {files.how_to_provide('mnist')}; or allow a download "
    f"into {folder} from {MIRRORS[0]} (the md5s are checked)."
  )


def _download(base: str, md5: str, folder: pathlib.Path) -> list[str]:
  """Downloads `base.gz` into `folder`; returns the errors of failed tries."""
  errors = []
  for mirror in MIRRORS:
    try:
      files.download_verified(
        mirror + f"{base}.gz", md5, folder / f"{base}.gz", timeout=60.0
      )
      return []
    except FileNotFoundError as e:
      errors.append(str(e))
  return errors


def _files_in_data_folder(folder: pathlib.Path) -> dict:
  """Split name -> path of its file in a data folder (never downloaded into)."""
  found = {split: _find(folder, base) for split, (base, _) in FILES.items()}
  missing = [FILES[s][0] for s, p in found.items() if p is None]
  if missing:
    raise files.DataNotFoundError(
      _missing_files_message(
        folder,
        missing,
        f"data folder {folder} is incomplete "
        "(data folders are read as they are, never downloaded into).",
      )
    )
  return found


def _files_in_cache(folder: pathlib.Path, download: bool) -> dict:
  """Split name -> path of its file in the cache, downloading if allowed."""
  found, missing, errors = {}, [], []
  for split, (base, md5) in FILES.items():
    path = _find(folder, base)
    if path is None and download:
      errors += _download(base, md5, folder)
      path = _find(folder, base)
    if path is None:
      missing.append(base)
    found[split] = path
  if missing:
    why = (
      (
        "no data_dir given, DATA_DIR unset, and the download failed ("
        + "; ".join(errors)
        + ")."
      )
      if download
      else ("no data_dir given, DATA_DIR unset, and downloads are off.")
    )
    raise files.DataNotFoundError(_missing_files_message(folder, missing, why))
  return found


def _resolve_files(data_dir, cache_dir, download: bool) -> dict:
  """Split name -> path of its file (see the module docstring)."""
  folder = files.data_folder(data_dir, "mnist")
  if folder is not None:
    return _files_in_data_folder(folder)
  cache = pathlib.Path(cache_dir or files.cache_dir("mnist")).expanduser()
  return _files_in_cache(cache, download)


def load_mnist(
  data_dir: str | os.PathLike | None = None,
  cache_dir: str | os.PathLike | None = None,
  download: bool = True,
) -> dict[str, np.ndarray]:
  """Loads MNIST as flat float images in [0, 1] and int32 labels.

  Args:
    data_dir: folder with the four IDX files (gzipped or not). None or "":
      `$DATA_DIR/mnist` if `DATA_DIR` is set, else the download cache.
    cache_dir: where downloads go when no data folder is used (default
      `files.cache_dir("mnist")`).
    download: whether a missing file may be downloaded into the cache.

  Returns:
    A dict with `train_images` (60000, 784) float32, `train_labels` (60000,)
    int32, `test_images` (10000, 784) float32 and `test_labels` (10000,) int32.

  Raises:
    FileNotFoundError: no source has all four files; says what to put where.
    IdxFormatError: a file is corrupt or not MNIST-shaped.
  """
  paths = _resolve_files(data_dir, cache_dir, download)
  arrays = {split: read_idx_file(path) for split, path in paths.items()}
  result = {}
  for part in ("train", "test"):
    images = arrays[f"{part}_images"]
    labels = arrays[f"{part}_labels"]
    if images.ndim != 3 or images.dtype != np.uint8:
      raise IdxFormatError(
        f"{paths[part + '_images']}: expected uint8 images "
        f"(n, rows, cols), got {images.dtype} {images.shape}"
      )
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
      raise IdxFormatError(
        f"{paths[part + '_labels']}: expected {images.shape[0]} labels (one "
        f"per image), got shape {labels.shape}"
      )
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
      raise IdxFormatError(
        f"{paths[part + '_labels']}: labels outside 0..{NUM_CLASSES - 1}"
      )
    result[f"{part}_images"] = images.reshape(images.shape[0], -1).astype(
      np.float32
    ) / np.float32(255.0)
    result[f"{part}_labels"] = labels.astype(np.int32)
  return result
