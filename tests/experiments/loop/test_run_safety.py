"""Runs that survive interruption and bad input (the shared run loop,
`experiments/loop/runner.py`), each scenario against a real subprocess of the
Copy-task command line: a changed config is refused, a truncated checkpoint
falls back to the previous one, SIGTERM/SIGINT checkpoint and the rerun logs
what an uninterrupted run logs, and a NaN stops the run naming the step."""

from __future__ import annotations

import json
import os
import pathlib
import random
import signal
import subprocess
import time

from helpers import REPO_ROOT
from helpers import load_config
import numpy as np
import pytest
import run_faults

from experiments.loop import checkpoints
from experiments.loop import workdir as workdir_lib

BASE_FLAGS = run_faults.TINY
command = run_faults.command
run_cli = run_faults.run_cli
learning_metrics = run_faults.learning_metrics
assert_same_metrics = run_faults.assert_same_metrics


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """The reference: 300 steps in one go."""
  workdir = tmp_path_factory.mktemp("whole")
  result = run_cli(workdir)
  assert result.returncode == 0, result.stderr
  return learning_metrics(workdir)


def test_changed_config_is_refused_and_config_json_kept(tmp_path):
  first = run_cli(tmp_path, num_steps=100)
  assert first.returncode == 0, first.stderr
  config_path = tmp_path / workdir_lib.CONFIG_FILE
  saved = config_path.read_bytes()

  result = run_cli(tmp_path, num_steps=100, hidden_size=6, learning_rate=0.1)
  assert result.returncode == 2
  assert "hidden_size: 4 -> 6" in result.stderr
  assert "learning_rate: 0.01 -> 0.1" in result.stderr
  assert "allow_config_change" in result.stderr and "--workdir" in result.stderr
  assert "Traceback" not in result.stderr
  assert config_path.read_bytes() == saved

  # Bookkeeping fields may change: logged, and the run goes on.
  result = run_cli(tmp_path, num_steps=150, log_every=50)
  assert result.returncode == 0, result.stderr
  assert "num_steps: 100 -> 150" in result.stdout
  assert json.loads(config_path.read_text())["num_steps"] == 150


def test_run_saved_before_matmul_precision_existed_resumes(tmp_path):
  """A config.json without a field added later at its default (here
  `matmul_precision`, a bookkeeping field) does not block the resume."""
  config = {"estimator": "ok", "num_steps": 100, "matmul_precision": "highest"}
  old = {k: v for k, v in config.items() if k != "matmul_precision"}
  (tmp_path / workdir_lib.CONFIG_FILE).write_text(json.dumps(old))
  logged = []
  workdir_lib.prepare(str(tmp_path), config, log=logged.append)
  assert any("matmul_precision" in line for line in logged), logged
  saved = json.loads((tmp_path / workdir_lib.CONFIG_FILE).read_text())
  assert saved["matmul_precision"] == "highest"


def _resume_defaults() -> dict[str, dict]:
  """Each experiment's declared resume defaults (`Experiment.resume_defaults`)."""
  from experiments.classifier import experiment as classifier  # pylint: disable=g-import-not-at-top
  from experiments.online import copy_experiment  # pylint: disable=g-import-not-at-top
  from experiments.online import ptb_experiment  # pylint: disable=g-import-not-at-top

  return {
    "copy": copy_experiment.RESUME_DEFAULTS,
    "ptb": ptb_experiment.RESUME_DEFAULTS,
    "classifier": classifier.RESUME_DEFAULTS,
  }


@pytest.mark.parametrize(
  "experiment, field",
  [(e, f) for e, d in _resume_defaults().items() for f in sorted(d)],
)
def test_run_saved_before_a_field_was_added_resumes_at_its_default(
  tmp_path, experiment, field
):
  """A field an experiment added later (the official presets' `optimizer`,
  `init_stddev`, `cell_clip_norm`, `text_layout`) at the value that
  reproduces the old runs is no change; any other value is."""
  defaults = _resume_defaults()[experiment]
  old = {"estimator": "ok", "num_steps": 100}
  (tmp_path / workdir_lib.CONFIG_FILE).write_text(json.dumps(old))
  default = defaults[field]
  new = {**old, field: default}
  workdir_lib.prepare(str(tmp_path), new, log=print, resume_defaults=defaults)
  saved = json.loads((tmp_path / workdir_lib.CONFIG_FILE).read_text())
  assert saved == old  # Nothing changed, nothing rewritten.
  other = "tf1_adam" if isinstance(default, str) else 0.5
  with pytest.raises(workdir_lib.ConfigMismatchError, match=field):
    workdir_lib.prepare(
      str(tmp_path), {**old, field: other}, log=print, resume_defaults=defaults
    )
  # Without the experiment's declaration the absent field is a change.
  with pytest.raises(workdir_lib.ConfigMismatchError, match=field):
    workdir_lib.prepare(str(tmp_path), new, log=print)


def test_allowed_config_change_keeps_old_config_and_fails_clearly_on_shapes(
  tmp_path,
):
  assert run_cli(tmp_path, num_steps=100).returncode == 0
  # A change that keeps shapes resumes with the new value.
  result = run_cli(
    tmp_path, num_steps=150, learning_rate=0.02, allow_config_change=True
  )
  assert result.returncode == 0, result.stderr
  assert "learning_rate: 0.01 -> 0.02" in result.stdout
  assert (
    json.loads((tmp_path / "config.previous.json").read_text())["learning_rate"]
    == 0.01
  )
  # A change of shapes cannot resume: a clear error, no JAX traceback.
  result = run_cli(
    tmp_path, num_steps=200, hidden_size=6, allow_config_change=True
  )
  assert result.returncode == 2
  assert "shape" in result.stderr and "different config" in result.stderr
  assert "Traceback" not in result.stderr


