"""Missing or broken data is one message naming the file or folder and what
to do, raised as the loop's `RunError`s (`DataNotFoundError`,
`DataFormatError`), which the mains print without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import REPO_ROOT
import pytest

from experiments import data
from experiments.loop import errors

SPLITS = {"train": "a b c\n", "valid": "a b\n", "test": "c a\n"}


def write_ptb(folder, **texts: bytes) -> None:
  folder.mkdir(exist_ok=True)
  for split, text in SPLITS.items():
    path = folder / data.ptb.FILE_NAMES[split]
    path.write_bytes(texts.get(split, text.encode()))


def load(split, folder):
  return data.load_ptb_split(split, str(folder), verify_md5=False)


def test_non_utf8_byte_names_file_line_and_column(tmp_path):
  write_ptb(tmp_path, train=b"a b\nc \xff d\n")
  with pytest.raises(errors.DataFormatError) as error:
    load("train", tmp_path)
  message = str(error.value)
  assert f"{tmp_path / 'ptb.char.train.txt'}:2:3: byte 0xff" in message
  assert "md5 874909f99060142f6b88cc74c34baaa2" in message
  assert isinstance(error.value, ValueError)  # What callers caught before.


@pytest.mark.parametrize("text", [b"", b"\n\n  \n"])
def test_empty_split_is_refused(tmp_path, text):
  """The issue's case: an empty validation file gave a 'best valid BPC'
  from the one end-of-line symbol the encoder adds."""
  write_ptb(tmp_path, valid=text)
  with pytest.raises(errors.DataFormatError, match="valid.txt holds no text"):
    load("valid", tmp_path)
  assert load("train", tmp_path).size > 0  # The other splits load.


def test_missing_folder_is_one_line_naming_it_and_the_remedy(tmp_path):
  folder = tmp_path / "nowhere"
  with pytest.raises(errors.DataNotFoundError) as error:
    load("train", folder)
  message = str(error.value)
  assert "\n" not in message and str(folder) in message
  assert "--config.data_dir=FOLDER" in message and "DATA_DIR" in message
  assert isinstance(error.value, FileNotFoundError)


def test_missing_mnist_is_one_line(tmp_path):
  with pytest.raises(errors.DataNotFoundError) as error:
    data.load_mnist(tmp_path)
  message = str(error.value)
  assert "\n" not in message and str(tmp_path) in message
  assert "train-images-idx3-ubyte.gz" in message and "DATA_DIR" in message


def test_format_errors_are_data_format_errors():
  for error in (data.mnist.IdxFormatError, data.cifar10.CifarFormatError):
    assert issubclass(error, errors.DataFormatError)
    assert issubclass(error, ValueError)


def test_command_line_prints_missing_data_without_traceback(tmp_path):
  """52 item 5: a missing dataset is one line naming the folder and how to
  get the files."""
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.ptb",
      "--config",
      "configs/ptb.py:small",
      "--workdir",
      str(tmp_path / "run"),
      f"--config.data_dir={tmp_path / 'nowhere'}",
    ],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "JAX_PLATFORMS": "cpu"},
  )
  assert result.returncode == 2
  assert "Traceback" not in result.stderr
  (line,) = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
  assert f"char-PTB files not found in {tmp_path / 'nowhere'}" in line
  assert "--config.data_dir=FOLDER" in line
