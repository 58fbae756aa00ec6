"""Soak (slow set): real command-line runs killed at random moments.

A tiny Copy run checkpoints every 200 steps (a checkpoint write every few
milliseconds at this size), so random SIGKILLs land before the first
checkpoint, inside checkpoint writes and inside log appends. After every
kill the same command is rerun; once it finishes, `metrics.jsonl` must
equal an uninterrupted run's record by record, be strict JSON, and leave
nothing half-written. Two processes started together on one workdir: one
runs, the other is refused.

  .venv/bin/python -m pytest tests/experiments/loop/test_kill_soak.py -m slow -q
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from helpers import REPO_ROOT
import pytest
import run_faults

SOAK = dict(num_steps=6000, log_every=100, checkpoint_every=200)
KILLS = 12
TERMS = 4


def start(workdir) -> subprocess.Popen:
  """The soak's command line on `workdir`, its output piped."""
  return subprocess.Popen(
    run_faults.command(workdir, **SOAK),
    cwd=REPO_ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"},
  )


@pytest.mark.slow
def test_random_kills_leave_the_log_of_an_uninterrupted_run(tmp_path):
  reference = tmp_path / "reference"
  assert run_faults.run_cli(reference, **SOAK).returncode == 0
  want = run_faults.learning_metrics(reference)

  workdir = tmp_path / "killed"
  rng = random.Random(49)
  signals = [signal.SIGKILL] * KILLS + [signal.SIGTERM] * TERMS
  rng.shuffle(signals)
  for signum in signals:
    process = start(workdir)
    # Half the kills before training starts printing (compiling, or before
    # the first record), half a random moment into training.
    if rng.random() < 0.5:
      time.sleep(rng.uniform(0.0, 4.0))
    else:
      line = process.stdout.readline()
      while line and not line.startswith("step "):
        line = process.stdout.readline()
      time.sleep(rng.uniform(0.0, 0.3))
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=300)
    assert "Traceback" not in stderr, stderr
    run_faults.assert_strict_log(workdir)

  final = run_faults.run_cli(workdir, **SOAK)
  assert final.returncode == 0, final.stderr
  run_faults.assert_same_metrics(run_faults.learning_metrics(workdir), want)
  run_faults.assert_strict_log(workdir)
  run_faults.assert_nothing_half_written(workdir)


@pytest.mark.slow
def test_two_writers_started_together(tmp_path):
  """The issue's case: two processes, one workdir, same config. One runs
  to the end, the other is refused at once; no duplicate record."""
  processes = [start(tmp_path) for _ in range(2)]
  results = [(p.wait(timeout=300), p.communicate()[1]) for p in processes]
  codes = sorted(code for code, _ in results)
  assert codes == [0, 2], results
  refused = next(err for code, err in results if code == 2)
  assert "in use by another run" in refused and "Traceback" not in refused
  steps = [r["step"] for r in run_faults.learning_metrics(tmp_path)]
  assert steps == list(range(100, 6001, 100))
