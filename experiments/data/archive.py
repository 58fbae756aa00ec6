"""Download-and-verify helpers shared by the archive-based loaders.

CIFAR-10 and IMDB come as one canonical `.tar.gz` each; a loader that finds no
data folder downloads it into a cache folder (`$XDG_CACHE_HOME/rtrl_rls/NAME`
or `~/.cache/rtrl_rls/NAME`, never the repository), checks its md5 and only
then renames it into place, so a half-finished download is never mistaken for
the archive.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import tempfile
import urllib.error
import urllib.request


def md5_of(path: str | os.PathLike) -> str:
  """Hex md5 of a file, read in 1 MiB chunks."""
  digest = hashlib.md5()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return digest.hexdigest()


def default_cache_dir(name: str) -> pathlib.Path:
  """`$XDG_CACHE_HOME/rtrl_rls/NAME`, else `~/.cache/rtrl_rls/NAME`."""
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(
      os.path.expanduser("~"), ".cache")
  return pathlib.Path(root) / "rtrl_rls" / name


def download_verified(url: str, md5: str, target: pathlib.Path,
                      timeout: float = 120.0) -> None:
  """Downloads `url` to `target` if the md5 matches.

  Args:
    url: where the canonical archive lives.
    md5: its expected hex md5.
    target: the final path; its folder is created.
    timeout: socket timeout in seconds.

  Raises:
    FileNotFoundError: the download failed or the md5 differs; the message
      names the URL, the target and what to do instead.
  """
  target = pathlib.Path(target)
  target.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".part")
  try:
    with os.fdopen(fd, "wb") as out, urllib.request.urlopen(
        url, timeout=timeout) as response:
      shutil.copyfileobj(response, out)
    got = md5_of(tmp)
    if got != md5:
      raise FileNotFoundError(
          f"Downloaded {url} but its md5 is {got}, expected {md5}; not "
          f"using it. Put the archive at {target} yourself, or pass data_dir.")
    os.replace(tmp, target)
  except (urllib.error.URLError, OSError) as e:
    if isinstance(e, FileNotFoundError) and "md5" in str(e):
      raise
    raise FileNotFoundError(
        f"Could not download {url} into {target} ({e}). Put the archive "
        f"there yourself (md5 {md5}), or pass data_dir / set DATA_DIR.") from e
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def cached_archive(url: str, md5: str, cache_dir: pathlib.Path,
                   download: bool, what: str) -> pathlib.Path:
  """Path of the verified archive in `cache_dir`, downloading it if allowed.

  An archive already in the cache is trusted only if its md5 matches.
  """
  target = pathlib.Path(cache_dir) / url.rsplit("/", 1)[-1]
  if target.is_file():
    if md5_of(target) == md5:
      return target
    if not download:
      raise FileNotFoundError(f"{what}: {target} has the wrong md5 (expected "
                              f"{md5}); delete it or pass data_dir.")
  if not download:
    raise FileNotFoundError(
        f"{what}: no data_dir given, DATA_DIR unset, {target} absent and "
        f"downloads are off. Pass data_dir, or allow the download of {url}.")
  download_verified(url, md5, target)
  return target
