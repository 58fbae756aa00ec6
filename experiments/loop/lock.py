"""One writer per run directory: `acquire(workdir)`.

The contract (the run loop, `scripts/reproduce.py` and the SLURM launcher
rely on it):

* **Taken atomically.** `acquire` writes the holder's record to a
  temporary file and hard-links it to `workdir/LOCK_FILE` (`link(2)` fails
  if the name exists: atomic on a local disk and on NFS, Lustre and GPFS).
  The record is JSON: `host`, `pid`, `started` (Unix time), `token` (unique
  per acquisition), `argv`, and `slurm_job_id` / `slurm_restart_count` when
  SLURM set them.
* **Kept alive.** The holder refreshes the lock file's modification time
  (the heartbeat) every `heartbeat_every` seconds from a daemon thread, and
  whenever `refresh()` is called (the run loop calls it at every record and
  checkpoint). `refresh()` raises `WorkdirLockedError` if the file no longer
  holds this acquisition's token (another process judged it stale and took
  it over): the holder then stops rather than write beside the new one.
* **Stale** (taken over at once, with a warning naming the old holder)
  when any of: the holder ran on this host and its pid is not alive (or is
  a newer process with that pid); the heartbeat is older than
  `stale_after` seconds (a holder on another host that died; clocks must
  agree to well within `stale_after`); the holder is an earlier run of this
  same SLURM job (same `SLURM_JOB_ID`, smaller `SLURM_RESTART_COUNT`: a
  requeued job whose first node is gone).
* **Refused** otherwise: `WorkdirLockedError` naming the holder's host, pid,
  start time and heartbeat age. With `wait` > 0, `acquire` first polls for
  up to `wait` seconds for the holder to release or go stale.
* **Released** by `release()` (the file is removed only if it still holds
  this acquisition's token), by leaving the `with` block, on a normal end,
  on `Preempted` and on errors. A process killed by SIGKILL leaves the file;
  the rules above make it stale.

Multi-host runs: only process 0 writes, so only process 0 takes the lock
(the run loop tells the other processes if it failed).

Failures to write the lock (a read-only or full disk) raise
`WorkdirWriteError` naming the path.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from typing import Any
import uuid
import warnings

from experiments.loop import writes
from experiments.loop.errors import WorkdirLockedError

LOCK_FILE = "workdir.lock"
HEARTBEAT_EVERY_S = 30.0
# Ten heartbeats: NFS caches attributes for up to a minute.
STALE_AFTER_S = 300.0


def _process_start(pid: int) -> str | None:
  """The kernel's start time of `pid` (Linux `/proc/PID/stat` field 22), to
  tell a reused pid from the holder; None where unavailable."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[19]
  except (OSError, IndexError):
    return None


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Alive, another user's.
    return True
  return True


def holder_record() -> dict[str, Any]:
  """This process's record (see the module docstring)."""
  record: dict[str, Any] = {
    "host": socket.gethostname(),
    "pid": os.getpid(),
    "process_start": _process_start(os.getpid()),
    "started": time.time(),
    "token": uuid.uuid4().hex,
    "argv": list(sys.argv),
  }
  for key in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT"):
    if os.environ.get(key):
      record[key.lower()] = os.environ[key]
  return record


def describe(holder: dict[str, Any], age: float | None) -> str:
  """'host H, pid P, started ..., heartbeat N s ago' for messages."""
  started = holder.get("started")
  when = (
    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    if isinstance(started, (int, float))
    else "?"
  )
  parts = [
    f"host {holder.get('host', '?')}",
    f"pid {holder.get('pid', '?')}",
    f"started {when}",
  ]
  if holder.get("slurm_job_id"):
    parts.append(f"SLURM job {holder['slurm_job_id']}")
  if age is not None:
    parts.append(f"heartbeat {age:.0f} s ago")
  return ", ".join(parts)


def stale_reason(
  holder: dict[str, Any], age: float, me: dict[str, Any], stale_after: float
) -> str | None:
  """Why the lock of `holder` (heartbeat `age` seconds old) may be taken
  over by `me`, or None if it is held."""
  if age > stale_after:
    return f"no heartbeat for {age:.0f} s (> {stale_after:.0f} s)"
  pid = holder.get("pid")
  if holder.get("host") == me["host"] and isinstance(pid, int):
    if not _pid_alive(pid):
      return f"pid {pid} is not running on this host"
    start = holder.get("process_start")
    if start is not None and _process_start(pid) not in (None, start):
      return f"pid {pid} is now another process"
  job = holder.get("slurm_job_id")
  if job and job == me.get("slurm_job_id"):
    try:
      if int(holder.get("slurm_restart_count", 0)) < int(
        me.get("slurm_restart_count", 0)
      ):
        return f"an earlier run of SLURM job {job} (requeued since)"
    except ValueError:
      pass
  return None


