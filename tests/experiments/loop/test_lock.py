"""One writer per workdir (`experiments/loop/lock.py`): a second process is
refused at once naming the holder; a stale lock (dead pid on this host, no
heartbeat, an earlier run of the same SLURM job) is taken over with a
warning; the lock is released on every way out of a run."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest
import run_faults

from experiments.loop import errors
from experiments.loop import lock as lock_lib


def read_lock(workdir) -> dict:
  return json.loads((workdir / lock_lib.LOCK_FILE).read_text())


def test_acquire_writes_the_holder_and_release_removes_it(tmp_path):
  workdir = tmp_path / "run"  # Created by acquire.
  with lock_lib.acquire(str(workdir)) as held:
    record = read_lock(workdir)
    assert record["pid"] == os.getpid()
    assert record["host"] == socket.gethostname()
    assert record["token"] == held.record["token"]
    assert {"started", "argv"} <= set(record)
  assert not (workdir / lock_lib.LOCK_FILE).exists()


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
  child = run_faults.hold_lock_in_child(tmp_path)
  try:
    with pytest.raises(errors.WorkdirLockedError) as error:
      lock_lib.acquire(str(tmp_path))
    message = str(error.value)
    assert f"pid {child.pid}" in message and socket.gethostname() in message
    assert lock_lib.LOCK_FILE in message
    assert read_lock(tmp_path)["pid"] == child.pid  # Untouched.
  finally:
    child.kill()
    child.wait()


def test_lock_of_a_killed_process_is_taken_over_with_a_warning(tmp_path):
  child = run_faults.hold_lock_in_child(tmp_path)
  child.send_signal(signal.SIGKILL)  # Leaves the file behind.
  child.wait()
  assert (tmp_path / lock_lib.LOCK_FILE).exists()
  messages = []
  with lock_lib.acquire(str(tmp_path), log=messages.append):
    assert read_lock(tmp_path)["pid"] == os.getpid()
  assert len(messages) == 1
  assert f"pid {child.pid}" in messages[0] and "not running" in messages[0]


def test_lock_without_heartbeat_is_stale_on_another_host(tmp_path):
  record = {**lock_lib.holder_record(), "host": "elsewhere", "pid": 1}
  path = tmp_path / lock_lib.LOCK_FILE
  path.write_text(json.dumps(record))
  with pytest.raises(errors.WorkdirLockedError, match="host elsewhere"):
    lock_lib.acquire(str(tmp_path), stale_after=60)
  old = time.time() - 120
  os.utime(path, (old, old))
  messages = []
  with lock_lib.acquire(str(tmp_path), stale_after=60, log=messages.append):
    pass
  assert "no heartbeat" in messages[0] and "host elsewhere" in messages[0]


def test_heartbeat_keeps_the_lock_fresh(tmp_path):
  with lock_lib.acquire(str(tmp_path), heartbeat_every=0.05) as held:
    path = tmp_path / lock_lib.LOCK_FILE
    old = time.time() - 1000
    os.utime(path, (old, old))
    run_faults.wait_for(lambda: path.stat().st_mtime > old + 500)
    os.utime(path, (old, old))
    held.refresh()  # The run loop's refresh at a record or checkpoint.
    assert path.stat().st_mtime > old + 500


def test_requeued_slurm_job_takes_over_from_its_earlier_run(
  tmp_path, monkeypatch
):
  """A job requeued on another node: the first node's process is gone and
  its heartbeat still fresh; the same job id with a larger restart count
  takes over without waiting."""
  monkeypatch.setenv("SLURM_JOB_ID", "4242")
  monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
  record = {**lock_lib.holder_record(), "host": "node-a", "pid": 1}
  (tmp_path / lock_lib.LOCK_FILE).write_text(json.dumps(record))
  with pytest.raises(errors.WorkdirLockedError, match="SLURM job 4242"):
    lock_lib.acquire(str(tmp_path))  # The same run: refused.
  monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
  messages = []
  with lock_lib.acquire(str(tmp_path), log=messages.append):
    assert read_lock(tmp_path)["slurm_restart_count"] == "1"
  assert "earlier run of SLURM job 4242" in messages[0]


def test_a_holder_taken_over_stops_at_its_next_refresh(tmp_path):
  held = lock_lib.acquire(str(tmp_path))
  try:
    other = {**lock_lib.holder_record(), "host": "elsewhere"}
    (tmp_path / lock_lib.LOCK_FILE).write_text(json.dumps(other))
    with pytest.raises(errors.WorkdirLockedError, match="taken over"):
      held.refresh()
  finally:
    held.release()
  # Release leaves the new holder's file alone.
  assert read_lock(tmp_path)["host"] == "elsewhere"


def test_wait_polls_until_the_holder_releases(tmp_path):
  child = run_faults.hold_lock_in_child(tmp_path, seconds=1.0)
  try:
    start = time.monotonic()
    with lock_lib.acquire(str(tmp_path), wait=30) as held:
      assert held.record["pid"] == os.getpid()
    assert 0.2 < time.monotonic() - start < 30
  finally:
    child.wait()


def test_run_refuses_a_held_workdir_and_releases_its_own(tmp_path):
  """Through the run loop: a held workdir is refused before anything is
  read or written; a finished, a failed and a preempted run all release."""
  child = run_faults.hold_lock_in_child(tmp_path)
  try:
    with pytest.raises(errors.WorkdirLockedError, match=f"pid {child.pid}"):
      run_faults.train(tmp_path, num_steps=100)
    assert sorted(os.listdir(tmp_path)) == [lock_lib.LOCK_FILE]
  finally:
    child.kill()
    child.wait()
  os.remove(tmp_path / lock_lib.LOCK_FILE)
  run_faults.train(tmp_path, num_steps=100)
  assert not (tmp_path / lock_lib.LOCK_FILE).exists()
  with pytest.raises(errors.TrainingFailedError):
    run_faults.train(
      tmp_path,
      num_steps=200,
      learning_rate=float("inf"),
      allow_config_change=True,
    )
  assert not (tmp_path / lock_lib.LOCK_FILE).exists()


def test_two_command_lines_on_one_workdir(tmp_path):
  """The issue's case: the second command is refused with one line, exit
  2, while the first holds the workdir; the log is the first run's."""
  child = run_faults.hold_lock_in_child(tmp_path)
  try:
    result = run_faults.run_cli(tmp_path, num_steps=100)
  finally:
    child.kill()
    child.wait()
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  assert f"in use by another run (host {socket.gethostname()}, pid " in (
    result.stderr
  )
  assert not (tmp_path / "metrics.jsonl").exists()


def test_read_only_workdir_is_one_error_naming_the_lock(tmp_path):
  if os.geteuid() != 0:
    pytest.skip("mounting a read-only tmpfs needs root")
  mount = tmp_path / "ro"
  mount.mkdir()
  if os.system(f"mount -t tmpfs -o size=1m,ro tmpfs {mount} 2>/dev/null"):
    pytest.skip("mount -t tmpfs is not allowed here")
  try:
    with pytest.raises(errors.WorkdirWriteError, match="read-only"):
      lock_lib.acquire(str(mount))
  finally:
    os.system(f"umount {mount}")
