"""The suite experiment (`experiments/online/suite_experiment.py`): records
carry the loss and the task metric, a rerun resumes exactly, TBPTT runs, and
bad task fields are named before any training."""

import json
import math

from helpers import load_config
import pytest

from experiments.online import suite_experiment


def tiny_config(preset="rotation_recall", **overrides):
  config = load_config(
    "suite_task",
    preset,
    hidden_size=8,
    chunk_steps=50,
    log_every=50,
    checkpoint_every=100,
    num_steps=200,
    truncation=25,
  )
  if preset == "rotation_recall":
    config.task_settings.update(dict(dim=2, length=8, recall=2))
  config.update(overrides)
  return config


def strip(records):
  return [
    {k: v for k, v in r.items() if not k.endswith("per_second")}
    for r in records
  ]


def read_records(workdir):
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  return strip([json.loads(line) for line in lines])


def test_rerun_resumes_and_matches_uninterrupted(tmp_path):
  suite_experiment.train(tiny_config(), str(tmp_path / "a"))
  suite_experiment.train(tiny_config(num_steps=100), str(tmp_path / "b"))
  suite_experiment.train(tiny_config(), str(tmp_path / "b"))
  whole, resumed = read_records(tmp_path / "a"), read_records(tmp_path / "b")
  assert resumed == whole
  assert [r["step"] for r in whole] == [50, 100, 150, 200]
  assert all(math.isfinite(r["mse"]) and r["loss"] > 0 for r in whole)


def test_shadow_rerun_resumes_and_matches_uninterrupted(tmp_path):
  shadow = dict(estimator="sk_rtrl", rank=2, shadow_every=1)
  suite_experiment.train(tiny_config(**shadow), str(tmp_path / "a"))
  suite_experiment.train(
    tiny_config(num_steps=100, **shadow), str(tmp_path / "b")
  )
  suite_experiment.train(tiny_config(**shadow), str(tmp_path / "b"))
  whole, resumed = read_records(tmp_path / "a"), read_records(tmp_path / "b")
  assert resumed == whole
  assert [r["step"] for r in whole] == [50, 100, 150, 200]
  assert all(-1.0 <= r["cosine_to_rtrl"] <= 1.0 for r in whole)
  assert all(math.isfinite(r["certificate"]) for r in whole)
  assert all(0.0 < r["certificate_finite_fraction"] <= 1.0 for r in whole)


def test_exact_rtrl_shadow_logs_cosine_one(tmp_path):
  record = suite_experiment.train(
    tiny_config(num_steps=100, shadow_every=2), str(tmp_path / "run")
  )
  assert record["cosine_to_rtrl"] == pytest.approx(1.0, abs=1e-6)
  assert "certificate" not in record


def test_no_shadow_no_cosine(tmp_path):
  record = suite_experiment.train(
    tiny_config(num_steps=50, checkpoint_every=50), str(tmp_path / "run")
  )
  assert "cosine_to_rtrl" not in record


@pytest.mark.parametrize(
  "overrides",
  [dict(shadow_every=-1), dict(shadow_every=1, estimator="tbptt")],
)
def test_bad_shadow_every_is_a_clear_error(tmp_path, overrides):
  with pytest.raises(ValueError, match="config.shadow_every"):
    suite_experiment.train(tiny_config(**overrides), str(tmp_path / "run"))
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize(
  "preset,metric", [("anbn", "sequences_solved"), ("henon", "mse")]
)
def test_tbptt_records_the_task_metric(tmp_path, preset, metric):
  record = suite_experiment.train(
    tiny_config(preset, estimator="tbptt", num_steps=100, checkpoint_every=100),
    str(tmp_path / "run"),
  )
  assert record["step"] == 100
  assert record[metric] >= 0.0 and math.isfinite(record["loss"])


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("task", "parity", "config.task"),
    ("estimator", "bptt", "config.estimator"),
    ("task_settings", dict(dim=2, length=8, recall=9), "recall"),
  ],
)
def test_bad_config_is_a_clear_error(tmp_path, field, value, match):
  config = tiny_config()
  if field == "task_settings":
    config.task_settings.update(value)
  else:
    setattr(config, field, value)
  with pytest.raises(ValueError, match=match):
    suite_experiment.train(config, str(tmp_path / "run"))