def _read(path: str) -> tuple[dict[str, Any], float] | None:
  """`(record, heartbeat age in s)` of the lock at `path`; None without
  one. An unreadable record (a crash mid-write cannot make one: the file
  appears complete) counts as an unknown holder."""
  try:
    fd = os.open(path, os.O_RDONLY)
  except FileNotFoundError:
    return None
  with os.fdopen(fd) as f:
    age = time.time() - os.fstat(f.fileno()).st_mtime
    try:
      record = json.loads(f.read())
    except ValueError:
      record = {}
  return (record if isinstance(record, dict) else {}), max(age, 0.0)


class WorkdirLock:
  """A held lock (see the module docstring); a context manager."""

  def __init__(self, path: str, record: dict[str, Any], heartbeat_every: float):
    self.path = path
    self.record = record
    self.lost: str | None = None
    self._stop = threading.Event()
    self._thread = threading.Thread(
      target=self._beat, args=(heartbeat_every,), daemon=True
    )
    self._thread.start()

  def _still_mine(self) -> bool:
    found = _read(self.path)
    if found is not None and found[0].get("token") == self.record["token"]:
      return True
    self.lost = (
      describe(*found) if found is not None else "nobody (the file is gone)"
    )
    return False

  def _beat(self, every: float) -> None:
    while not self._stop.wait(every):
      try:
        if self._still_mine():
          os.utime(self.path)
      except OSError:  # A full disk must not kill the heartbeat.
        pass

  def refresh(self) -> None:
    """Refreshes the heartbeat.

    Raises:
      WorkdirLockedError: another process took the lock over.
    """
    if self.lost is None and self._still_mine():
      with contextlib.suppress(OSError):
        os.utime(self.path)
    if self.lost is not None:
      raise WorkdirLockedError(
        f"{self.path} was taken over by {self.lost} (it judged this "
        "process stale); stopping so that one process writes this workdir"
      )

  def release(self) -> None:
    """Stops the heartbeat and removes the lock if it is still ours."""
    self._stop.set()
    if self._thread.is_alive():
      self._thread.join()
    with contextlib.suppress(OSError):
      if self._still_mine():
        os.remove(self.path)

  def __enter__(self) -> WorkdirLock:
    return self

  def __exit__(self, *exc) -> bool:
    self.release()
    return False


def _create(path: str, record: dict[str, Any]) -> bool:
  """Links a file holding `record` to `path`; False if `path` exists."""
  # Not `*.tmp`: the holder sweeps those (`writes.remove_stray_temporaries`).
  tmp = f"{path}.{record['token']}.new"
  data = json.dumps(record, sort_keys=True).encode()
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
      writes.write_all(fd, data)
      os.fsync(fd)
    finally:
      os.close(fd)
    os.link(tmp, path)
  except FileExistsError:
    return False
  except OSError as e:
    raise writes.write_error(e, path, len(data)) from e
  finally:
    writes.remove_quietly(tmp)
  return True


def _take_over(path: str, holder: dict[str, Any], token: str) -> None:
  """Moves the stale lock of `holder` aside, unless another process
  replaced it meanwhile (then it is put back and the race is lost)."""
  aside = f"{path}.stale.{token}"
  try:
    os.rename(path, aside)
  except FileNotFoundError:
    return  # Someone else removed it: try to create ours.
  except OSError as e:
    raise writes.write_error(e, path, None) from e
  moved = _read(aside)
  if moved is not None and moved[0].get("token") != holder.get("token"):
    with contextlib.suppress(OSError):
      os.link(aside, path)  # A fresh lock: give it back.
  writes.remove_quietly(aside)


def acquire(
  workdir: str,
  *,
  stale_after: float = STALE_AFTER_S,
  heartbeat_every: float = HEARTBEAT_EVERY_S,
  wait: float = 0.0,
  log=None,
) -> WorkdirLock:
  """Takes `workdir`'s lock, creating the folder (see the module docstring).

  Args:
    workdir: the run directory.
    stale_after: seconds without a heartbeat after which a holder counts as
      dead.
    heartbeat_every: seconds between heartbeats (well below `stale_after`).
    wait: seconds to wait for a live holder to release or go stale before
      refusing (0: refuse at once).
    log: called with the take-over warning; None: `warnings.warn`.

  Raises:
    WorkdirLockedError: a live process holds the lock.
    WorkdirWriteError: the lock cannot be written (read-only or full disk).
  """
  writes.make_dirs(workdir)
  path = os.path.join(workdir, LOCK_FILE)
  me = holder_record()
  deadline = time.monotonic() + wait
  while True:
    if _create(path, me):
      return WorkdirLock(path, me, heartbeat_every)
    found = _read(path)
    if found is None:
      continue  # Released in between.
    holder, age = found
    reason = stale_reason(holder, age, me, stale_after)
    if reason is not None:
      message = (
        f"Taking over the lock {path} of {describe(holder, age)}: {reason}."
      )
      if log is not None:
        log(message)
      else:
        warnings.warn(message, stacklevel=2)
      _take_over(path, holder, me["token"])
      continue
    if time.monotonic() >= deadline:
      raise WorkdirLockedError(
        f"{workdir} is in use by another run ({describe(holder, age)}; "
        f"lock file {path}). Wait for it to finish or stop it; if that "
        f"process is gone (on another host), the lock counts as stale "
        f"{stale_after:.0f} s after its last heartbeat."
      )
    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
