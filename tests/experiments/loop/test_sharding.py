"""Data parallelism (`experiments/loop/sharding.py`), on CPU with forced host
devices, in subprocesses so the default suite keeps its single device:

* a batch-sharded run equals the single-device run (float64, 1e-10, states
  and metrics) for exact RTRL, KF-AVG, r-OK, UORO and TBPTT on Copy and
  KF-AVG on PTB, and runs stacked over a `(data, runs)` mesh equal theirs;
* devices that do not divide the batch or the runs give clear errors;
* two processes (`jax.distributed`, gloo collectives on 127.0.0.1) train the
  Copy task to the single-process metrics, and only process 0 writes.

r-OK is in the comparison because its discrete choices are continuous in
their inputs: the Jacobi SVD's signs are fixed by a convention, and
CholeskyQR2's second pass does not depend on the eigenbasis of its
identity-to-rounding Gram matrix. Before, a one-ulp change of the
parameters, such as a different association of the batch sum across
devices, sent r-OK on another trajectory;
`test_ok_is_not_chaotic_under_one_ulp` checks this on a single device.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from conftest import shared_data_root
from helpers import REPO_ROOT
from helpers import load_config
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.loop import checkpoints
from experiments.loop import workdir as workdir_lib

SCRIPT = (
  REPO_ROOT
  / "tests"
  / "experiments"
  / "loop"
  / "sharding_scripts"
  / "compare_sharded.py"
)


def run_script(*args) -> list[dict]:
  env = {
    **os.environ,
    "JAX_PLATFORMS": "cpu",
    "DATA_DIR": str(shared_data_root()),
    "PYTHONPATH": str(REPO_ROOT),
  }
  result = subprocess.run(
    [sys.executable, str(SCRIPT), *args],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=900,
    env=env,
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return [
    json.loads(line)
    for line in result.stdout.splitlines()
    if line.startswith("{")
  ]


def check_equal(cases):
  results = run_script(*cases)
  assert [r["case"] for r in results] == cases
  for result in results:
    assert result["records"] == 2, result
    assert result["state"] < 1e-10, result
    assert result["metrics"] < 1e-10, result


def test_sharded_runs_equal_single_device_runs():
  cases = ["tbptt", "kf_avg_runs", "ok"]
  if (shared_data_root() / "ptb").is_dir():
    cases.append("ptb_kf_avg")
  check_equal(cases)


@pytest.mark.slow
def test_sharded_exact_rtrl_and_uoro_equal_single_device():
  check_equal(["rtrl", "uoro", "kf_avg"])


def test_devices_that_do_not_divide_give_clear_errors():
  errors = {r["bad_mesh"]: r["error"] for r in run_script("bad_meshes")}
  assert (
    "config.batch_size (3)" in errors["batch"] and "'data'" in errors["batch"]
  )
  assert "3 runs" in errors["runs"] and "'runs'" in errors["runs"]
  assert "config.mesh_shape (3, 1)" in errors["shape"]
  assert "config.num_devices=8" in errors["too_many"]


def test_ok_is_not_chaotic_under_one_ulp(x64):
  """On ONE device, scaling the initial parameters by (1 + 2e-16) leaves
  2-OK's weights, like 2-KF-AVG's, within rounding after 100 steps (a
  discontinuous SVD sign or basis moved 2-OK's by O(0.1))."""
  from experiments.online import setup as online_setup  # pylint: disable=g-import-not-at-top
  from rtrl.tasks import copy_task  # pylint: disable=g-import-not-at-top

  moved = {}
  for estimator in ("ok", "kf_avg"):
    config = load_config(
      "copy_task",
      estimator=estimator,
      rank=2,
      cell="rhn",
      hidden_size=4,
      learning_rate=1e-2,
      clip_norm=0.0,
      truncation=1,
    )
    cell = online_setup.make_cell(config)
    trainer = online_setup.make_trainer(config, cell)
    params = online_setup.init_params(cell, jax.random.PRNGKey(0), 4, 4)
    stream = copy_task.stream_init(jax.random.PRNGKey(2), 4, 8)
    _, chunk = copy_task.generate(stream, jnp.asarray(3), 100)
    run = jax.jit(
      lambda state, chunk: jax.lax.scan(trainer.step, state, chunk)[0]
    )
    nudged = jax.tree_util.tree_map(lambda w: w * (1 + 2e-16), params)
    a = run(trainer.init(params, jax.random.PRNGKey(1), 4), chunk)
    b = run(trainer.init(nudged, jax.random.PRNGKey(1), 4), chunk)
    moved[estimator] = float(
      jnp.max(jnp.abs(a.params["cell"]["W"] - b.params["cell"]["W"]))
    )
  assert moved["kf_avg"] < 1e-12
  assert moved["ok"] < 1e-12


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


COPY_FLAGS = dict(
  estimator="kf_avg",
  rank=2,
  hidden_size=4,
  batch_size=4,
  num_steps=100,
  chunk_steps=50,
  log_every=50,
  checkpoint_every=100,
  learning_rate=1e-2,
)


def _copy_command(workdir, **flags):
  return [
    sys.executable,
    "-m",
    "experiments.copy_task",
    "--config",
    str(REPO_ROOT / "configs" / "copy_task.py"),
    "--workdir",
    str(workdir),
  ] + [f"--config.{k}={v}" for k, v in {**COPY_FLAGS, **flags}.items()]


def test_two_processes_match_one_and_only_process_0_writes(tmp_path):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO_ROOT)}
  single = subprocess.run(
    _copy_command(tmp_path / "single"),
    cwd=REPO_ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert single.returncode == 0, single.stderr[-3000:]

  port = _free_port()
  processes = []
  for rank in (0, 1):
    # Relative workdirs in separate folders: what process 1 writes would
    # land in its own folder.
    cwd = tmp_path / f"process{rank}"
    cwd.mkdir()
    processes.append(
      subprocess.Popen(
        _copy_command(
          "multi",
          distributed=True,
          coordinator_address=f"127.0.0.1:{port}",
          num_processes=2,
          process_id=rank,
        ),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
      )
    )
  outputs = [p.communicate(timeout=600) for p in processes]
  for p, (out, err) in zip(processes, outputs):
    assert p.returncode == 0, out[-2000:] + err[-3000:]
  assert "2 processes" in outputs[0][0]
  assert not (tmp_path / "process1" / "multi").exists()

  timing = ("steps_per_second", "examples_per_second")
  got = workdir_lib.read_metrics(str(tmp_path / "process0" / "multi"))
  want = workdir_lib.read_metrics(str(tmp_path / "single"))
  assert [r["step"] for r in got] == [r["step"] for r in want] == [50, 100]
  for a, b in zip(got, want):
    for key in a:
      if key in timing or isinstance(a[key], str):
        continue
      np.testing.assert_allclose(a[key], b[key], rtol=1e-5, err_msg=key)
  assert (
    checkpoints.latest_checkpoint_step(str(tmp_path / "process0" / "multi"))
    == 100
  )


def test_batch_sharded_rls_equals_single_device():
  """One epoch of RLS and of the RLS+Adam hybrid on 1,024 MNIST images,
  batch 128 split over 4 devices: the P matrices, parameters and losses
  equal the single-device run to float32 rounding (the layer-input means are
  global-batch means)."""
  mnist_dir = shared_data_root() / "mnist"
  if not mnist_dir.is_dir():
    pytest.skip(f"MNIST not found at {mnist_dir}")
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO_ROOT)}
  result = subprocess.run(
    [sys.executable, str(SCRIPT.parent / "compare_rls.py"), str(mnist_dir)],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=900,
    env=env,
  )
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  results = [
    json.loads(line)
    for line in result.stdout.splitlines()
    if line.startswith("{")
  ]
  assert [r["optimizer"] for r in results] == ["rls", "rls_hybrid"]
  for r in results:
    assert r["num_P"] >= 1, r
    assert r["P"] < 1e-6 and r["state"] < 1e-5 and r["losses"] < 1e-5, r
