"""Where dataset files come from (experiments/data/files.py): the cache root,
the DATA_DIR convention, and downloads that are md5-checked and leave no
half-written file. Downloads read file:// URLs (no network)."""

import hashlib
import pathlib

import pytest

from experiments.data import files

pytestmark = pytest.mark.usefixtures("no_data_dir_env")

PAYLOAD = b"the canonical archive"
PAYLOAD_MD5 = hashlib.md5(PAYLOAD).hexdigest()


def served(tmp_path: pathlib.Path) -> str:
  """A file:// URL that serves PAYLOAD."""
  path = tmp_path / "server" / "archive.tar.gz"
  path.parent.mkdir()
  path.write_bytes(PAYLOAD)
  return path.as_uri()


def test_cache_root_one_for_all_datasets(tmp_path, monkeypatch):
  monkeypatch.delenv(files.CACHE_ENV, raising=False)
  monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert files.cache_dir("ptb") == tmp_path / "home/.cache/rtrl_rls/ptb"
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert files.cache_dir("mnist") == tmp_path / "xdg/rtrl_rls/mnist"
  monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "mine"))
  assert files.cache_dir("imdb") == tmp_path / "mine/imdb"


def test_data_folder_is_data_dir_else_data_dir_env(tmp_path, monkeypatch):
  assert files.data_folder(None, "cifar10") is None
  assert files.data_folder("", "cifar10") is None  # a config's default
  monkeypatch.setenv("DATA_DIR", str(tmp_path))
  assert files.data_folder("", "cifar10") == tmp_path / "cifar10"
  assert files.data_folder(tmp_path / "x", "cifar10") == tmp_path / "x"


def test_download_verified_writes_the_file(tmp_path):
  target = tmp_path / "cache" / "archive.tar.gz"
  files.download_verified(served(tmp_path), PAYLOAD_MD5, target)
  assert target.read_bytes() == PAYLOAD
  assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_md5_mismatch_is_a_clear_error_and_leaves_nothing(tmp_path):
  url = served(tmp_path)
  target = tmp_path / "cache" / "archive.tar.gz"
  with pytest.raises(
    FileNotFoundError, match=f"{url}: md5 {PAYLOAD_MD5} != expected 0+"
  ):
    files.download_verified(url, "0" * 32, target)
  assert not list(target.parent.iterdir())  # no archive, no .part


def test_failed_download_names_the_url_and_leaves_nothing(tmp_path):
  url = (tmp_path / "absent.tar.gz").as_uri()
  target = tmp_path / "cache" / "archive.tar.gz"
  with pytest.raises(FileNotFoundError, match=f"could not download {url}"):
    files.download_verified(url, PAYLOAD_MD5, target)
  assert not list(target.parent.iterdir())


def test_cached_archive_downloads_once_and_checks_the_cached_md5(tmp_path):
  url = served(tmp_path)
  cache = tmp_path / "cache"
  path = files.cached_archive(url, PAYLOAD_MD5, cache, True, "TEST")
  assert path == cache / "archive.tar.gz" and path.read_bytes() == PAYLOAD
  (tmp_path / "server" / "archive.tar.gz").unlink()
  assert files.cached_archive(url, PAYLOAD_MD5, cache, False, "TEST") == path
  path.write_bytes(b"corrupt")
  with pytest.raises(FileNotFoundError, match="TEST: .*wrong md5"):
    files.cached_archive(url, PAYLOAD_MD5, cache, False, "TEST")
  with pytest.raises(
    FileNotFoundError,
    match=f"TEST: could not download {url}.*Put the archive at {path} yourself",
  ):
    files.cached_archive(url, PAYLOAD_MD5, cache, True, "TEST")


def test_no_archive_and_no_download_says_what_to_do(tmp_path):
  with pytest.raises(FileNotFoundError, match="downloads are off.*data_dir"):
    files.cached_archive(
      "https://example.org/a.tar.gz", PAYLOAD_MD5, tmp_path, False, "TEST"
    )
