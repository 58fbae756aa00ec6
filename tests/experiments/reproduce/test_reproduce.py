"""`scripts/reproduce.py` and the reproduction targets: the listing, the
paper's best-learning-rate selection, and a shrunken Figure 1 end to end
(every curve runs its seeds and learning rates as one program)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO_ROOT
import pytest

from experiments import reproduce
from experiments.reproduce import common

OK_TARGETS = (
  "ok_fig1",
  "ok_fig2_table2",
  "ok_fig5_table3",
  "ok_fig3",
  "ok_fig4",
  "ok_fig6",
  "ok_fig7_8",
  "ok_fig9",
  "ok_fig10_11",
  "ok_fig12",
)
COMPARE_TARGETS = ("compare_cosine", "compare_copy", "compare_ptb")


def test_list_prints_every_target():
  result = subprocess.run(
    [sys.executable, "scripts/reproduce.py", "--list"],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr
  listed = {line.split()[0] for line in result.stdout.splitlines() if line}
  assert set(OK_TARGETS) | set(COMPARE_TARGETS) <= listed
  # Each with its docstring.
  assert "sketched-rtrl reports SnAp-1 0.505" in result.stdout


def test_unknown_target_is_a_clear_error():
  result = subprocess.run(
    [sys.executable, "scripts/reproduce.py", "ok_fig99"],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 2 and "Unknown target 'ok_fig99'" in result.stderr


def test_select_learning_rate_takes_best_mean_and_treats_nan_as_worst():
  runs = [
    {"seed": s, "learning_rate": lr} for lr in (0.1, 0.01) for s in (0, 1)
  ]
  # lr 0.1: one seed diverged (NaN) -> worst; lr 0.01 wins on the mean.
  indices, rate = common.select_learning_rate(
    runs, [40.0, float("nan"), 30.0, 31.0], higher_is_better=True
  )
  assert rate == 0.01 and indices == [2, 3]
  indices, rate = common.select_learning_rate(
    runs, [1.5, 1.6, 1.7, 1.5], higher_is_better=False
  )
  assert rate == 0.1 and indices == [0, 1]


def test_every_experiment_module_has_the_train_the_targets_call():
  """`common.run_curve` calls `experiments.NAME.train(config, workdir)` for
  a curve of experiment NAME (configs/NAME.py): every such module has it."""
  import importlib  # pylint: disable=g-import-not-at-top

  # A config file is one defining get_config; configs/common.py holds shared
  # field blocks and is no experiment.
  names = sorted(
    p.stem
    for p in (REPO_ROOT / "configs").glob("*.py")
    if not p.stem.startswith("_") and "def get_config" in p.read_text()
  )
  assert {"mnist", "cifar10", "imdb", "copy_task", "ptb"} <= set(names)
  for name in names:
    module = importlib.import_module(f"experiments.{name}")
    assert callable(getattr(module, "train", None)), name


def test_every_curve_config_is_valid_at_both_scales(tmp_path, monkeypatch):
  """Building each Copy/PTB curve's config (paper and small) raises no
  unknown-field error: the targets and the config files agree."""
  built = []
  monkeypatch.setattr(
    common,
    "run_curves",
    lambda curves, out, *a, **k: built.extend(curves) or [],
  )
  monkeypatch.setattr(common, "plot_curves", lambda *a, **k: "figure.png")
  for scale in common.SCALES:
    for name in (
      "ok_fig1",
      "ok_fig4",
      "ok_fig12",
      "ok_fig2_table2",
      "ok_fig5_table3",
    ):
      reproduce.targets()[name][1](scale, str(tmp_path))
  assert len(built) == 2 * (4 + 5 + 4 + 4 + 4)
  for curve in built:
    config = common.make_config(curve)
    assert config.num_seeds >= 2 and len(config.learning_rates) >= 2
    assert config.num_steps % config.chunk_steps == 0
    if config.estimator == "tbptt":
      assert config.chunk_steps % config.truncation == 0


def test_fig1_glue_on_synthetic_runs(tmp_path, monkeypatch):
  """Selection, figure and table of ok_fig1 on synthetic curve results: the
  learning rate with the best mean final T wins, per curve."""

  def fake_run_curve(curve, workdir, mode=common.RUN):
    os.makedirs(os.path.join(workdir, curve.dirname), exist_ok=True)
    runs = [
      {"seed": s, "learning_rate": lr}
      for lr in (10**-2.5, 10**-3)
      for s in (0, 1)
    ]
    final = [5, 7, 9, 9] if curve.label.startswith("8-") else [6, 6, 2, 3]
    records = [
      {
        "step": step,
        "curriculum_length": [max(1, round(t * step / 2000)) for t in final],
      }
      for step in (1000, 2000)
    ]
    return records, {}, runs

  monkeypatch.setattr(common, "run_curve", fake_run_curve)
  reproduce.targets()["ok_fig1"][1]("small", str(tmp_path))
  rows = json.loads((tmp_path / "ok_fig1" / "table.json").read_text())
  by_curve = {r["curve"]: r for r in rows}
  assert by_curve["8-OK"]["learning_rate"] == 10**-3
  assert by_curve["8-OK"]["final_T_mean"] == 9
  assert by_curve["TBPTT-20"]["learning_rate"] == 10**-2.5
  assert by_curve["TBPTT-20"]["final_T_mean"] == 6
  assert by_curve["TBPTT-20"]["final_T_std"] == 0
  # Small-scale curves stand for the paper's: its number is next to ours.
  assert by_curve["8-OK"]["paper_curve"] == "16-OK"
  assert by_curve["8-OK"]["paper_T"] == 42
  assert by_curve["TBPTT-40"]["paper_curve"] == "TBPTT-80"
  assert (tmp_path / "ok_fig1" / "figure.png").stat().st_size > 1000
  assert "| 8-OK |" in (tmp_path / "ok_fig1" / "table.md").read_text()


@pytest.mark.slow
def test_shrunken_fig1_end_to_end(tmp_path):
  """ok_fig1 (small) with tiny networks and 400 steps: four curves, each
  2 seeds x 2 learning rates in one program; a figure and a table whose
  learning rates come from the grid; a rerun resumes (trains nothing)."""
  shrink = dict(
    hidden_size=4, num_steps=800, log_every=400, checkpoint_every=800
  )
  result = reproduce.targets()["ok_fig1"][1](
    "small", str(tmp_path), common.Mode(shrink)
  )
  out = tmp_path / "ok_fig1"
  assert (out / "figure.png").exists() and (out / "table.md").exists()
  rows = json.loads((out / "table.json").read_text())
  assert [r["curve"] for r in rows] == [
    "8-OK",
    "8-KF-AVG",
    "TBPTT-20",
    "TBPTT-40",
  ]
  for row in rows:
    assert row["learning_rate"] in (10**-2.5, 10**-3)
    assert row["seeds"] == 2 and row["final_T_mean"] >= 1
  saved = json.loads((out / "8-OK" / "config.json").read_text())
  assert len(saved["runs"]) == 4 and saved["hidden_size"] == 4
  assert result.table == rows
  metrics_before = (out / "8-OK" / "metrics.jsonl").read_text()
  reproduce.targets()["ok_fig1"][1]("small", str(tmp_path), common.Mode(shrink))
  assert (out / "8-OK" / "metrics.jsonl").read_text() == metrics_before


def test_cosine_targets_write_figure_and_table(tmp_path, monkeypatch):
  """ok_fig6 and ok_fig9 glue on synthetic cosine runs: `figure.png` (Figure
  9: cosine against size) and a table titled with the scale, under
  WORKDIR/TARGET/."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from experiments.reproduce import cosine_figures  # pylint: disable=g-import-not-at-top

  def fake_cosine(out, label, overrides, mode=common.RUN):
    del overrides
    workdir = os.path.join(out, common.Curve(label, "", {}).dirname)
    os.makedirs(workdir, exist_ok=True)
    writer = workdir_lib.MetricsWriter(workdir)
    for step in (1, 2, 3):
      writer.write(
        {
          "step": step,
          "2-OK/mean_cosine": 0.9,
          "2-OK/std_cosine": 0.05,
          "KF-RTRL/mean_cosine": None,
          "KF-RTRL/std_cosine": None,
        }
      )
    return {
      "estimators": {
        "2-OK": {
          "mean_cosine": 0.9,
          "mean_std_cosine": 0.05,
          "final_mean_cosine": 0.9,
        }
      }
    }

  monkeypatch.setattr(cosine_figures, "run_cosine", fake_cosine)
  for name in ("ok_fig6", "ok_fig9"):
    reproduce.targets()[name][1]("small", str(tmp_path))
    out = tmp_path / name
    assert (out / "figure.png").stat().st_size > 1000
    assert "(small scale)" in (out / "table.md").read_text().splitlines()[0]
  assert len(json.loads((tmp_path / "ok_fig9" / "table.json").read_text())) == 4


