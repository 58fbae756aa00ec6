"""`scripts/reproduce.py TARGET --plan` on every target `--list` prints, at
both scales (issue 52 item 1: the cosine targets once ended in
`AttributeError: 'num_seeds'`), and the plan's wall time on N devices.

Everything of `--plan` runs but the measuring child (`plan._run_child`,
faked: its records say 100 steps/s), so the test takes seconds; one real
`--plan` of a cosine target runs the exact command of the issue."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from conftest import dataset_dir_or_skip
from helpers import REPO_ROOT
import pytest

from experiments import reproduce
from experiments.reproduce import cli
from experiments.reproduce import plan
from experiments.reproduce import programs as programs_lib


def _listed_targets(capsys) -> list[str]:
  assert cli.main(["--list"]) == 0
  names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
  assert sorted(names) == sorted(reproduce.targets())
  return names


@pytest.fixture
def fake_measurement(monkeypatch):
  """The measuring child's outcome without a child: 100 steps/s, 64 MiB."""
  monkeypatch.setenv("DATA_DIR", str(dataset_dir_or_skip("ptb").parent))
  measured = []

  def run_child(experiment, config, workdir):
    del workdir
    measured.append((experiment, config))
    records = [{"step": s, "steps_per_second": 100.0} for s in (20, 40, 60)]
    return records, 1.0, 64.0

  monkeypatch.setattr(plan, "_run_child", run_child)
  return measured


@pytest.mark.parametrize("scale", ["small", "paper"])
def test_plan_runs_on_every_listed_target(
  scale, tmp_path, capsys, fake_measurement
):
  """Every target plans: one table row per program it lists, the wall
  time on one and on N devices, `plan_SCALE.md` and `.json` written."""
  for name in _listed_targets(capsys):
    fake_measurement.clear()
    code = cli.main(
      [name, "--scale", scale, "--plan", "--workdir", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0, (name, out)
    rows = [
      line
      for line in out.splitlines()
      if line.startswith("| ") and not line.startswith(("| program", "| total"))
    ]
    table_rows = rows[: len(fake_measurement)]
    assert len(table_rows) == len(fake_measurement), (name, out)
    assert "wall time on one CPU" in out, name
    saved = json.loads((tmp_path / name / f"plan_{scale}.json").read_text())
    assert len(saved) == len(fake_measurement), name
    assert (tmp_path / name / f"plan_{scale}.md").read_text().strip() in out
    if name == "rls_runtime":  # A short timing itself: no program.
      assert not fake_measurement
      continue
    assert fake_measurement, name
    for row in saved:
      assert row["runs"] >= 1 and math.isclose(row["seconds_per_step"], 0.01)


def test_plan_rows_have_keys_and_wall_time_on_n_devices(
  tmp_path, capsys, fake_measurement
):
  """ok_fig10_11 (small): two trained networks, then a cosine run on each;
  on 4 devices (one per program) its wall time is the longest training
  plus its cosine run, and `--devices 0,1` adds the 2-device column."""
  assert (
    cli.main(
      ["ok_fig10_11", "--plan", "--devices", "0,1", "--workdir", str(tmp_path)]
    )
    == 0
  )
  out = capsys.readouterr().out
  rows = json.loads((tmp_path / "ok_fig10_11" / "plan_small.json").read_text())
  assert [r["key"] for r in rows] == [
    "ok_fig10_11/trained-RHN-32",
    "ok_fig10_11/trained-RHN-64",
    "ok_fig10_11/RHN-32",
    "ok_fig10_11/RHN-64",
  ]
  seconds = [r["expected_seconds"] for r in rows]  # 100, 100, 2, 2 s
  reads = [[], [], [0], [1]]
  assert plan.wall_time(seconds, reads, 4) == pytest.approx(102)
  assert plan.wall_time(seconds, reads, 2) == pytest.approx(102)
  assert plan.wall_time(seconds, reads, 1) == pytest.approx(sum(seconds))
  header = [line for line in out.splitlines() if "wall time on one" in line]
  assert header == ["| wall time on one CPU | on 2 CPUs | on 4 CPUs |"]


def test_wall_time_schedules_after_what_a_program_reads():
  """List scheduling: programs in the target's order, one per device, each
  after the programs it reads."""
  # A (10 s) and B (1 s) independent; C (5 s) reads A; D (1 s) reads B.
  seconds, reads = [10.0, 1.0, 5.0, 1.0], [[], [], [0], [1]]
  assert plan.wall_time(seconds, reads, 1) == 17
  assert plan.wall_time(seconds, reads, 2) == 15  # C waits for A.
  assert plan.wall_time(seconds, reads, 8) == 15
  with pytest.raises(ValueError, match="read each other"):
    plan.wall_time([1.0, 1.0], [[1], [0]], 2)


def test_every_target_lists_distinct_programs_in_waves(tmp_path, monkeypatch):
  """Listing mode (what launchers, --status and --collect see) trains
  nothing; every program's key is its own; a program that reads another's
  checkpoint is in a later wave."""
  monkeypatch.setenv("DATA_DIR", str(dataset_dir_or_skip("ptb").parent))
  for name, (_, fn) in reproduce.targets().items():
    for scale in ("small", "paper"):
      target = programs_lib.Target(name, fn, scale, str(tmp_path))
      programs = target.programs()
      programs_lib.check_distinct(target, programs)
      waves = programs_lib.stages(programs)
      wave_of = {i: w for w, wave in enumerate(waves) for i in wave}
      for i, needs in enumerate(programs_lib.reads(programs)):
        assert all(wave_of[j] < wave_of[i] for j in needs), name
      assert not any(p.done for p in programs)
  assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_the_issues_plan_command_runs(tmp_path):
  """The command of issue 52, a real measuring child included (shrunk by
  --set to keep it short)."""
  env = dict(os.environ, DATA_DIR=str(dataset_dir_or_skip("ptb").parent))
  done = subprocess.run(
    [
      sys.executable,
      str(REPO_ROOT / "scripts" / "reproduce.py"),
      "ok_fig6",
      "--scale",
      "small",
      "--plan",
      "--workdir",
      str(tmp_path),
      "--set",
      "hidden_size=8",
      "--set",
      "repetitions=1",
      "--set",
      "estimators=ok:1",
    ],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )
  assert done.returncode == 0, done.stdout + done.stderr
  assert "| untrained-RHN-32 | gradient_cosine | 1 | 200 |" in done.stdout
  assert (tmp_path / "ok_fig6" / "plan_small.md").exists()
