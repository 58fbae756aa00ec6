"""scripts/gpu_headline.sh over two blocks on a CPU, at a tiny size: the
first is stopped by its deadline and packs its run; the second, on a fresh
workdir (a new machine), unpacks that and resumes it to the end, every
record written once and equal to an uninterrupted run's."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from conftest import dataset_dir_or_skip
import pytest

from experiments.loop import workdir as workdir_lib
from experiments.loop.config_files import load_config
from experiments.online import copy_experiment

REPO = pathlib.Path(__file__).resolve().parents[2]
# Tens of thousands of steps a second on a CPU: the first block's 30 s stop
# long before FIRST_STEPS; the second goes on to MORE steps past its stop.
TINY = dict(hidden_size=8, rank=2, batch_size=2, chunk_steps=100, log_every=100)
FIRST_STEPS, MORE = 100_000_000, 20_000


def _block(tmp_path, name: str, resume: str, data_dir, steps: int) -> dict:
  env = dict(
    os.environ,
    OUT=str(tmp_path / name),
    HEADLINE_WORKDIR=str(tmp_path / f"{name}_workdir"),
    HEADLINE_RESUME=resume,
    DEADLINE="70",
    MARGIN="40",
    COPY_STEPS=str(steps),
    HEADLINE_SET=" ".join(f"--config.{k}={v}" for k, v in TINY.items()),
    PYTHON=sys.executable,
    DATA_DIR=str(data_dir),
  )
  done = subprocess.run(
    ["bash", "scripts/gpu_headline.sh", "copy_task"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=240,
  )
  assert done.returncode == 0, done.stdout + done.stderr
  return {"stdout": done.stdout, "out": tmp_path / name}


def _records(path) -> list[dict]:
  return [
    {k: v for k, v in r.items() if not k.endswith("_per_second")}
    for r in workdir_lib.read_metrics(str(path))
  ]


@pytest.mark.slow
def test_two_blocks_resume_and_match_an_uninterrupted_run(tmp_path):
  data_dir = dataset_dir_or_skip("official_ok_logs").parent
  first = _block(
    tmp_path, "block1", str(tmp_path / "none"), data_dir, FIRST_STEPS
  )
  assert "stopped at the deadline" in first["stdout"]
  parts = sorted(first["out"].glob("headline_copy_highest.tgz.*"))
  assert parts and (first["out"] / "headline.md").exists()
  stopped = max(
    r["step"] for r in _records(tmp_path / "block1_workdir" / "copy_highest")
  )
  steps = stopped + MORE
  second = _block(tmp_path, "block2", str(first["out"]), data_dir, steps)
  assert "unpacked checkpoint_" in second["stdout"]
  assert "finished" in second["stdout"]
  log = (second["out"] / "headline_copy_highest.log").read_text()
  assert f"Resumed from step {stopped}" in log
  resumed = _records(tmp_path / "block2_workdir" / "copy_highest")
  assert [r["step"] for r in resumed] == list(range(100, steps + 1, 100))
  config = load_config("copy_task", "official")
  config.update(
    TINY, num_steps=steps, checkpoint_every=100_000, keep_checkpoints=1
  )
  copy_experiment.train(config, str(tmp_path / "straight"))
  assert resumed == _records(tmp_path / "straight")
  with open(tmp_path / "block2_workdir" / "copy_highest" / "config.json") as f:
    assert json.load(f)["matmul_precision"] == "highest"