def test_finished_curve_is_read_not_rerun(tmp_path, monkeypatch):
  """A curve with its summary, its last record at num_steps and the same
  config is not trained again; a longer or different config is."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from experiments.reproduce import ok_paper  # pylint: disable=g-import-not-at-top

  curve = ok_paper._ptb_curves("small", 32)[0]  # pylint: disable=protected-access
  config = common.make_config(curve)
  curve_dir = tmp_path / curve.dirname
  workdir_lib.prepare(str(curve_dir), config, extra={"runs": [{"seed": 0}]})
  workdir_lib.MetricsWriter(str(curve_dir)).write(
    {"step": config.num_steps, "valid_bpc": [3.0]}
  )
  workdir_lib.write_json(
    str(curve_dir), workdir_lib.SUMMARY_FILE, {"best_valid_bpc": [3.0]}
  )
  trained = []
  monkeypatch.setattr(
    "experiments.ptb.train", lambda config, workdir: trained.append(workdir)
  )
  records, summary, runs = common.run_curve(curve, str(tmp_path))
  assert not trained and summary["best_valid_bpc"] == [3.0]
  assert records[-1]["step"] == config.num_steps and runs == [{"seed": 0}]
  common.run_curve(
    curve, str(tmp_path), common.Mode({"num_steps": config.num_steps + 100})
  )
  assert trained == [str(curve_dir)]


def test_finished_epoch_counted_curve_is_read_not_rerun(tmp_path, monkeypatch):
  """A classifier curve (counted in epochs: no `num_steps`) with its summary
  and the same config is read; a rerun used to fail on `num_steps`."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from experiments.reproduce import rls_paper  # pylint: disable=g-import-not-at-top

  curve = rls_paper._curve("mnist", "small", "adam_mse", "Adam")  # pylint: disable=protected-access
  config = common.make_config(curve)
  assert "num_steps" not in config
  curve_dir = tmp_path / curve.dirname
  workdir_lib.prepare(str(curve_dir), config, extra={"runs": [{"seed": 0}]})
  workdir_lib.MetricsWriter(str(curve_dir)).write({"step": 938, "epoch": 2})
  workdir_lib.write_json(str(curve_dir), workdir_lib.SUMMARY_FILE, {})
  trained = []
  monkeypatch.setattr(
    "experiments.mnist.train",
    lambda config, workdir: trained.append(workdir),
  )
  records, _, _ = common.run_curve(curve, str(tmp_path))
  assert not trained and records[-1]["epoch"] == 2
  common.run_curve(curve, str(tmp_path), common.Mode({"epochs": 3}))
  assert trained == [str(curve_dir)]


