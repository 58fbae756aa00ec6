"""`experiments/studies/precision_bands.py`: tensorfloat32 against highest, judged by the
official OK logs. Copy's two workdirs are real tiny runs of the `official`
preset (on a CPU the two precisions train identically); PTB's are written in
the runner's record format (checked against the real Copy file) with values
placed relative to the official band."""

from __future__ import annotations

import json
import os

from conftest import dataset_dir_or_skip
import numpy as np
import pytest

from experiments.data import official_logs
from experiments.loop import workdir as workdir_lib
from experiments.loop.config_files import load_config
from experiments.online import copy_experiment
from experiments.reproduce import ok_official
from experiments.studies import precision_bands

# The official preset shrunk to a few seconds: 2 seeds, records at 500 and
# 1000 (the official log's first row).
TINY_COPY = dict(
  num_seeds=2,
  num_steps=1000,
  hidden_size=8,
  rank=2,
  batch_size=2,
  chunk_steps=500,
  log_every=500,
  checkpoint_every=1000,
)
PTB_SHIFT = 0.01  # tf32's PTB values sit this far above the widened band.


@pytest.fixture(scope="module")
def logs():
  folder = dataset_dir_or_skip("official_ok_logs")
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("DATA_DIR", str(folder.parent))
    yield official_logs.load_ptb()


def _write_records(path, records: list[dict], precision: str) -> None:
  """A workdir as the runner leaves it: its config and metrics.jsonl."""
  os.makedirs(path)
  workdir_lib.write_json(
    str(path), workdir_lib.CONFIG_FILE, {"matmul_precision": precision}
  )
  writer = workdir_lib.MetricsWriter(str(path))
  open(writer.path, "w").close()
  for record in records:
    writer.write(record)


def _ptb_records(log, shifted: bool, last: int) -> list[dict]:
  """2 seeds at official mean -+ 0.001 at every 1000 steps to `last` (valid
  BPC at 10,000); `shifted`: PTB_SHIFT above the band's top + tolerance."""
  records = []
  for step in range(1000, last + 1, 1000):
    record: dict = {"step": step}
    for metric in ("train_loss_ema_bits", "valid_bpc"):
      band = ok_official.official_band(log, metric, step)
      if band is None:
        continue
      center = band[1]
      if shifted:
        center = band[2] + ok_official.TOLERANCE[metric] + PTB_SHIFT
      record[metric] = [center - 0.001, center + 0.001]
    records.append(record)
  return records


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, logs):
  root = tmp_path_factory.mktemp("precision")
  for precision in precision_bands.PRECISIONS:
    config = load_config("copy_task", "official")
    config.update(TINY_COPY, matmul_precision=precision)
    copy_experiment.train(config, str(root / f"copy_{precision}"))
  # highest ran a step further than tf32: its last row has no tf32 value.
  _write_records(
    root / "ptb_highest", _ptb_records(logs, False, 11_000), "highest"
  )
  _write_records(
    root / "ptb_tensorfloat32",
    _ptb_records(logs, True, 10_000),
    "tensorfloat32",
  )
  return root


def test_written_records_have_the_runners_format(workdir, logs):
  """Per-run metrics are lists over the seeds beside an int `step`, as the
  real run writes them."""
  (real,) = [
    r
    for r in workdir_lib.read_metrics(str(workdir / "copy_highest"))
    if r["step"] == 1000
  ]
  written = _ptb_records(logs, False, 10_000)[-1]
  shape = lambda record, key: (type(record[key]), len(record[key]))
  assert type(real["step"]) is type(written["step"]) is int
  for key in ("curriculum_length", "error_ema_bits"):
    assert shape(real, key) == (list, TINY_COPY["num_seeds"])
    assert all(isinstance(v, (int, float)) for v in real[key])
  for key in ("train_loss_ema_bits", "valid_bpc"):
    assert shape(written, key) == (list, TINY_COPY["num_seeds"])


def test_real_copy_runs_compare_at_step_1000_only(workdir):
  runs = precision_bands.find_runs(str(workdir))
  assert set(runs) == {
    (t, p) for t in ("copy", "ptb") for p in precision_bands.PRECISIONS
  }
  assert runs["copy", "highest"].num_runs == 2
  rows = [
    r for r in precision_bands.precision_rows(runs) if r["task"] == "copy"
  ]
  # The 500-step records are not on the 1000-step grid.
  assert [(r["metric"], r["step"]) for r in rows] == [
    ("curriculum_length", 1000),
    ("error_ema_bits", 1000),
  ]
  (record,) = [
    r
    for r in workdir_lib.read_metrics(str(workdir / "copy_highest"))
    if r["step"] == 1000
  ]
  for row in rows:
    assert row["highest"] == pytest.approx(np.mean(record[row["metric"]]))
    # On a CPU tensorfloat32 changes nothing: the same training.
    assert row["tensorfloat32"] == row["highest"]
    assert row["difference"] == 0.0
  assert rows[1]["inside_highest"] is None  # No tolerance for the loss EMA.