def test_truncated_checkpoint_falls_back_to_previous(tmp_path, uninterrupted):
  assert run_cli(tmp_path, num_steps=200).returncode == 0
  newest = checkpoints.checkpoint_path(str(tmp_path), 200)
  with open(newest, "r+b") as f:  # A copy cut short.
    f.truncate(os.path.getsize(newest) // 2)

  result = run_cli(tmp_path)
  assert result.returncode == 0, result.stderr
  output = result.stdout + result.stderr
  assert "corrupt checkpoint" in output and os.path.basename(newest) in output
  assert "Resumed from step 100" in result.stdout
  assert_same_metrics(learning_metrics(tmp_path), uninterrupted)


def test_no_valid_checkpoint_is_a_clear_error(tmp_path):
  assert run_cli(tmp_path, num_steps=200).returncode == 0
  for path in checkpoints.checkpoint_paths(str(tmp_path)):
    with open(path, "r+b") as f:
      f.truncate(10)
  result = run_cli(tmp_path)
  assert result.returncode == 2
  assert "No valid checkpoint" in result.stderr
  for path in checkpoints.checkpoint_paths(str(tmp_path)):
    assert os.path.basename(path) in result.stderr
  assert "Traceback" not in result.stderr


# Long enough (about a second of training) for a signal to land mid-run.
LONG_RUN = dict(num_steps=20000, log_every=1000, checkpoint_every=2000)


@pytest.fixture(scope="module")
def uninterrupted_long(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("whole_long")
  result = run_cli(workdir, **LONG_RUN)
  assert result.returncode == 0, result.stderr
  return learning_metrics(workdir)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_checkpoints_and_rerun_matches_uninterrupted(
  tmp_path, uninterrupted_long, signum
):
  process = subprocess.Popen(
    command(tmp_path, **LONG_RUN),
    cwd=REPO_ROOT,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"},
  )
  # Wait until training runs (the first progress line), then a random delay.
  first_line = process.stdout.readline()
  while first_line and not first_line.startswith("step "):
    first_line = process.stdout.readline()
  time.sleep(random.Random(int(signum)).uniform(0.0, 0.1))
  process.send_signal(signum)
  stdout, stderr = process.communicate(timeout=300)
  if process.returncode in (0, -signum) and "step 20000/20000" in stdout:
    pytest.skip("the run finished before the signal arrived")
  assert process.returncode == 128 + signum, stderr
  assert "checkpoint written" in stdout and "--workdir" in stdout
  assert not (tmp_path / "workdir.lock").exists()  # Released on the way out.
  stopped_at = checkpoints.latest_checkpoint_step(str(tmp_path))
  assert stopped_at is not None and stopped_at % BASE_FLAGS["chunk_steps"] == 0

  assert stopped_at < LONG_RUN["num_steps"]

  result = run_cli(tmp_path, **LONG_RUN)
  assert result.returncode == 0, result.stderr
  assert f"Resumed from step {stopped_at}" in result.stdout
  assert_same_metrics(learning_metrics(tmp_path), uninterrupted_long)


def test_nan_stops_the_run_naming_the_step_and_keeps_last_checkpoint(tmp_path):
  assert run_cli(tmp_path, num_steps=100).returncode == 0
  good = checkpoints.checkpoint_path(str(tmp_path), 100)
  good_bytes = pathlib.Path(good).read_bytes()
  # An infinite learning rate makes the parameters, then the loss, NaN.
  result = run_cli(
    tmp_path, num_steps=300, learning_rate="inf", allow_config_change=True
  )
  assert result.returncode == 3
  assert "Non-finite" in result.stderr and "step 150" in result.stderr
  assert "Traceback" not in result.stderr
  assert checkpoints.latest_checkpoint_step(str(tmp_path)) == 100
  assert pathlib.Path(good).read_bytes() == good_bytes
  checkpoints.read_checkpoint_file(good)  # Still valid.


def test_skip_nonfinite_updates_leaves_parameters_unchanged():
  """With `skip_nonfinite_updates`, a step whose gradient is NaN changes
  nothing; the steps around it train as usual."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from experiments.online import setup as online_setup  # pylint: disable=g-import-not-at-top
  from rtrl.tasks import copy_task  # pylint: disable=g-import-not-at-top

  config = load_config(
    "copy_task",
    estimator="rtrl",
    cell="rhn",
    hidden_size=4,
    rank=1,
    truncation=1,
    learning_rate=1e-2,
    clip_norm=0.0,
    skip_nonfinite_updates=True,
  )
  cell = online_setup.make_cell(config)
  trainer = online_setup.make_trainer(config, cell)
  params = online_setup.init_params(cell, jax.random.PRNGKey(0), 4, 4)
  state = trainer.init(params, jax.random.PRNGKey(1), 2)
  stream = copy_task.stream_init(jax.random.PRNGKey(2), 2, 8)
  _, chunk = copy_task.generate(stream, jnp.asarray(3), 6)
  chunk = chunk._replace(inputs=chunk.inputs.at[3].set(jnp.nan))

  states = []
  for t in range(6):
    state, _ = trainer.step(
      state, jax.tree_util.tree_map(lambda a: a[t], chunk)
    )
    states.append(state.params)
  same = jax.tree_util.tree_map(np.array_equal, states[2], states[3])
  assert all(jax.tree_util.tree_leaves(same))
  changed = jax.tree_util.tree_map(np.array_equal, states[1], states[2])
  assert not all(jax.tree_util.tree_leaves(changed))
  assert all(
    np.isfinite(leaf).all() for leaf in jax.tree_util.tree_leaves(states[-1])
  )