def test_only_trains_the_selected_curves(tmp_path, monkeypatch):
  """`Mode(only=...)`: a selected curve trains; an unselected one is read
  as far as it ran (not trained), or left empty when it never ran."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from experiments.reproduce import rls_paper  # pylint: disable=g-import-not-at-top

  trained = []

  def fake_train(config, workdir):
    trained.append(workdir)
    workdir_lib.prepare(workdir, config, extra={"runs": [{"seed": 0}]})
    workdir_lib.MetricsWriter(workdir).write({"step": 1, "loss": [0.5]})

  for dataset in ("mnist", "cifar10"):
    monkeypatch.setattr(f"experiments.{dataset}.train", fake_train)
  mnist = rls_paper._curve("mnist", "small", "rls", "RLS")  # pylint: disable=protected-access
  cifar = rls_paper._curve("cifar10", "small", "rls", "RLS")  # pylint: disable=protected-access
  mode = common.Mode(only=("mnist",))
  records, _, _ = common.run_curve(cifar, str(tmp_path), mode)
  assert records == [] and not trained
  records, _, _ = common.run_curve(mnist, str(tmp_path), mode)
  assert trained == [str(tmp_path / mnist.dirname)] and records[0]["step"] == 1
  # A partial unselected curve is read, still not trained.
  fake_train(common.make_config(cifar), str(tmp_path / cifar.dirname))
  records, _, _ = common.run_curve(cifar, str(tmp_path), mode)
  assert len(trained) == 2 and records[0]["loss"] == [0.5]


def test_only_mnist_target_tabulates_what_ran(tmp_path, monkeypatch):
  """`rls_fig2` with `--only mnist`: the MNIST curves train, the CIFAR-10
  and IMDB curves never ran, and the figure and tables hold MNIST alone (a
  rerun used to fail on the empty curves); the by-epoch table has each
  curve's seed means at the epochs reached, and the best epoch is that of
  the seeds' mean curve."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top
  from experiments.reproduce import rls_paper  # pylint: disable=g-import-not-at-top

  def fake_train(config, workdir):
    runs = [{"seed": 0}, {"seed": 1}]
    workdir_lib.prepare(workdir, config, extra={"runs": runs})
    writer = workdir_lib.MetricsWriter(workdir)
    for epoch, accuracy, loss in (
      (1, [0.98, 0.99], [0.2, 0.3]),
      (2, [0.97, 0.98], [0.05, 0.07]),
    ):
      writer.write(
        {
          "step": 469 * epoch,
          "epoch": [epoch, epoch],
          "test_accuracy": accuracy,
          "train_loss": loss,
          "train_loss_curve": [[0.2, 0.1], [0.3, 0.1]],
        }
      )

  monkeypatch.setattr("experiments.mnist.train", fake_train)
  result = rls_paper.rls_fig2(
    "small", str(tmp_path), common.Mode(only=("mnist",))
  )
  assert [row["curve"] for row in result.table] == [
    "mnist RLS",
    "mnist RLS+M",
    "mnist RLS+M+R",
    "mnist Adam",
  ]
  assert result.table[0]["test_accuracy_mean"] == pytest.approx(0.975)
  assert result.table[0]["best_test_accuracy"] == pytest.approx(0.985)
  assert result.table[0]["best_epoch"] == 1
  assert (tmp_path / "rls_fig2" / "figure.png").exists()
  by_epoch = json.loads((tmp_path / "rls_fig2" / "epochs.json").read_text())
  assert [(r["curve"], r["epoch"]) for r in by_epoch[:2]] == [
    ("mnist RLS", 1),
    ("mnist RLS", 2),
  ]
  assert len(by_epoch) == 8
  assert by_epoch[1]["train_loss_mean"] == pytest.approx(0.06)
  assert by_epoch[0]["test_accuracy_mean"] == pytest.approx(0.985)
