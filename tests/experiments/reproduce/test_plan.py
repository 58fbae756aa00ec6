"""`reproduce.py --plan` (experiments/reproduce/plan.py): every target
measures its programs and trains nothing; the short measuring configs; a
program whose measuring child is killed gets a row that says so."""

from __future__ import annotations

import math
import signal

from conftest import dataset_dir_or_skip
import pytest

from experiments import reproduce
from experiments.reproduce import common
from experiments.reproduce import plan

COMPARE_TARGETS = ("compare_cosine", "compare_copy", "compare_ptb")


def test_compare_targets_in_plan_mode(tmp_path, monkeypatch):
  """Under --plan the targets measure every program (here: record it) and
  train nothing; the cosine target writes no figure from runs that did not
  happen. A Copy cosine run is measured at its network's cell and size."""
  measured = []
  monkeypatch.setattr(
    plan,
    "measure",
    lambda label, experiment, config: measured.append(
      (label, experiment, config)
    ),
  )
  programs = {}
  for name in COMPARE_TARGETS:
    measured.clear()
    reproduce.targets()[name][1]("small", str(tmp_path), common.planning())
    programs[name] = list(measured)
  assert {name: [m[1] for m in p] for name, p in programs.items()} == {
    "compare_cosine": ["copy_task"] * 3 + ["gradient_cosine"] * 6,
    "compare_copy": ["copy_task"] * 9,
    "compare_ptb": ["ptb"] * 9,
  }
  assert not (tmp_path / "compare_cosine" / "figure.png").exists()
  for name in COMPARE_TARGETS:  # No curve's workdir: nothing trained.
    assert not [p for p in (tmp_path / name).iterdir() if p.is_dir()]
  copy_cosine = [config for _, _, config in programs["compare_cosine"][-3:]]
  assert [(c.cell, c.hidden_size) for c in copy_cosine] == [
    ("rhn", 32),
    ("lstm", 32),
    ("gru", 32),
  ]


def test_plan_measures_a_copy_cosine_run_without_its_checkpoint():
  """The short measuring config of a cosine run on a trained Copy network:
  a fresh network (same cost) and a positive sequence length in place of
  the checkpoint's curriculum length."""
  config = common.make_config(
    common.Curve(
      "c",
      "gradient_cosine",
      dict(
        checkpoint_dir="runs/x",
        task="copy",
        sequence_length=0,
        cell="gru",
        hidden_size=64,
      ),
    )
  )
  short, chunks, steps = plan._short_config("gradient_cosine", config)  # pylint: disable=protected-access
  assert short.checkpoint_dir == "" and short.sequence_length > 0
  assert (short.cell, short.hidden_size) == ("gru", 64)
  assert short.num_steps == chunks * steps


def test_every_target_runs_in_plan_mode(tmp_path, monkeypatch):
  """`--plan` on every target at paper scale measures at least one program
  and tabulates nothing (the RLS targets once crashed building rows from
  runs that plan mode does not train). `rls_runtime` is itself a short
  measurement and is left out."""
  monkeypatch.setenv("DATA_DIR", str(dataset_dir_or_skip("ptb").parent))
  measured = []
  monkeypatch.setattr(
    plan, "measure", lambda label, experiment, config: measured.append(label)
  )

  def trains(*args, **kwargs):
    raise AssertionError("a target trained in plan mode")

  # The mode reaches every curve: nothing trains, no cosine tool runs.
  monkeypatch.setattr(common, "train", trains)
  monkeypatch.setattr("experiments.online.cosine_experiment.run", trains)
  for name, (_, target) in reproduce.targets().items():
    if name == "rls_runtime":
      continue
    measured.clear()
    target("paper", str(tmp_path / name), common.planning())
    assert measured, name


def test_a_killed_measurement_is_a_row_not_a_crash(tmp_path, monkeypatch):
  """The child that measures a program is killed (here by SIGKILL, as the
  kernel's OOM killer does): the plan keeps a row with no time and the
  reason, the table says 'not measured' and counts it in the total, and
  the next program is measured as usual."""
  real_child_code = plan._child_code  # pylint: disable=protected-access
  monkeypatch.setattr(
    plan,
    "_child_code",
    lambda experiment, *a: (
      "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
      if experiment == "copy_task"
      else real_child_code(experiment, *a)
    ),
  )
  curve = common.Curve(
    "huge",
    "copy_task",
    dict(
      estimator="rtrl",
      hidden_size=8,
      batch_size=2,
      num_steps=1000,
      chunk_steps=20,
      log_every=20,
      checkpoint_every=20,
    ),
  )
  mode = common.planning()
  common.run_curve(curve, str(tmp_path), mode)
  (killed,) = mode.plans
  assert not killed.measured and math.isnan(killed.expected_seconds)
  assert f"killed by signal {int(signal.SIGKILL)} at" in killed.note
  assert killed.run_steps == 1000
  text = plan.table(
    "t",
    "paper",
    mode.plans + [plan.ProgramPlan("fine", "ptb", 1, 3600, 0.001, 100.0)],
  )
  assert "| huge | copy_task | 1 | 1,000 | 1,000 | - |" in text
  assert "not measured: killed by signal 9" in text
  assert "0.1 min + 1 program(s) not measured" in text


def test_an_xla_out_of_memory_error_is_a_row_too(tmp_path, monkeypatch):
  """XLA refusing an allocation is a Python error in the child, but a limit
  of the machine: a 'not measured' row naming the allocation."""
  monkeypatch.setattr(
    plan,
    "_child_code",
    lambda *a: (
      "raise RuntimeError('RESOURCE_EXHAUSTED: Out of memory allocating "
      "45834286192 bytes.')\n"
    ),
  )
  curve = common.Curve(
    "sweep",
    "copy_task",
    dict(
      hidden_size=8,
      batch_size=2,
      num_steps=100,
      chunk_steps=20,
      log_every=20,
      checkpoint_every=20,
    ),
  )
  mode = common.planning()
  common.run_curve(curve, str(tmp_path), mode)
  (row,) = mode.plans
  assert not row.measured
  assert row.note.startswith("XLA out of memory allocating 45834286192 bytes")


def test_a_failing_measurement_still_raises(tmp_path, monkeypatch):
  """A Python error in the child is a bug, not a machine limit."""
  monkeypatch.setattr(
    plan, "_child_code", lambda *a: "raise ValueError('broken experiment')\n"
  )
  curve = common.Curve(
    "bad",
    "copy_task",
    dict(
      hidden_size=8,
      batch_size=2,
      num_steps=100,
      chunk_steps=20,
      log_every=20,
      checkpoint_every=20,
    ),
  )
  with pytest.raises(RuntimeError, match="broken experiment"):
    common.run_curve(curve, str(tmp_path), common.planning())
