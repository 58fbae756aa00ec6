"""`scripts/reproduce.py`'s compare targets (`compare_online`): SnAp-1,
RFLO, UORO, KF-RTRL, KF-AVG, OK (and TBPTT) side by side: their configs at
both scales, the tables and figures on synthetic runs, and shrunken runs end
to end."""

from __future__ import annotations

import contextlib
import json
import os

from conftest import dataset_dir_or_skip
import pytest

from experiments import reproduce
from experiments.reproduce import common

COMPARE_TARGETS = ("compare_cosine", "compare_copy", "compare_ptb")

COMPARED = [
  "SnAp-1",
  "RFLO",
  "UORO",
  "KF-RTRL",
  "2-KF-AVG",
  "8-KF-AVG",
  "2-OK",
  "8-OK",
]


def test_compare_training_curves_are_valid_at_both_scales(
  tmp_path, monkeypatch
):
  """compare_copy and compare_ptb: every method's config builds; small: one
  learning rate (10^-2.5) and 2 seeds; paper: the official presets, 5 seeds
  and the paper's grid."""
  built = []
  monkeypatch.setattr(
    common,
    "run_curves",
    lambda curves, out, *a, **k: built.extend(curves) or [],
  )
  monkeypatch.setattr(common, "plot_curves", lambda *a, **k: "figure.png")
  for scale in common.SCALES:
    for name in ("compare_copy", "compare_ptb"):
      built.clear()
      reproduce.targets()[name][1](scale, str(tmp_path))
      truncation = {"compare_ptb": 25}.get(name, 50 if scale == "paper" else 20)
      assert [c.label for c in built] == COMPARED + [f"TBPTT-{truncation}"]
      assert {c.preset for c in built} == {
        "official"
        if scale == "paper"
        else ("small" if name == "compare_ptb" else "")
      }
      configs = [common.make_config(c) for c in built]
      assert [c.estimator for c in configs] == [
        "snap1",
        "rflo",
        "uoro",
        "kf",
        "kf_avg",
        "kf_avg",
        "ok",
        "ok",
        "tbptt",
      ]
      assert [c.rank for c in configs[4:8]] == [2, 8, 2, 8]
      for config in configs:
        assert (
          config.cell == "rhn" and config.num_steps % config.chunk_steps == 0
        )
        if scale == "paper":
          assert config.num_seeds == 5 and len(config.learning_rates) == 4
        else:
          assert config.num_seeds == 2
          assert tuple(config.learning_rates) == (10**-2.5,)
        if config.estimator == "tbptt":
          assert config.truncation == truncation
          assert config.chunk_steps % config.truncation == 0
        if name == "compare_ptb":
          assert config.eval_every % config.chunk_steps == 0


