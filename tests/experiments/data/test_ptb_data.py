"""Char-PTB files (experiments/data/ptb.py): where they are found, md5,
download, and the errors that name the files.

Counts and vocabulary are checked on the real files (skipped when
../shared/data/ptb is absent); the rest on small hand-made files. The
symbols and streams are tested in tests/rtrl/tasks/test_ptb_streams.py.
"""

import pathlib
import re
import shutil
import tarfile

from conftest import dataset_dir_or_skip
import numpy as np
import pytest

from experiments import data
from rtrl.tasks import ptb

pytestmark = pytest.mark.usefixtures("no_data_dir_env")

TEXT = "a b _ c\n d e\n "  # valid symbols, not a canonical file


def write_split(folder: pathlib.Path, split: str, text: str) -> pathlib.Path:
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / data.ptb.FILE_NAMES[split]
  path.write_text(text)
  return path


def test_real_files_counts_vocabulary_and_round_trip():
  folder = dataset_dir_or_skip("ptb")
  seen = set()
  for split in data.ptb.SPLITS:
    ids = data.load_ptb_split(split, str(folder))
    assert ids.shape == (data.ptb.NUM_SYMBOLS[split],), split
    assert ids.dtype == np.uint8
    seen |= set(np.unique(ids).tolist())
    if split == "train":
      # The 49 symbols that occur, plus end-of-line: the whole vocabulary.
      assert sorted(np.unique(ids).tolist()) == list(range(50))
      text = (folder / data.ptb.FILE_NAMES[split]).read_text()
      decoded = ptb.decode(ids)
      # Same symbols line by line, and encode inverts decode exactly.
      assert decoded.split("\n") == [
        " ".join(line.split()) for line in text.split("\n")
      ]
      np.testing.assert_array_equal(ptb.encode(decoded), ids)
  assert ptb.VOCAB_SIZE == 50 and len(seen) == 50
  assert ptb.VOCAB[ptb.EOL_ID] == "\n"


def test_official_layout_counts_on_the_real_files():
  """The official OK code's data: 2 symbols more per non-empty line."""
  folder = dataset_dir_or_skip("ptb")
  for split in data.ptb.SPLITS:
    standard = data.load_ptb_split(split, str(folder))
    official = data.load_ptb_split(split, str(folder), layout="official")
    assert official.shape == (data.ptb.NUM_SYMBOLS_OFFICIAL[split],), split
    lines = [
      line
      for line in (folder / data.ptb.FILE_NAMES[split]).read_text().split("\n")
      if line.split()
    ]
    empty = data.ptb.NUM_SYMBOLS[split] - sum(
      len(line.split()) + 1 for line in lines
    )
    assert official.size == standard.size - empty + 2 * len(lines)


def test_missing_file_names_files_and_where(tmp_path):
  write_split(tmp_path, "train", TEXT)
  with pytest.raises(
    FileNotFoundError,
    match=r"ptb\.char\.valid\.txt.*"
    r"ptb\.char\.test\.txt",
  ) as info:
    data.load_ptb_split("train", str(tmp_path))
  assert "config.data_dir" in str(info.value)
  assert "DATA_DIR" in str(info.value)


def test_no_files_anywhere_and_no_download(tmp_path, monkeypatch):
  monkeypatch.setenv(data.files.CACHE_ENV, str(tmp_path / "cache"))
  with pytest.raises(FileNotFoundError, match="ptb.char.train.txt"):
    data.ptb.find_data_dir(None, allow_download=False)


def test_data_dir_env_without_the_files_is_an_error_not_a_download(
  tmp_path, monkeypatch
):
  monkeypatch.setenv("DATA_DIR", str(tmp_path / "nothing"))

  def no_download(*args):
    raise AssertionError(f"downloaded {args} although DATA_DIR is set")

  monkeypatch.setattr(data.ptb, "download", no_download)
  with pytest.raises(
    FileNotFoundError,
    match=re.escape(f"in {tmp_path / 'nothing' / 'ptb'} ")
    + r".*ptb\.char\.train\.txt",
  ):
    data.ptb.find_data_dir(None)


def test_corrupt_file_fails_md5(tmp_path):
  folder = dataset_dir_or_skip("ptb")
  for split in data.ptb.SPLITS:
    shutil.copy(folder / data.ptb.FILE_NAMES[split], tmp_path)
  valid = tmp_path / data.ptb.FILE_NAMES["valid"]
  contents = bytearray(valid.read_bytes())
  contents[100] = ord("q") if contents[100] != ord("q") else ord("z")
  valid.write_bytes(bytes(contents))
  data.load_ptb_split("test", str(tmp_path))  # untouched split still loads
  with pytest.raises(ValueError, match=r"ptb\.char\.valid\.txt.*md5"):
    data.load_ptb_split("valid", str(tmp_path))
  # The same bytes load when the check is off (still valid symbols).
  assert (
    data.load_ptb_split("valid", str(tmp_path), verify_md5=False).size
    == data.ptb.NUM_SYMBOLS["valid"]
  )


def test_out_of_vocabulary_symbol_names_file_line_symbol(tmp_path):
  path = write_split(tmp_path, "valid", "a b\nc D e\n")
  with pytest.raises(
    ValueError,
    match=r"ptb\.char\.valid\.txt, line 2: "
    r"symbol 'D'",
  ):
    data.ptb.read_file(path)


def test_bad_split():
  with pytest.raises(ValueError, match="split"):
    data.load_ptb_split("training")


def make_archive(path: pathlib.Path, files: dict) -> str:
  """An uncompressed tar laid out like simple-examples.tgz; a file:// URL."""
  with tarfile.open(path, "w") as tar:
    for name, source in files.items():
      tar.add(source, arcname=f"./{data.ptb.ARCHIVE_DIR}/{name}")
  return path.as_uri()


def test_download_checks_md5_and_writes_nothing_on_mismatch(tmp_path):
  sources = {
    name: write_split(tmp_path / "src", split, TEXT)
    for split, name in data.ptb.FILE_NAMES.items()
  }
  url = make_archive(tmp_path / "fake.tar", sources)
  with pytest.raises(ValueError, match=r"ptb\.char\.train\.txt.*md5"):
    data.ptb.download(tmp_path / "cache", url)
  assert not (tmp_path / "cache").exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.tar", "src"]


def test_download_into_cache_and_found_there(tmp_path, monkeypatch):
  folder = dataset_dir_or_skip("ptb")
  url = make_archive(
    tmp_path / "simple-examples.tar",
    {name: folder / name for name in data.ptb.FILE_NAMES.values()},
  )
  monkeypatch.setenv(data.files.CACHE_ENV, str(tmp_path / "cache"))
  monkeypatch.setattr(data.ptb, "ARCHIVE_URL", url)
  found = data.ptb.find_data_dir(None)
  assert found == tmp_path / "cache" / "ptb"
  assert data.load_ptb_split("valid").size == data.ptb.NUM_SYMBOLS["valid"]
  # $DATA_DIR/ptb comes first when it holds the files.
  monkeypatch.setenv("DATA_DIR", str(folder.parent))
  assert data.ptb.find_data_dir(None) == folder
