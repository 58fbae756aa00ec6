"""`experiments/studies/second_order/report.py`: which runs set each optimiser's time per
step (the interleaved timing for optax, K-FAC's own epochs, or its runs
timed apart), read from the per-seed JSON files the runners write."""

import json

import pytest

from experiments.studies.second_order import report


def write_run(workdir, task, label, seed, epoch_seconds):
  path = workdir / task / report.slug(label) / f"seed_{seed}.json"
  path.parent.mkdir(parents=True, exist_ok=True)
  records = [
    {"epoch": i + 1, "seconds": s} for i, s in enumerate(epoch_seconds)
  ]
  path.write_text(json.dumps({"records": records}))


def test_kfac_time_from_runs_timed_apart(tmp_path):
  loaded, quiet = tmp_path / "loaded", tmp_path / "quiet"
  for seed in range(3):
    write_run(loaded, "mnist", "K-FAC", seed, [46.8, 46.8])
  write_run(quiet, "mnist", "K-FAC", 0, [12.0, 9.36])
  results = report.read_results(loaded, "mnist", ["K-FAC", "Adam"], 3, 2)
  assert list(results) == ["K-FAC"] and len(results["K-FAC"]) == 3
  steps = report.steps_per_epoch("mnist")
  assert steps == 60_000 // 128
  timing = {"Adam": 0.0017}
  loaded_seconds = report.seconds_per_step("mnist", results, timing)
  assert loaded_seconds["K-FAC"] == pytest.approx(46.8 / steps)
  assert loaded_seconds["Adam"] == 0.0017
  apart = report.read_results(quiet, "mnist", ["K-FAC"], 1, 2)
  quiet_seconds = report.seconds_per_step("mnist", results, timing, apart)
  assert quiet_seconds["K-FAC"] == pytest.approx((12.0 + 9.36) / 2 / steps)


def test_unfinished_runs_are_left_out(tmp_path):
  write_run(tmp_path, "cifar10", "RLS-DA", 0, [17.9, 17.9])
  assert report.read_results(tmp_path, "cifar10", ["RLS-DA"], 1, 3) == {}
