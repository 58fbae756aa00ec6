"""`--launcher local --devices`: a target's programs as parallel processes,
one per device (fake device ids on a CPU), end equal to the in-process
launcher's, bit for bit; `--status`, `--program` and `--collect` on the
same workdirs, a missing program marked."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket

from launched_runs import TARGET
from launched_runs import assert_same_outputs
from launched_runs import reproduce
from launched_runs import sets

from experiments.reproduce import cli
from experiments.reproduce import collect
from experiments.reproduce import records

SETS = sets(200)
PROGRAMS = [
  f"{TARGET}/trained-RHN-32",
  f"{TARGET}/trained-RHN-64",
  f"{TARGET}/RHN-32",
  f"{TARGET}/RHN-64",
]


def test_devices_launcher_equals_in_process_launcher(tmp_path, capsys):
  """Four programs on devices 0 and 1 (a cosine run after the network it
  reads): the same files as one process training them one after another;
  each program ran in its own process with its device, logged, recorded,
  and listed DONE by --status; a rerun starts nothing."""
  alone, parallel = tmp_path / "alone", tmp_path / "parallel"
  assert cli.main([TARGET, *SETS, "--workdir", str(alone)]) == 0
  done = reproduce(
    TARGET, *SETS, "--workdir", str(parallel), "--devices", "0,1"
  )
  assert done.returncode == 0, done.stdout + done.stderr
  assert_same_outputs(alone / TARGET, parallel / TARGET)

  launched = records.latest(str(parallel / TARGET))
  assert sorted(launched) == sorted(PROGRAMS)
  assert {r["device"] for r in launched.values()} == {"0", "1"}
  for key, record in launched.items():
    assert record["returncode"] == 0, key
    log = pathlib.Path(record["log"]).read_text()
    assert f"CUDA_VISIBLE_DEVICES={record['device']} " in log, key
    assert f"--program {key}" in log
  capsys.readouterr()
  assert cli.main([TARGET, *SETS, "--workdir", str(parallel), "--status"]) == 0
  status = capsys.readouterr().out
  for key, record in launched.items():
    assert f"| {key} | {record['job_id']} | DONE | 200/200 | - |" in status
  assert "4 of 4 programs done." in status

  again = reproduce(TARGET, *SETS, "--workdir", str(parallel), "--devices", "0")
  assert again.returncode == 0 and "started" not in again.stdout
  assert records.latest(str(parallel / TARGET)) == launched

  # --collect reads the same runs into the same files; with a cosine run
  # unfinished it marks the figure and table and exits non-zero.
  assert cli.main([TARGET, *SETS, "--workdir", str(parallel), "--collect"]) == 0
  assert_same_outputs(alone / TARGET, parallel / TARGET)
  shutil.copytree(parallel, tmp_path / "partial")
  partial = tmp_path / "partial" / TARGET
  (partial / "RHN-64" / "summary.json").unlink()
  argv = [TARGET, *SETS, "--workdir", str(tmp_path / "partial"), "--collect"]
  assert cli.main(argv) == collect.INCOMPLETE_EXIT
  message = f"INCOMPLETE: 1 program(s) of {TARGET} missing or unfinished"
  assert (
    f"{message}: {TARGET}/RHN-64" in (partial / "INCOMPLETE.md").read_text()
  )
  assert message in (partial / "table.md").read_text()
  figure = (partial / "figure.png").read_bytes()
  assert figure != (alone / TARGET / "figure.png").read_bytes()
  assert len(json.loads((partial / "table.json").read_text())) == 1  # RHN-32
  # Finished again: a complete collect, bit for bit, and no marker.
  shutil.copy(parallel / TARGET / "RHN-64" / "summary.json", partial / "RHN-64")
  assert cli.main(argv) == 0
  assert not (partial / "INCOMPLETE.md").exists()
  for name in ("figure.png", "table.json", "table.md"):
    assert (partial / name).read_bytes() == (alone / TARGET / name).read_bytes()


def test_program_runs_one_program_and_names_unknown_ones(tmp_path, capsys):
  """`--program KEY` trains that program alone, into the target's layout;
  a program it reads that is missing is a clear error of the program; an
  unknown key lists the target's keys."""
  workdir = ["--workdir", str(tmp_path)]
  code = cli.main([TARGET, *SETS, *workdir, "--program", "no/such"])
  err = capsys.readouterr().err
  assert code == 2 and "has no such program" in err
  assert all(key in err for key in PROGRAMS)
  key = f"{TARGET}/trained-RHN-32"
  assert cli.main([TARGET, *SETS, *workdir, "--program", key]) == 0
  trained = tmp_path / TARGET / "trained-RHN-32"
  assert (trained / "checkpoint_0000000200.msgpack").exists()
  assert sorted(p.name for p in (tmp_path / TARGET).iterdir()) == [
    "trained-RHN-32"
  ]
  capsys.readouterr()
  assert cli.main([TARGET, *SETS, *workdir, "--program", key]) == 0
  assert "finished" in capsys.readouterr().out


def test_status_of_a_running_program_has_steps_and_eta(tmp_path, capsys):
  """A program whose process runs (here: this test's own, as a local
  launcher records it) shows its steps reached and the ETA at its last
  steps per second; one with records and no launch record is UNFINISHED."""
  workdir = ["--workdir", str(tmp_path)]
  trained = tmp_path / TARGET / "trained-RHN-32"
  trained.mkdir(parents=True)
  records_ = [{"step": 50 * i, "steps_per_second": 10.0} for i in (1, 2)]
  (trained / "metrics.jsonl").write_text(
    "".join(json.dumps(r) + "\n" for r in records_)
  )
  (tmp_path / TARGET / "RHN-32").mkdir()
  (tmp_path / TARGET / "RHN-32" / "metrics.jsonl").write_text('{"step": 5}\n')
  record = {
    "key": f"{TARGET}/trained-RHN-32",
    "launcher": "local",
    "job_id": str(os.getpid()),
    "host": socket.gethostname(),
    "log": "-",
    "command": ["x"],
  }
  records.append(str(tmp_path / TARGET), [record])
  assert cli.main([TARGET, *SETS, *workdir, "--status"]) == 0
  text = capsys.readouterr().out
  running = f"| {TARGET}/trained-RHN-32 | {os.getpid()} | RUNNING | 100/200 |"
  assert f"{running} 0.2 min |" in text  # 100 steps left at 10 steps/s
  assert (
    f"| {TARGET}/RHN-32 | - | UNFINISHED (no job recorded) | 5/200 |" in text
  )
  assert f"| {TARGET}/RHN-64 | - | NOT STARTED | 0/200 | - |" in text
