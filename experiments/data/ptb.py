"""Character-level Penn Treebank files (Mikolov et al. 2012 split).

The standard files `ptb.char.{train,valid,test}.txt` hold one sentence per
line, symbols separated by spaces and `_` between words; `rtrl.tasks.ptb`
encodes them (50 symbols, end-of-line included), which gives the standard
counts 5,017,483 / 393,043 / 442,424, or, with `layout="official"`, as the
official OK code's data (a word separator at both ends of every line:
5,101,618 / 399,782 / 449,945; see `rtrl.tasks.ptb`).

The folder holding the three files is found as for every dataset (see
`files`): `data_dir`, else `$DATA_DIR/ptb`, else the cache
(`files.cache_dir("ptb")`), where Mikolov's archive `simple-examples.tgz` is
downloaded and the three files extracted. Every file is checked against its
canonical md5 unless `verify_md5=False`.

Reference:
  Mikolov et al., "Subword language modeling with neural networks", 2012.
"""

from __future__ import annotations

import functools
import os
import pathlib
import tarfile
import tempfile

import numpy as np

from experiments.data import files
from rtrl.tasks import ptb

SPLITS = ("train", "valid", "test")
FILE_NAMES = {split: f"ptb.char.{split}.txt" for split in SPLITS}
NUM_SYMBOLS = {"train": 5_017_483, "valid": 393_043, "test": 442_424}
NUM_SYMBOLS_OFFICIAL = {"train": 5_101_618, "valid": 399_782, "test": 449_945}
MD5 = {
  "train": "874909f99060142f6b88cc74c34baaa2",
  "valid": "9e0fe5bec2a8bf43fd686dc23d5ab8bb",
  "test": "1f9a2d1afe00f76e8bfbe09a65439681",
}
ARCHIVE_URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
ARCHIVE_DIR = "simple-examples/data"  # where the archive keeps the files


