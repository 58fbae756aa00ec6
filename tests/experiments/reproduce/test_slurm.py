"""`--launcher slurm` against a real SLURM (`scripts/slurm_local.sh start`
runs one on this machine; `.ci/run` starts it). Skipped, saying why, where
no cluster answers `sinfo`.

End to end, in one test (its jobs share the cluster's two CPUs): a target
through SLURM equals the local launcher's result bit for bit, with two of
its jobs signalled mid-run (`scancel --signal=TERM`, as preemption does,
and `--signal=USR2`, the time-limit signal) and requeued; a second target
submitted at once into the same workdir keeps to its folder, and its
failing jobs are reported with their logs and rerun commands. Bad input is
refused before anything is submitted."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time

from launched_runs import REPRODUCE
from launched_runs import TARGET
from launched_runs import assert_same_outputs
from launched_runs import log_text
from launched_runs import reproduce
from launched_runs import sets
import pytest

from experiments.reproduce import cli
from experiments.reproduce import records
from experiments.reproduce import slurm_checks
from experiments.reproduce import status

# Long enough that the signals land in mid-run on an idle machine too (at
# 1000 steps a program could end between two polls).
SETS = sets(3000)
# Jobs without GPUs, one CPU each, on the local cluster's default partition.
SLURM = ["--launcher", "slurm", "--gpus-per-node", "0", "--cpus-per-task", "1"]
SLURM += ["--timeout-min", "30"]
FAILING = "ok_fig7_8"  # the second target: fails at its config check
FAILING_SETS = ["--set", "hidden_size=-3"]


def _cluster_or_skip() -> None:
  if shutil.which("sinfo") is None:
    pytest.skip(
      "no SLURM here (`sinfo` is not installed): start a local one with "
      "`sudo bash scripts/slurm_local.sh start`"
    )
  try:
    done = subprocess.run(
      ["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=20
    )
  except subprocess.TimeoutExpired:
    pytest.skip("no SLURM cluster answers `sinfo` (timed out)")
  if done.returncode or not done.stdout.strip():
    pytest.skip(
      f"no SLURM cluster answers `sinfo` ({done.stderr.strip()[:200]}): "
      "start one with `sudo bash scripts/slurm_local.sh start`"
    )


def test_no_slurm_reachable_is_an_error_before_anything(
  tmp_path, monkeypatch, capsys
):
  """A cluster whose controller does not answer (or no SLURM at all)."""
  conf = tmp_path / "slurm.conf"
  conf.write_text(
    "ClusterName=nowhere\nSlurmctldHost=localhost\nSlurmctldPort=9\n"
    "AuthType=auth/munge\nNodeName=n CPUs=1\nPartitionName=p Nodes=n\n"
  )
  monkeypatch.setenv("SLURM_CONF", str(conf))
  code = cli.main([TARGET, *SETS, *SLURM, "--workdir", str(tmp_path)])
  assert code == 2
  assert "no SLURM reachable" in capsys.readouterr().err
  assert not (tmp_path / TARGET / "launch").exists()


def test_bad_partition_and_time_limits_are_errors_before_anything(
  tmp_path, capsys
):
  """Unknown partition; a time limit within the signal's delay; a time
  limit shorter than a program's checkpoint interval at the step time the
  plan measured. Nothing is submitted."""
  _cluster_or_skip()
  workdir = ["--workdir", str(tmp_path)]
  code = cli.main(
    [TARGET, *sets(1000), *SLURM, *workdir, "--partition", "nosuch"]
  )
  err = capsys.readouterr().err
  assert code == 2 and "--partition 'nosuch': no such partition" in err
  code = cli.main([TARGET, *sets(1000), *SLURM, *workdir, "--timeout-min", "1"])
  err = capsys.readouterr().err
  assert code == 2 and "--signal-delay-s 90 s before its end" in err
  # A plan measured at 10 s per step: 1000 steps between checkpoints of
  # the trained networks (their whole run), 1000 of a cosine run.
  (tmp_path / TARGET).mkdir(exist_ok=True)
  keys = [f"{TARGET}/trained-RHN-32", f"{TARGET}/trained-RHN-64"]
  rows = [{"key": k, "seconds_per_step": 10.0} for k in keys]
  (tmp_path / TARGET / "plan_small.json").write_text(json.dumps(rows))
  code = cli.main([TARGET, *sets(1000), *SLURM, *workdir])
  err = capsys.readouterr().err
  assert code == 2 and "shorter than one checkpoint interval" in err
  for key in keys:
    assert f"{key}: 1,000 steps between checkpoints x 10000.0 ms" in err
  assert not (tmp_path / TARGET / "launch").exists()


def test_workdir_the_jobs_cannot_see_is_an_error():
  mounts = "/dev/sda1 / ext4 rw 0 0\nserver:/home /shared nfs4 rw 0 0\n"
  nodes = ("gpu01", "gpu02")
  slurm_checks.check_shared(
    {"--workdir": "/shared/runs"}, nodes, "login", mounts
  )
  slurm_checks.check_shared(
    {"--workdir": "/tmp/runs"}, ("login",), "login", mounts
  )
  with pytest.raises(slurm_checks.LaunchError, match="--workdir /tmp/runs"):
    slurm_checks.check_shared(
      {"--workdir": "/tmp/runs"}, nodes, "login", mounts
    )
  assert slurm_checks.mount_type("/shared/runs/x", mounts) == "nfs4"


def test_time_limits_in_slurms_formats():
  assert slurm_checks.minutes("infinite") == math.inf
  assert slurm_checks.minutes("30") == 30
  assert slurm_checks.minutes("30:30") == 30.5
  assert slurm_checks.minutes("2:00:00") == 120
  assert slurm_checks.minutes("1-00:00:00") == 1440
  assert slurm_checks.minutes("2-12") == 2 * 1440 + 720


def _queued(*targets) -> dict:
  ids = [
    r["job_id"]
    for folder in targets
    for r in records.latest(str(folder)).values()
  ]
  return status.queue_states(ids)


def _record(folder, key: str) -> dict:
  return records.latest(str(folder)).get(key, {})


def _signal_in_mid_run(folder, key: str, signal: str, num_steps: int) -> bool:
  """Signals the job of `key` once its program has a record before its
  last step; returns whether it did."""
  metrics = folder / key.split("/", 1)[1] / "metrics.jsonl"
  record = _record(folder, key)
  if not record or not metrics.exists():
    return False
  lines = metrics.read_text().splitlines()
  try:  # The last line may be in the middle of its write.
    steps = [json.loads(line)["step"] for line in lines]
  except json.JSONDecodeError:
    return False
  if not steps or steps[-1] >= num_steps:
    return False
  subprocess.run(
    ["scancel", f"--signal={signal}", record["job_id"]], check=True
  )
  return True


def _status(workdir, target: str, *set_args: str) -> str:
  done = reproduce(target, *set_args, "--workdir", str(workdir), "--status")
  assert done.returncode == 0, done.stderr
  return done.stdout


def test_slurm_jobs_equal_the_local_launcher_through_requeues(tmp_path):
  _cluster_or_skip()
  workdir, alone = tmp_path / "runs", tmp_path / "alone"
  local = None
  here = reproduce(TARGET, *SETS, *SLURM, "--workdir", str(workdir))
  assert here.returncode == 0, here.stdout + here.stderr
  folder, failing = workdir / TARGET, workdir / FAILING
  try:
    again = reproduce(TARGET, *SETS, *SLURM, "--workdir", str(workdir))
    assert again.returncode == 2 and "still queued or running" in again.stderr
    other = reproduce(FAILING, *FAILING_SETS, *SLURM, "--workdir", str(workdir))
    assert other.returncode == 0, other.stdout + other.stderr
    # The local launcher, meanwhile, on the same target.
    local = subprocess.Popen(
      [sys.executable, REPRODUCE, TARGET, *SETS, "--workdir", str(alone)],
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
    )
    signals = {
      f"{TARGET}/trained-RHN-32": "TERM",
      f"{TARGET}/trained-RHN-64": "USR2",
    }
    signalled = {}
    deadline = time.time() + 1500
    while _queued(folder, failing) and time.time() < deadline:
      for key, signal in signals.items():
        if key not in signalled and _signal_in_mid_run(
          folder, key, signal, 3000
        ):
          signalled[key] = signal
      time.sleep(0.2)
    assert local.wait(timeout=900) == 0
    assert not _queued(folder, failing), "the jobs did not end in 25 min"
  finally:
    left = list(_queued(folder, failing))
    if left:
      subprocess.run(["scancel", *left], check=False)
    if local is not None and local.poll() is None:
      local.kill()
      local.wait()

  # Both signalled jobs were requeued and resumed from their checkpoints.
  assert signalled == signals, "a program ended before it was signalled"
  for key in signals:
    log = log_text(_record(folder, key))
    assert "checkpoint written" in log and "Requeued job" in log, key
    assert "Resumed from step" in log and "resuming at" in log, key

  # The figure, tables and every program's files equal the local run's.
  table = _status(workdir, TARGET, *SETS)
  assert "4 of 4 programs done." in table
  assert "| (collect) |" in table and "| DONE |" in table
  assert_same_outputs(alone / TARGET, folder)

  # The failing target: its own folder, its failures with log and command.
  report = _status(workdir, FAILING, *FAILING_SETS)
  for name in ("trained-fig7", "trained-fig8"):
    record = _record(failing, f"{FAILING}/{name}")
    assert record["log"].startswith(str(failing / "launch"))
    assert f"FAILED: {FAILING}/{name}\n  log: {record['log']}" in report
    assert "hidden_size must be a positive integer" in log_text(record)
    assert f"--program {FAILING}/{name}" in report
  for name in ("fig7", "fig8"):  # Never started: what they read failed.
    assert f"| {FAILING}/{name} |" in report and "ENDED" in report
  assert (failing / "INCOMPLETE.md").exists()
  assert not (failing / "figure.png").exists()
  assert sorted(p.name for p in workdir.iterdir()) == sorted([TARGET, FAILING])
  assert all(
    k.startswith(f"{TARGET}/") or k == status.COLLECT_KEY
    for k in records.latest(str(folder))
  )
  # Its rerun command runs it alone, here, and fails the same way.
  rerun = _record(failing, f"{FAILING}/trained-fig7")["command"]
  done = subprocess.run(rerun, capture_output=True, text=True, timeout=300)
  assert done.returncode and "hidden_size must be" in done.stderr
