"""The `compare_suite` target (experiments/reproduce/compare_suite.py): its
methods as data, `--plan` measuring one program per (task, method), and a
shrunken run end to end (exact RTRL's cosine to its own shadow is 1), which
a rerun reads instead of training again."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import reproduce
from experiments.online import suite_runs
from experiments.reproduce import common
from experiments.reproduce import compare_suite
from experiments.reproduce import plan

TINY = {
  "tasks": "adding",
  "methods": "RTRL,UORO",
  "hidden_size": 4,
  "num_steps": 40,
  "timing_steps": 10,
}


def test_methods_cover_the_issue_list():
  labels = [m.label for m in compare_suite.methods(10)]
  for label in (
    "RTRL",
    "1-OK",
    "4-OK",
    "16-OK",
    "1-B-OK",
    "4-B-OK",
    "16-B-OK",
    "4-KF-AVG",
    "KF-RTRL",
    "4-SK-RTRL",
    "16-SK-RTRL",
    "SnAp-1",
    "SnAp-1 (90% sparse)",
    "SnAp-2 (90% sparse)",
    "SnAp-3 (90% sparse)",
    "RFLO",
    "UORO",
    "TBPTT-10",
  ):
    assert label in labels
  assert len(set(labels)) == len(labels)
  sparse = [m for m in compare_suite.methods(10) if "sparse" in m.label]
  assert all(m.cell == {"recurrent_density": 0.1} for m in sparse)


def test_unknown_task_or_method_names_it(tmp_path):
  for field, value in (("tasks", "nope"), ("methods", "9-XX")):
    with pytest.raises(ValueError, match=field):
      compare_suite.compare_suite(
        "small", str(tmp_path), common.Mode({field: value})
      )


def test_plan_measures_each_program_and_trains_nothing(tmp_path, monkeypatch):
  measured = []
  monkeypatch.setattr(
    plan,
    "measure",
    lambda label, experiment, config: measured.append((label, experiment)),
  )
  monkeypatch.setattr(
    suite_runs,
    "run_method",
    lambda *a, **k: pytest.fail("trained in plan mode"),
  )
  mode = common.planning({"tasks": "adding", "methods": "4-OK,TBPTT-10"})
  reproduce.targets()["compare_suite"][1]("paper", str(tmp_path), mode)
  assert measured == [
    ("adding: 4-OK", "online.suite_runs"),
    ("adding: TBPTT-10", "online.suite_runs"),
  ]
  # The measuring child's short config is a valid one for the program.
  task = compare_suite.suite.make_task("adding")
  method = compare_suite.methods(10)[-1]
  config = suite_runs.program_config(
    "adding", task.settings, method, compare_suite.SETTINGS["small"]
  )
  short, chunks, steps = plan._short_config("online.suite_runs", config)  # pylint: disable=protected-access
  assert short.num_steps == chunks * steps and steps % 10 == 0


def test_shrunken_run_end_to_end_and_resume(tmp_path, monkeypatch):
  result = compare_suite.compare_suite(
    "small", str(tmp_path), common.Mode(TINY)
  )
  rows = {row["method"]: row for row in result.table}
  assert list(rows) == ["RTRL", "UORO"]
  np.testing.assert_allclose(rows["RTRL"]["mean_cosine"], 1.0, atol=1e-5)
  assert -1 < rows["UORO"]["mean_cosine"] < 0.999
  assert rows["RTRL"]["tangent_floats"] > rows["UORO"]["tangent_floats"]
  assert rows["UORO"]["ms_per_step"] > 0
  out = tmp_path / "compare_suite"
  for name in ("table.md", "table.json", "cost.png", "curves.png"):
    assert (out / name).exists(), name
  saved = json.loads((out / "results" / "adding" / "UORO.json").read_text())
  assert saved["settings"]["hidden_size"] == 4
  assert len(saved["metric_last_fifth"]) == saved["settings"]["seeds"]
  # A rerun reads every (task, method) it has.
  monkeypatch.setattr(
    suite_runs, "run_method", lambda *a, **k: pytest.fail("ran again")
  )
  again = compare_suite.compare_suite("small", str(tmp_path), common.Mode(TINY))
  assert again.table == result.table
