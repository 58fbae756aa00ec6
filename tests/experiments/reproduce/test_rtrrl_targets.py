"""The RTRRL targets (`experiments/reproduce/rtrrl_paper.py`): one cheap
curve end to end through `scripts/reproduce.py`, the two targets sharing
it, and the published numbers beside ours in the table."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO_ROOT

from experiments.reproduce import rtrrl_paper

SETS = [
  "--set",
  "num_steps=2000",
  "--set",
  "eval_every=1000",
  "--set",
  "log_every=1000",
  "--set",
  "checkpoint_every=1000",
  "--set",
  "num_seeds=2",
  "--set",
  "chunk_steps=1000",
]


def reproduce(target: str, workdir, *args: str):
  return subprocess.run(
    [sys.executable, "scripts/reproduce.py", target, "--scale", "small"]
    + ["--workdir", str(workdir), *SETS, *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )


def test_one_curve_serves_both_targets_and_sits_beside_the_published(
  tmp_path,
):
  done = reproduce("rtrrl_table2", tmp_path, "--only", "MemoryChain-4 linear")
  assert done.returncode == 0, done.stdout + done.stderr
  curve = tmp_path / rtrrl_paper.CURVES_DIR / "MemoryChain-4_linear"
  summary = json.loads((curve / "summary.json").read_text())
  assert len(summary["best_eval_return"]) == 2  # Two seeds in one program.
  rows = json.loads((tmp_path / "rtrrl_table2" / "table.json").read_text())
  rows = rows["rows"] if isinstance(rows, dict) else rows
  (row,) = [
    r for r in rows if r["task"] == "MemoryChain-4" and r["method"] == "linear"
  ]
  assert row["published"] == rtrrl_paper.PUBLISHED["MemoryChain-4"]["linear"][0]
  assert row["step_cap"] == 2000 and -1.0 <= row["ours"] <= 1.0
  assert (tmp_path / "rtrrl_table2" / "figure.png").exists()
  # The estimator table reads the same curve and trains nothing unselected.
  done = reproduce("rtrrl_estimators", tmp_path, "--only", "no such curve")
  assert done.returncode == 0, done.stdout + done.stderr
  assert "MemoryChain-4 linear" not in done.stdout  # Read, not trained.
  assert "=== MemoryChain-4 RTRL: not run" in done.stdout
  rows = json.loads((tmp_path / "rtrrl_estimators" / "table.json").read_text())
  rows = rows["rows"] if isinstance(rows, dict) else rows
  (linear,) = [r for r in rows if r["method"] == "linear"]
  assert linear["MemoryChain-4"] == row["ours"]
