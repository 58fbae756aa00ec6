"""The mains' command line (`experiments/loop/cli.py`): an ordinary run's
stderr carries no INFO line about backends JAX probed and could not open."""

import os
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_ordinary_run_logs_no_backend_probe(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="")  # Let JAX probe every platform.
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.copy_task",
      "--config",
      "configs/copy_task.py:small",
      "--workdir",
      str(tmp_path / "run"),
      "--config.num_steps=20",
      "--config.chunk_steps=10",
      "--config.log_every=10",
      "--config.checkpoint_every=20",
      "--config.hidden_size=4",
    ],
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr
  assert "step 20/20" in result.stdout
  assert "Unable to initialize backend" not in result.stderr, result.stderr