def read_file(
  path,
  split: str | None = None,
  verify_md5: bool = False,
  layout: str = "standard",
) -> np.ndarray:
  """Encodes one file in `layout` (`rtrl.tasks.ptb.LAYOUTS`); with
  `verify_md5` (needs `split`) checks it first.

  Raises:
    DataNotFoundError: no such file.
    DataFormatError: md5 mismatch, a byte that is not UTF-8, no text, or a
      symbol outside the vocabulary (each names the file).
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise files.DataNotFoundError(f"char-PTB file {path} not found")
  if verify_md5:
    actual = files.md5_of(path)
    if actual != MD5[split]:
      raise files.DataFormatError(
        f"{path} has md5 {actual}, but the canonical {FILE_NAMES[split]} "
        f"has {MD5[split]}: the file is corrupt or not the standard one. "
        "Replace it (or delete it to re-download), or pass "
        "verify_md5=False (config.verify_md5=False) to use it anyway."
      )
  text = _read_text(path, split)
  try:
    return ptb.encode(text, source=str(path), layout=layout)
  except ValueError as e:  # A symbol outside the vocabulary.
    raise files.DataFormatError(str(e)) from e


def _read_text(path: pathlib.Path, split: str | None) -> str:
  """The file's text.

  Raises:
    DataFormatError: a byte that is not UTF-8 (line and column named), or
      no text at all.
  """
  data = path.read_bytes()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
    raise files.DataFormatError(
      f"{path}:{line}:{column}: byte 0x{data[e.start]:02x} is not UTF-8 "
      f"({e.reason}); char-PTB files are UTF-8 text. Replace it with the "
      f"standard {FILE_NAMES.get(split or '', 'file')} (md5 "
      f"{MD5.get(split or '', 'in experiments/data/ptb.py')})."
    ) from e
  if not text.strip():
    raise files.DataFormatError(
      f"{path} holds no text ({len(data)} bytes): a char-PTB split needs "
      "at least one line of symbols."
    )
  return text


def _extract_verified(
  archive: pathlib.Path, url: str, into: pathlib.Path
) -> None:
  """Writes the three files of `archive` into `into`, checking each md5.

  Raises:
    DataFormatError: a file is missing from the archive or has the wrong
      md5.
  """
  with tarfile.open(archive, mode="r:*") as tar:
    members = {m.name.lstrip("./"): m for m in tar.getmembers()}
    for split, name in FILE_NAMES.items():
      member = members.get(f"{ARCHIVE_DIR}/{name}")
      if member is None:
        raise files.DataFormatError(f"{url} holds no {ARCHIVE_DIR}/{name}")
      path = into / name
      path.write_bytes(tar.extractfile(member).read())
      got = files.md5_of(path)
      if got != MD5[split]:
        raise files.DataFormatError(
          f"{name} from {url} has md5 {got}, expected {MD5[split]}"
        )


def download(target_dir, url: str) -> pathlib.Path:
  """Fetches the archive at `url` and extracts the three char-PTB files into
  `target_dir`, after checking each one's md5 (nothing is written otherwise).

  Raises:
    DataNotFoundError: the download failed.
    DataFormatError: a file is missing from the archive or has the wrong
      md5.
  """
  target_dir = pathlib.Path(target_dir)
  target_dir.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=target_dir.parent) as tmp:
    with files.fetched(url, tmp, timeout=60) as archive:
      _extract_verified(archive, url, pathlib.Path(tmp))
    target_dir.mkdir(exist_ok=True)
    for name in FILE_NAMES.values():
      os.replace(os.path.join(tmp, name), target_dir / name)
  return target_dir


def _missing(folder: pathlib.Path) -> list[str]:
  return [n for n in FILE_NAMES.values() if not (folder / n).is_file()]


def _missing_message(where: str) -> str:
  names = ", ".join(FILE_NAMES.values())
  return (
    f"char-PTB files not found {where}. Put {names} (Mikolov's split, "
    f"from {ARCHIVE_URL}, folder {ARCHIVE_DIR}) in a folder and "
    f"{files.how_to_provide('ptb')}."
  )


def find_data_dir(
  data_dir: str | None = None, allow_download: bool = True
) -> pathlib.Path:
  """The folder holding the three files (see the module docstring).

  Raises:
    DataNotFoundError: naming the folder, the files and where to put them.
  """
  folder = files.data_folder(data_dir, "ptb")
  if folder is not None:
    if _missing(folder):
      raise files.DataNotFoundError(
        _missing_message(f"in {folder} (missing: {_missing(folder)})")
      )
    return folder
  cache = files.cache_dir("ptb")
  if not _missing(cache):
    return cache
  if not allow_download:
    raise files.DataNotFoundError(
      _missing_message(f"in {cache} (DATA_DIR unset, downloads off)")
    )
  try:
    print(f"Downloading char-PTB from {ARCHIVE_URL} into {cache} ...")
    return download(cache, ARCHIVE_URL)
  except FileNotFoundError as e:
    raise files.DataNotFoundError(
      _missing_message(f"in {cache}, and the download failed ({e})")
    ) from e


@functools.lru_cache(maxsize=8)
def _load_split_cached(
  folder: str, split: str, verify_md5: bool, mtime: float, layout: str
) -> np.ndarray:
  del mtime  # part of the cache key only
  ids = read_file(
    pathlib.Path(folder) / FILE_NAMES[split], split, verify_md5, layout
  )
  ids.setflags(write=False)
  return ids


def load_ptb_split(
  split: str,
  data_dir: str | None = None,
  verify_md5: bool = True,
  layout: str = "standard",
) -> np.ndarray:
  """`(num_symbols,)` uint8 ids of one split ('train', 'valid' or 'test'),
  in `layout` ("standard", or "official": the official OK code's data).

  Cached per file (and its modification time) and layout."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  ptb.check_layout(layout)
  folder = find_data_dir(data_dir)
  path = folder / FILE_NAMES[split]
  return _load_split_cached(
    str(folder), split, bool(verify_md5), path.stat().st_mtime, layout
  )
