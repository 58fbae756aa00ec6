"""Every write into a run directory, so that a failed one leaves nothing
half-done.

`write_atomic` writes a whole file (config, checkpoint, summary) through a
temporary file, fsync and rename: a crash leaves the old file or the new
one. A write that fails (a full disk, a read-only file system, no
permission) removes its temporary file and raises `WorkdirWriteError`: one
line naming the path, the reason and, for a full disk, the bytes needed
and the bytes free. `metrics_log.py` appends the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
import contextlib
import errno
import os
import shutil
from typing import Any

import jax
import numpy as np

from experiments.loop.errors import WorkdirWriteError

TMP_SUFFIX = ".tmp"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def to_jsonable(value: Any) -> Any:
  """`value` with ConfigDicts, mappings, tuples and arrays made plain JSON
  types (non-finite floats stay floats: see `metrics_log.encode`)."""
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, Mapping):
    return {str(k): to_jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_jsonable(v) for v in value]
  if isinstance(value, (np.generic, np.ndarray, jax.Array)):
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array.tolist()
  return value


def free_bytes(path: str) -> int | None:
  """Bytes free to this user on the file system of `path` (or of its
  nearest existing parent); None if unknown."""
  path = os.path.abspath(path)
  while not os.path.exists(path) and os.path.dirname(path) != path:
    path = os.path.dirname(path)
  try:
    return shutil.disk_usage(path).free
  except OSError:
    return None


def write_error(
  error: OSError, path: str, needed: int | None
) -> WorkdirWriteError:
  """The `WorkdirWriteError` for `error`, raised while writing `needed`
  bytes to `path`."""
  if error.errno in _NO_SPACE:
    free = free_bytes(path)
    space = f"needs {needed:,} bytes" if needed is not None else "needs space"
    if free is not None:
      space += f", {free:,} free"
    reason = f"no space left on the device ({space})"
  elif error.errno == errno.EROFS:
    reason = "the file system is read-only"
  elif error.errno in (errno.EACCES, errno.EPERM):
    reason = "permission denied"
  else:
    reason = error.strerror or str(error)
  return WorkdirWriteError(f"cannot write {path}: {reason}")


def remove_quietly(path: str) -> None:
  """Removes `path` if it exists (cleanup after a failed write)."""
  with contextlib.suppress(OSError):
    os.remove(path)


def fsync_dir(path: str) -> None:
  """Makes a rename or a removal in directory `path` durable."""
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:  # Not every platform opens directories.
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def write_all(fd: int, data: bytes) -> None:
  """Writes all of `data` to the file descriptor `fd` (the one place every
  workdir byte goes through: the fault-injection tests replace it)."""
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view) :]


def write_atomic(path: str, data: bytes) -> None:
  """Writes `data` to a temporary file, fsyncs it, renames it onto `path`
  and fsyncs the directory: a crash leaves the old file or the new one.

  Raises:
    WorkdirWriteError: the write failed; the temporary file is removed and
      `path` is as it was.
  """
  tmp = path + TMP_SUFFIX
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
      write_all(fd, data)
      os.fsync(fd)
    finally:
      os.close(fd)
    os.replace(tmp, path)
  except OSError as e:
    remove_quietly(tmp)
    raise write_error(e, path, len(data)) from e
  fsync_dir(os.path.dirname(os.path.abspath(path)))


def make_dirs(path: str) -> None:
  """`os.makedirs(path, exist_ok=True)`, a failure as `WorkdirWriteError`."""
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise write_error(e, path, None) from e


def remove_stray_temporaries(workdir: str, log=print) -> None:
  """Removes the temporary files (`*.tmp`) a killed writer left behind;
  only the lock's holder calls this, so none is in use."""
  if not os.path.isdir(workdir):
    return
  for name in sorted(os.listdir(workdir)):
    if name.endswith(TMP_SUFFIX):
      remove_quietly(os.path.join(workdir, name))
      log(f"Removed {name}, left by an interrupted write.")
