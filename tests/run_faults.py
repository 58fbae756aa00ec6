"""Helpers of the run-directory tests (`tests/experiments/loop/test_lock.py`,
`test_fault_injection.py`, `test_kill_soak.py`, `test_run_safety.py`): a tiny
Copy-task run, in this process or as the command line, records compared
without their timings, and writes that die midway (a kill, a full disk).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

from helpers import REPO_ROOT
from helpers import load_config
import numpy as np

from experiments.loop import lock as lock_lib
from experiments.loop import runner
from experiments.loop import workdir as workdir_lib
from experiments.loop import writes

# Tiny and fast: 4-unit RHN, exact RTRL, batch 2, 50-step chunks.
TINY = dict(
  estimator="rtrl",
  cell="rhn",
  hidden_size=4,
  batch_size=2,
  learning_rate=1e-2,
  seed=5,
  chunk_steps=50,
  log_every=50,
  checkpoint_every=100,
  num_steps=300,
)
TIMING_FIELDS = ("steps_per_second", "examples_per_second")
# Fields that choose the runs (`run_axes.run_grid`), not what one computes.
RUN_GRID_FIELDS = {"seed", "num_seeds", "learning_rates"}


def tiny_config(**overrides):
  return load_config("copy_task", **{**TINY, **overrides})


@functools.cache
def _experiment(computed: tuple):
  """One `Experiment` per set of fields that change what is computed: its
  jitted functions are then compiled once per test session."""
  from experiments.online import copy_experiment  # pylint: disable=g-import-not-at-top

  return copy_experiment.make_experiment(tiny_config(**dict(computed)))


def train(workdir, log=print, **overrides) -> list[dict]:
  """The tiny run in this process, as `experiments.copy_task` runs it
  (`runner.run`); returns its records."""
  computed = tuple(
    sorted(
      (k, v)
      for k, v in overrides.items()
      if k not in workdir_lib.BOOKKEEPING_FIELDS | RUN_GRID_FIELDS
    )
  )
  return runner.run(
    tiny_config(**overrides), str(workdir), _experiment(computed), log=log
  )


def command(workdir, **overrides) -> list[str]:
  flags = {**TINY, **overrides}
  return [
    sys.executable,
    "-m",
    "experiments.copy_task",
    "--config",
    "configs/copy_task.py",
    "--workdir",
    str(workdir),
  ] + [f"--config.{k}={v}" for k, v in flags.items()]


def run_cli(workdir, **overrides) -> subprocess.CompletedProcess:
  return subprocess.run(
    command(workdir, **overrides),
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    env={**os.environ, "JAX_PLATFORMS": "cpu"},
  )


def learning_metrics(workdir) -> list[dict]:
  return [
    {k: v for k, v in r.items() if k not in TIMING_FIELDS}
    for r in workdir_lib.read_metrics(str(workdir))
  ]


def assert_same_metrics(got, want):
  """Record by record: the same steps, fields and values."""
  assert [r["step"] for r in got] == [r["step"] for r in want]
  for a, b in zip(got, want):
    assert a.keys() == b.keys()
    for key in a:
      if isinstance(a[key], str):
        assert a[key] == b[key], key
      else:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-6, err_msg=key)


def assert_strict_log(workdir) -> None:
  """Every line of `metrics.jsonl` is strict JSON (no NaN/Infinity tokens)
  and the steps increase."""
  path = pathlib.Path(workdir) / workdir_lib.METRICS_FILE
  text = path.read_text() if path.exists() else ""
  assert text.endswith("\n") or not text
  steps = []
  for line in text.splitlines():
    steps.append(
      json.loads(line, parse_constant=_refuse_constant)["step"]  # strict
    )
  assert steps == sorted(set(steps))


def _refuse_constant(name):
  raise AssertionError(f"bare {name} in metrics.jsonl")


def assert_nothing_half_written(workdir) -> None:
  """No temporary file; every checkpoint has its checksum."""
  names = sorted(os.listdir(workdir))
  assert not [n for n in names if n.endswith(writes.TMP_SUFFIX)], names
  for n in names:
    if n.endswith(".msgpack"):
      assert n + ".sha256" in names, names


class Killed(BaseException):
  """What a process killed in the middle of a write leaves: the exception
  runs no `except Exception` handler."""


@contextlib.contextmanager
def die_at_write(monkeypatch, number: int, error: BaseException | None = None):
  """The `number`-th workdir write (1-based, `writes.write_all`) writes
  half its bytes, then raises `error` (default `Killed`). Yields a list
  that receives the size of each write."""
  sizes: list[int] = []
  real = writes.write_all

  def write_all(fd, data):
    sizes.append(len(data))
    if len(sizes) == number:
      real(fd, bytes(data[: len(data) // 2]))
      raise error if error is not None else Killed()
    real(fd, data)

  monkeypatch.setattr(writes, "write_all", write_all)
  try:
    yield sizes
  finally:
    monkeypatch.setattr(writes, "write_all", real)


def dead_pid() -> int:
  """The pid of a process of this host that has exited."""
  child = subprocess.Popen([sys.executable, "-c", "pass"])
  child.wait()
  return child.pid


def leave_stale_lock(workdir) -> None:
  """The lock a process killed by SIGKILL leaves: its record, its pid gone."""
  record = {
    **lock_lib.holder_record(),
    "pid": dead_pid(),
    "process_start": None,
    "host": socket.gethostname(),
  }
  path = pathlib.Path(workdir) / lock_lib.LOCK_FILE
  path.write_text(json.dumps(record))


def hold_lock_in_child(workdir, seconds: float = 600) -> subprocess.Popen:
  """A child process holding `workdir`'s lock for `seconds`, then
  releasing it (or until it is killed)."""
  code = (
    "import sys, time\n"
    "from experiments.loop import lock\n"
    "held = lock.acquire(sys.argv[1])\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "held.release()\n"
  )
  child = subprocess.Popen(
    [sys.executable, "-c", code, str(workdir), str(seconds)],
    cwd=REPO_ROOT,
    stdout=subprocess.PIPE,
    text=True,
  )
  assert child.stdout.readline().strip() == "held"
  return child


def wait_for(predicate, timeout: float = 10.0) -> None:
  deadline = time.monotonic() + timeout
  while not predicate():
    assert time.monotonic() < deadline, "timed out"
    time.sleep(0.02)