def test_compare_training_tables_on_synthetic_runs(tmp_path, monkeypatch):
  """The Copy and PTB tables: final T or BPC per method, the last train BPC,
  runs that diverged (a NaN loss at the end) and the program's median
  milliseconds per step without the first (compiling) record."""

  def fake_run_curve(curve, workdir, mode=common.RUN):
    os.makedirs(os.path.join(workdir, curve.dirname), exist_ok=True)
    runs = [{"seed": s, "learning_rate": 10**-2.5} for s in (0, 1)]
    broken = curve.label == "RFLO"
    last = [1.0, float("nan") if broken else 2.0]
    records = [
      {
        "step": step,
        "steps_per_second": rate,
        "curriculum_length": [step // 1000, step // 1000 + 2],
        "loss_bits": last,
        "train_bpc": last,
        **({"valid_bpc": [3.0, 3.5]} if step == 3000 else {}),
      }
      for step, rate in ((1000, 1.0), (2000, 100.0), (3000, 50.0))
    ]
    summary = {"best_valid_bpc": [3.0, 3.5], "test_bpc": [2.9, 3.4]}
    return records, summary, runs

  monkeypatch.setattr(common, "run_curve", fake_run_curve)
  for name, first in (("compare_copy", "curve"), ("compare_ptb", "model")):
    result = reproduce.targets()[name][1]("small", str(tmp_path))
    out = tmp_path / name
    assert (out / "figure.png").stat().st_size > 1000
    rows = {r[first]: r for r in json.loads((out / "table.json").read_text())}
    assert list(rows)[:8] == COMPARED and result.table == list(rows.values())
    for label, row in rows.items():
      assert row["learning_rate"] == 10**-2.5
      assert row["diverged"] == (label == "RFLO")
      assert row["program_runs"] == 2
      # Median of 100 and 50 steps/s: 1000 / 75 ms.
      assert row["program_ms_per_step"] == pytest.approx(1000 / 75)
  assert rows["8-OK"]["valid_bpc"] == pytest.approx(3.25)
  assert rows["8-OK"]["train_bpc"] == pytest.approx(1.5)
  assert rows["RFLO"]["train_bpc"] == pytest.approx(1.0)  # Finite runs only.
  copy_rows = json.loads((tmp_path / "compare_copy" / "table.json").read_text())
  assert copy_rows[0]["final_T_mean"] == 4 and "train_bpc" not in copy_rows[0]


def _fake_cosine(out, label, overrides):
  """A cosine run's records and summary, without running it."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  del overrides
  workdir = os.path.join(out, common.Curve(label, "", {}).dirname)
  os.makedirs(workdir, exist_ok=True)
  # A fresh log, as the cosine tool writes one (a log of two runs is refused).
  with contextlib.suppress(FileNotFoundError):
    os.remove(os.path.join(workdir, workdir_lib.METRICS_FILE))
  writer = workdir_lib.MetricsWriter(workdir)
  for step in (1, 2, 3):
    writer.write(
      {
        "step": step,
        **{
          f"{e}/{f}": 0.5
          for e in COMPARED
          for f in ("mean_cosine", "std_cosine")
        },
      }
    )
  return {
    "estimators": {
      e: {"mean_cosine": 0.5, "mean_std_cosine": 0.1, "final_mean_cosine": 0.5}
      for e in COMPARED
    }
  }


def test_compare_cosine_settings_figure_and_table(tmp_path, monkeypatch):
  """compare_cosine: untrained RHN, LSTM and GRU on char-PTB text, then the
  three cells trained on Copy by 8-OK (T capped), every one with the eight
  estimators; one panel per setting, the outside reference in the table's
  title."""
  from experiments.reproduce import compare_online  # pylint: disable=g-import-not-at-top
  from experiments.reproduce import cosine_figures  # pylint: disable=g-import-not-at-top

  settings, trained = [], []

  def fake_cosine(out, label, overrides, mode=common.RUN):
    settings.append((label, overrides))
    return _fake_cosine(out, label, overrides)

  def fake_train(out, label, experiment, overrides, preset="", mode=common.RUN):
    trained.append((label, experiment, overrides, preset))
    return os.path.join(out, label)

  monkeypatch.setattr(cosine_figures, "run_cosine", fake_cosine)
  monkeypatch.setattr(compare_online, "train_single", fake_train)
  for scale, untrained, size in (("paper", 64, 128), ("small", 64, 32)):
    settings.clear()
    trained.clear()
    result = reproduce.targets()["compare_cosine"][1](scale, str(tmp_path))
    assert [label for label, _ in settings] == [
      f"PTB, untrained {c}-{untrained}" for c in ("RHN", "LSTM", "GRU")
    ] + [f"Copy, trained {c}-{size}" for c in ("RHN", "LSTM", "GRU")]
    assert [t[2]["cell"] for t in trained] == ["rhn", "lstm", "gru"]
    for _, experiment, overrides, _ in trained:
      assert experiment == "copy_task" and overrides["estimator"] == "ok"
      assert overrides["rank"] == 8 and overrides["hidden_size"] == size
      assert overrides["max_length"] == (40 if scale == "paper" else 10)
    for label, overrides in settings:
      assert (
        overrides["estimators"]
        == "snap1,rflo,uoro,kf,kf_avg:2,kf_avg:8,ok:2,ok:8"
      )
      common.make_config(common.Curve(label, "gradient_cosine", overrides))
      if label.startswith("Copy"):
        assert overrides["checkpoint_dir"].endswith("Copy 8-OK")
        assert overrides["task"] == "copy"
      else:
        assert overrides["task"] == "ptb"
        assert overrides["params_per_repetition"]
    assert len(result.table) == 6 * 8
  out = tmp_path / "compare_cosine"
  assert (out / "figure.png").stat().st_size > 1000
  title = (out / "table.md").read_text().splitlines()[0]
  assert (
    "(small scale)" in title and "sketched-rtrl reports SnAp-1 0.505" in title
  )


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPARE_TARGETS)
def test_shrunken_compare_targets_end_to_end(name, tmp_path):
  """Each compare target (small) with 4-unit networks and a few steps: every
  method trains (or every estimator runs on every cell), the figure and the
  table are written. Compilation dominates: 1-3 minutes each on 2 cores."""
  if name != "compare_copy":
    dataset_dir_or_skip("ptb")
  shrink = dict(
    hidden_size=4,
    batch_size=2,
    num_steps=20,
    chunk_steps=10,
    log_every=10,
    checkpoint_every=20,
    eval_every=20,
    eval_batch_size=4096,
    truncation=5,
    repetitions=2,
  )
  result = reproduce.targets()[name][1](
    "small", str(tmp_path), common.Mode(shrink)
  )
  out = tmp_path / name
  assert (out / "figure.png").stat().st_size > 1000
  rows = json.loads((out / "table.json").read_text())
  assert rows == result.table
  if name == "compare_cosine":
    assert len(rows) == 6 * 8
    assert all(-1 <= r["mean_cosine"] <= 1 + 1e-6 for r in rows)
  else:
    assert [r.get("curve", r.get("model")) for r in rows][:8] == COMPARED
    assert all(r["diverged"] == 0 and r["program_runs"] == 2 for r in rows)