def test_band_judgement_and_difference_on_ptb(workdir, logs):
  rows = precision_bands.precision_rows(precision_bands.find_runs(str(workdir)))
  train = [r for r in rows if r["metric"] == "train_loss_ema_bits"]
  assert [r["step"] for r in train] == list(range(1000, 11_001, 1000))
  assert train[0]["inside_highest"] is None  # Judged from step 2000.
  # Only highest reached 11,000: judged there alone, no difference.
  last = train[-1]
  assert last["inside_highest"] is True
  assert last["tensorfloat32"] is last["inside_tensorfloat32"] is None
  assert last["difference"] is None
  judged = [
    r for r in rows if r["task"] == "ptb" and 2000 <= r["step"] <= 10_000
  ]
  assert len(judged) == 9 + 1
  for row in judged:
    low, mean, high = ok_official.official_band(
      logs, row["metric"], row["step"]
    )
    tolerance = ok_official.TOLERANCE[row["metric"]]
    assert (row["official_min"], row["official_max"]) == (low, high)
    assert row["highest"] == pytest.approx(mean, abs=1e-12)
    assert row["inside_highest"] is True
    assert row["inside_tensorfloat32"] is False
    assert row["difference"] == pytest.approx(
      high + tolerance + PTB_SHIFT - mean, abs=1e-12
    )
    assert row["difference"] == pytest.approx(
      abs(row["tensorfloat32"] - row["highest"])
    )
  (valid,) = [r for r in rows if r["metric"] == "valid_bpc"]
  assert valid["step"] == 10_000
  summary = precision_bands.summarize(rows, "ptb", "train_loss_ema_bits")
  assert (summary["steps"], summary["judged_highest"]) == (11, 10)
  assert summary["judged_tensorfloat32"] == 9
  assert (summary["inside_highest"], summary["inside_tensorfloat32"]) == (
    10,
    0,
  )
  both = train[:-1]
  widths = [r["official_max"] - r["official_min"] for r in both]
  assert summary["max_difference"] == max(r["difference"] for r in both)
  assert summary["max_difference_over_band_width"] == pytest.approx(
    max(r["difference"] / w for r, w in zip(both, widths))
  )


def test_main_writes_tables_and_figure(workdir, tmp_path):
  files = precision_bands.main(
    ["--workdir", str(workdir), "--out", str(tmp_path / "out")]
  )
  assert [os.path.basename(f) for f in files] == [
    "precision_bands.md",
    "precision_bands.json",
    "precision_bands.png",
  ]
  assert all(os.path.getsize(f) > 0 for f in files)
  with open(files[0]) as f:
    text = f.read()
  assert text.count("\n## ") == len(ok_official.PANELS)
  assert (
    "Summary ptb/train_loss_ema_bits: 11 steps compared; inside: highest "
    "10/10, tf32 0/9 judged" in text
  )
  assert "Summary ptb/valid_bpc: 1 steps compared; inside: highest 1/1" in text
  with open(files[1]) as f:
    assert len(json.load(f)) == len(
      precision_bands.precision_rows(precision_bands.find_runs(str(workdir)))
    )


def test_only_one_precision_leaves_the_other_blank(workdir, tmp_path):
  os.symlink(workdir / "copy_highest", tmp_path / "copy_highest")
  rows = precision_bands.precision_rows(
    precision_bands.find_runs(str(tmp_path))
  )
  assert {r["task"] for r in rows} == {"copy"}
  assert all(r["tensorfloat32"] is None for r in rows)
  assert all(r["difference"] is None for r in rows)


def test_bad_workdirs_name_the_path(tmp_path):
  with pytest.raises(ValueError, match="holds none of.*copy_highest"):
    precision_bands.find_runs(str(tmp_path))
  _write_records(tmp_path / "ptb_tensorfloat32", [], "tensorfloat32")
  with pytest.raises(ValueError, match="ptb_tensorfloat32/metrics.jsonl"):
    precision_bands.find_runs(str(tmp_path))
  _write_records(tmp_path / "other", [{"step": 1000}], "highest")
  with pytest.raises(ValueError, match="matmul_precision is 'highest'"):
    precision_bands.read_run(str(tmp_path / "other"), "tensorfloat32")
