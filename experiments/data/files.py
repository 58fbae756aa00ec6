"""Where every dataset's files come from, and how they are downloaded.

Each loader (`ptb`, `mnist`, `cifar10`, `imdb`) reads, in order:

1. `data_dir`, when given (a config's `data_dir`; `""` or None: not given);
2. `$DATA_DIR/NAME`, when the `DATA_DIR` environment variable is set (the
   layout of `../shared/data`);
3. the download cache `cache_dir(NAME)`: `$RTRL_RLS_CACHE_DIR/NAME`, else
   `$XDG_CACHE_HOME/rtrl_rls/NAME`, else `~/.cache/rtrl_rls/NAME` (never the
   repository). Canonical archives are downloaded there and their md5 checked
   before they are renamed into place, so a half-finished or corrupt download
   is never mistaken for the archive.

Data folders (1 and 2) are read as they are, never downloaded into; when
their files are missing, the error names the files and where to put them.

Missing files raise `DataNotFoundError` (a `FileNotFoundError`), a file not
in its format `DataFormatError` (a `ValueError`): both are
`experiments.loop.errors.RunError`s, which the mains print as one message
without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import hashlib
import os
import pathlib
import shutil
import tempfile
import urllib.error
import urllib.request

# Re-exported: the loaders raise these.
from experiments.loop.errors import DataFormatError as DataFormatError
from experiments.loop.errors import DataNotFoundError as DataNotFoundError

CACHE_ENV = "RTRL_RLS_CACHE_DIR"


def md5_of(path: str | os.PathLike) -> str:
  """Hex md5 of a file, read in 1 MiB chunks."""
  digest = hashlib.md5()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return digest.hexdigest()


def cache_dir(name: str) -> pathlib.Path:
  """The download cache of dataset `name` (see the module docstring)."""
  if os.environ.get(CACHE_ENV):
    return pathlib.Path(os.environ[CACHE_ENV]).expanduser() / name
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(
    os.path.expanduser("~"), ".cache"
  )
  return pathlib.Path(root) / "rtrl_rls" / name


def data_folder(
  data_dir: str | os.PathLike | None, name: str
) -> pathlib.Path | None:
  """`data_dir` if given, else `$DATA_DIR/NAME` if set, else None (cache)."""
  if data_dir:
    return pathlib.Path(data_dir).expanduser()
  if os.environ.get("DATA_DIR"):
    return pathlib.Path(os.environ["DATA_DIR"]).expanduser() / name
  return None


def how_to_provide(name: str) -> str:
  """The end of every "files not found" error: where the files may go."""
  return (
    f"pass that folder as data_dir (--config.data_dir=FOLDER), or set "
    f"DATA_DIR so that $DATA_DIR/{name} is that folder"
  )


def listing(folder: pathlib.Path) -> str:
  """What a folder holds, for error messages."""
  if not folder.is_dir():
    return "the folder does not exist"
  return str(sorted(p.name for p in folder.iterdir()))


@contextlib.contextmanager
def fetched(
  url: str, folder: str | os.PathLike, timeout: float = 120.0
) -> Iterator[pathlib.Path]:
  """Downloads `url` into a temporary file in `folder`, removed on exit.

  Raises:
    FileNotFoundError: the download failed (names the URL and the cause).
  """
  fd, tmp = tempfile.mkstemp(dir=folder, suffix=".part")
  try:
    try:
      with (
        os.fdopen(fd, "wb") as out,
        urllib.request.urlopen(url, timeout=timeout) as response,
      ):
        shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError, ValueError) as e:
      raise DataNotFoundError(f"could not download {url} ({e})") from e
    yield pathlib.Path(tmp)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def download_verified(
  url: str, md5: str, target: pathlib.Path, timeout: float = 120.0
) -> None:
  """Downloads `url` to `target` if its md5 matches; else writes nothing.

  Raises:
    FileNotFoundError: the download failed or the md5 differs (names the URL
      and the cause; what to do instead is the caller's to say).
  """
  target = pathlib.Path(target)
  target.parent.mkdir(parents=True, exist_ok=True)
  with fetched(url, target.parent, timeout) as tmp:
    got = md5_of(tmp)
    if got != md5:
      raise DataNotFoundError(f"{url}: md5 {got} != expected {md5}")
    os.replace(tmp, target)


def cached_archive(
  url: str, md5: str, cache: pathlib.Path, download: bool, what: str
) -> pathlib.Path:
  """Path of the verified archive in `cache`, downloading it if allowed.

  An archive already in the cache is trusted only if its md5 matches.
  """
  target = pathlib.Path(cache) / url.rsplit("/", 1)[-1]
  if target.is_file():
    if md5_of(target) == md5:
      return target
    if not download:
      raise DataNotFoundError(
        f"{what}: {target} has the wrong md5 (expected "
        f"{md5}); delete it or pass data_dir."
      )
  if not download:
    raise DataNotFoundError(
      f"{what}: no data_dir given, DATA_DIR unset, {target} absent and "
      f"downloads are off. Pass data_dir, or allow the download of {url}."
    )
  try:
    download_verified(url, md5, target)
  except FileNotFoundError as e:
    raise DataNotFoundError(
      f"{what}: {e}. Put the archive at {target} yourself "
      f"(md5 {md5}), or pass data_dir / set DATA_DIR."
    ) from e
  return target
