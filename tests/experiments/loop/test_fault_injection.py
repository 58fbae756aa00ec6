"""Fault injection: whatever the moment a run dies, or the disk fills, the
rerun's `metrics.jsonl` equals an uninterrupted run's record by record, and
nothing half-written stays behind.

The tiny Copy run (`run_faults.TINY`: 300 steps, a record every 50, a
checkpoint every 100) writes, in order: 1 the lock, 2 `config.json`, 3-4
the records of steps 50 and 100, 5-6 checkpoint 100 (checksum, then data),
7-8 records 150 and 200, 9-10 checkpoint 200, 11-12 records 250 and 300,
13-14 checkpoint 300. `run_faults.die_at_write` makes one of these writes
stop halfway and the process "die" (an exception no handler catches, with
the lock left behind as SIGKILL leaves it), or fail with ENOSPC. The
random-moment SIGKILL soak of real processes is `test_kill_soak.py` (slow).
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import subprocess

import pytest
import run_faults

from experiments.loop import checkpoints
from experiments.loop import errors
from experiments.loop import workdir as workdir_lib

WRITES = {
  3: "append of the first record (no checkpoint yet)",
  4: "append of the second record (no checkpoint yet)",
  5: "first checkpoint's checksum",
  6: "first checkpoint's data",
  7: "append after the first checkpoint",
  10: "second checkpoint's data",
  13: "last checkpoint's checksum",
}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("whole")
  run_faults.train(workdir)
  return run_faults.learning_metrics(workdir)


@pytest.mark.parametrize("write", sorted(WRITES), ids=WRITES.get)
def test_killed_midwrite_rerun_logs_exactly_the_run(
  tmp_path, monkeypatch, uninterrupted, write
):
  with (
    run_faults.die_at_write(monkeypatch, write),
    pytest.raises(run_faults.Killed),
  ):
    run_faults.train(tmp_path)
  run_faults.leave_stale_lock(tmp_path)

  run_faults.train(tmp_path)
  run_faults.assert_same_metrics(
    run_faults.learning_metrics(tmp_path), uninterrupted
  )
  run_faults.assert_strict_log(tmp_path)
  run_faults.assert_nothing_half_written(tmp_path)
  assert not (tmp_path / "workdir.lock").exists()


def test_log_from_an_earlier_version_with_a_rerun_appended_is_refused(
  tmp_path, uninterrupted
):
  """The issue's case: a rerun that started at step 0 and appended. Named
  by file and line; nothing is changed."""
  run_faults.train(tmp_path, num_steps=100, checkpoint_every=300)
  for path in checkpoints.checkpoint_paths(str(tmp_path)):
    os.remove(path)
    os.remove(path + checkpoints.CHECKSUM_SUFFIX)
  log = tmp_path / workdir_lib.METRICS_FILE
  log.write_text(log.read_text() * 2)
  before = log.read_bytes()
  with pytest.raises(errors.MetricsLogError) as error:
    run_faults.train(tmp_path, checkpoint_every=300)
  assert f"{log}:3 has step 50 after step 100" in str(error.value)
  assert log.read_bytes() == before


def test_checkpoint_newer_than_the_log_falls_back(tmp_path, uninterrupted):
  """A finished run whose last record was cut off: the newest checkpoint
  is past the log, so the run resumes from the one before and rewrites the
  lost record."""
  run_faults.train(tmp_path)
  log = tmp_path / workdir_lib.METRICS_FILE
  text = log.read_text()
  log.write_text(text[: len(text) - 40])
  logged = []
  run_faults.train(tmp_path, log=logged.append)
  assert any("Passing over" in m and "step 300" in m for m in logged), logged
  assert any("Resumed from step 200" in m for m in logged), logged
  run_faults.assert_same_metrics(
    run_faults.learning_metrics(tmp_path), uninterrupted
  )


def test_lost_log_with_checkpoints_is_refused(tmp_path):
  run_faults.train(tmp_path, num_steps=200)
  os.remove(tmp_path / workdir_lib.METRICS_FILE)
  with pytest.raises(errors.MetricsLogError, match="No checkpoint .* fits"):
    run_faults.train(tmp_path)


NO_SPACE = OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("write", [2, 4, 9, 10], ids=lambda w: f"write{w}")
def test_full_disk_is_one_error_and_the_rerun_resumes(
  tmp_path, monkeypatch, uninterrupted, write
):
  """ENOSPC injected at `config.json`, a record, a checksum, a checkpoint:
  one error naming the path and the space, every earlier file valid, the
  rerun (space freed) equal to an uninterrupted run."""
  with (
    run_faults.die_at_write(monkeypatch, write, error=NO_SPACE) as sizes,
    pytest.raises(errors.WorkdirWriteError) as error,
  ):
    run_faults.train(tmp_path)
  message = str(error.value)
  assert "no space left" in message and f"needs {sizes[-1]:,} bytes" in message
  assert "rerun the same command to resume" in message
  assert "\n" not in message
  run_faults.assert_strict_log(tmp_path)
  run_faults.assert_nothing_half_written(tmp_path)
  assert not (tmp_path / "workdir.lock").exists()

  run_faults.train(tmp_path)
  run_faults.assert_same_metrics(
    run_faults.learning_metrics(tmp_path), uninterrupted
  )


def _mount_tmpfs(path: pathlib.Path, size: str) -> None:
  if os.geteuid() != 0:
    pytest.skip("mounting a tmpfs needs root")
  path.mkdir()
  mounted = subprocess.run(
    ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
    capture_output=True,
  )
  if mounted.returncode:
    pytest.skip(f"mount -t tmpfs is not allowed here: {mounted.stderr!r}")


def test_real_full_tmpfs_before_the_first_checkpoint(tmp_path, uninterrupted):
  """The issue's case on a real file system: a disk that fills before the
  first checkpoint ends the run with one error, and the rerun resumes."""
  mount = tmp_path / "small"
  _mount_tmpfs(mount, "256k")
  try:
    filler = mount / "filler"
    with open(filler, "wb") as f, pytest.raises(OSError):
      f.write(b"x" * (1 << 20))
    # Room for the lock, config.json and one record page, no checkpoint.
    os.truncate(filler, os.path.getsize(filler) - 12 * 1024)
    workdir = mount / "run"
    with pytest.raises(errors.WorkdirWriteError, match="no space left"):
      run_faults.train(workdir)
    run_faults.assert_strict_log(workdir)
    run_faults.assert_nothing_half_written(workdir)
    os.remove(filler)
    run_faults.train(workdir)
    run_faults.assert_same_metrics(
      run_faults.learning_metrics(workdir), uninterrupted
    )
  finally:
    subprocess.run(["umount", str(mount)], check=False)


def test_read_only_workdir_is_one_error(tmp_path):
  mount = tmp_path / "ro"
  _mount_tmpfs(mount, "4m")
  try:
    run_faults.train(mount / "run", num_steps=100)
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
    with pytest.raises(errors.WorkdirWriteError, match="read-only"):
      run_faults.train(mount / "run", num_steps=200)
  finally:
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize(
  "fields, problem",
  [
    (dict(keep_checkpoints=-1), r"keep_checkpoints must be an integer >= 0"),
    (dict(checkpoint_every=1001), r"checkpoint_every \(1001\) must be a mul"),
    (dict(max_consecutive_skips=0), r"max_consecutive_skips must be a pos"),
    (dict(divergence_factor=-1.0), r"divergence_factor must be a number"),
  ],
)
def test_bad_run_settings_are_named(tmp_path, fields, problem):
  with pytest.raises(errors.ConfigError, match=problem):
    run_faults.train(tmp_path, **fields)
  assert not (tmp_path / "config.json").exists()


def test_keep_checkpoints_zero_keeps_every_one(tmp_path):
  run_faults.train(tmp_path, keep_checkpoints=0)
  steps = [
    int(p.rsplit("_", 1)[1].split(".")[0])
    for p in checkpoints.checkpoint_paths(str(tmp_path))
  ]
  assert steps == [100, 200, 300]


def test_checkpoint_remembers_its_config_when_config_json_is_gone(tmp_path):
  """The issue's case: config.json deleted, another estimator: refused,
  naming the checkpoint and the field."""
  run_faults.train(tmp_path, estimator="ok", rank=2, num_steps=200)
  os.remove(tmp_path / "config.json")
  with pytest.raises(errors.RunError) as error:
    run_faults.train(tmp_path, estimator="kf_avg", rank=2)
  message = str(error.value)
  assert "checkpoint_0000000200.msgpack was made with" in message
  assert "estimator: 'ok' -> 'kf_avg'" in message


def test_config_change_that_does_not_fit_keeps_config_json(tmp_path):
  run_faults.train(tmp_path, num_steps=200)
  saved = (tmp_path / "config.json").read_bytes()
  with pytest.raises(checkpoints.CheckpointError, match="shape"):
    run_faults.train(tmp_path, hidden_size=6, allow_config_change=True)
  assert (tmp_path / "config.json").read_bytes() == saved
  assert not (tmp_path / "config.previous.json").exists()
  run_faults.train(tmp_path)  # The original command resumes.
  assert json.loads((tmp_path / "config.json").read_text())["num_steps"] == 300


def test_stray_files_of_a_killed_writer_are_cleaned(tmp_path, uninterrupted):
  run_faults.train(tmp_path, num_steps=100)
  (tmp_path / "checkpoint_0000000200.msgpack.tmp").write_bytes(b"partial")
  (tmp_path / "checkpoint_0000000200.msgpack.sha256").write_text("0" * 64)
  (tmp_path / "config.json.tmp").write_text("{")
  run_faults.leave_stale_lock(tmp_path)
  run_faults.train(tmp_path)
  run_faults.assert_nothing_half_written(tmp_path)
  run_faults.assert_same_metrics(
    run_faults.learning_metrics(tmp_path), uninterrupted
  )


def test_workdir_copied_elsewhere_resumes(tmp_path, uninterrupted):
  """Checkpoints and log are self-contained: a copy resumes."""
  run_faults.train(tmp_path / "a", num_steps=200)
  shutil.copytree(tmp_path / "a", tmp_path / "b")
  run_faults.train(tmp_path / "b")
  run_faults.assert_same_metrics(
    run_faults.learning_metrics(tmp_path / "b"), uninterrupted
  )
