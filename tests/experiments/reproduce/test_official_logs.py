"""The official OK code's logs, our `official` presets, the band check of
`ok_official_logs`, and `--plan`.

The slow test runs the target at small scale (Copy 50k steps, PTB 20k steps,
one seed each: about an hour on 2 cores) and asserts issue 24's bar: Copy T
within the official range +-1 at every 10k steps, PTB valid BPC within 0.02
of the range at 10k and 20k and the training moving average within 0.03 of it
at every 10k steps from 2k on.
"""

from __future__ import annotations

import os

from conftest import dataset_dir_or_skip
import numpy as np
import pytest

from experiments.data import official_logs
from experiments.reproduce import common
from experiments.reproduce import ok_official
from experiments.reproduce import plan


@pytest.fixture(scope="module")
def logs_dir():
  return str(dataset_dir_or_skip("official_ok_logs"))


def test_copy_log_rows_and_known_values(logs_dir):
  log = official_logs.load_copy(logs_dir)
  assert log.steps[0] == 1000 and len(log.steps) == 4005
  assert np.all(np.diff(log.steps) == 1000)
  assert log.band("curriculum_length", 10_000) == (4.0, 4.0, 4.0)
  low, _, high = log.band("curriculum_length", 100_000)
  assert (low, high) == (15.0, 17.0)
  # Only seed 1 ran past 2M steps.
  assert np.isfinite(log.values["curriculum_length"][-1]).sum() == 1
  assert log.band("curriculum_length", 4_005_000) == (52.0, 52.0, 52.0)


def test_ptb_log_rows_and_known_values(logs_dir):
  log = official_logs.load_ptb(logs_dir)
  assert len(log.steps) == 1000 and log.steps[-1] == 1_000_000
  # Valid BPC every 10k steps only.
  has_valid = np.isfinite(log.values["valid_bpc"]).all(axis=1)
  np.testing.assert_array_equal(
    log.steps[has_valid], np.arange(10_000, 1_000_001, 10_000)
  )
  low, _, high = log.band("valid_bpc", 10_000)
  assert 2.9704 < low < high < 2.9785
  low, _, high = log.band("train_loss_ema_bits", 1000)
  assert 3.140 < low < high < 3.147


def test_missing_logs_name_the_files(tmp_path, monkeypatch):
  monkeypatch.setenv("DATA_DIR", str(tmp_path))
  monkeypatch.setattr(official_logs, "COPY_FILE", "absent.csv")
  with pytest.raises(FileNotFoundError, match="absent.csv"):
    official_logs.find_dir(str(tmp_path))


def test_band_at_a_missing_step_is_an_error(logs_dir):
  with pytest.raises(KeyError, match="no row at step 1500"):
    official_logs.load_copy(logs_dir).band("curriculum_length", 1500)


def _result(label: str, records: list[dict], runs: int = 1):
  curve = common.Curve(label, "copy_task", {})
  return common.CurveResult(
    curve,
    "",
    records,
    {},
    [{"seed": s} for s in range(runs)],
    list(range(runs)),
    None,
  )


def test_band_rows_judge_against_the_widened_band(logs_dir):
  del logs_dir
  # Official Copy T is 4 (all seeds) at 10k and 7-8 at 20k; tolerance 1.
  copy = _result(
    "copy",
    [
      {
        "step": 10_000,
        "curriculum_length": [5, 5],
        "error_ema_bits": [0.2, 0.2],
      },
      {
        "step": 20_000,
        "curriculum_length": [10, 10],
        "error_ema_bits": [0.2, 0.2],
      },
    ],
    runs=2,
  )
  ptb = _result(
    "ptb",
    [
      {"step": 10_000, "train_loss_ema_bits": 3.2, "valid_bpc": 2.99},
      {"step": 20_000, "train_loss_ema_bits": 2.9, "valid_bpc": 2.80},
    ],
  )
  rows = {
    (r["task"], r["metric"], r["step"]): r
    for r in ok_official.band_rows([copy, ptb])
  }
  assert rows[("copy", "curriculum_length", 10_000)]["inside"] is True
  assert rows[("copy", "curriculum_length", 20_000)]["inside"] is False
  assert rows[("copy", "error_ema_bits", 10_000)]["inside"] is None
  assert rows[("ptb", "valid_bpc", 10_000)]["inside"] is True  # 2.978+.02
  assert rows[("ptb", "valid_bpc", 20_000)]["inside"] is False  # 2.697-.02
  assert rows[("ptb", "valid_bpc", 10_000)]["official_min"] == pytest.approx(
    2.97047, abs=1e-4
  )


def test_plan_mode_trains_nothing_and_counts_run_steps(tmp_path):
  curve = common.Curve(
    "tiny",
    "copy_task",
    dict(
      estimator="kf_avg",
      rank=2,
      hidden_size=8,
      batch_size=2,
      num_seeds=2,
      learning_rates=(1e-3, 3e-3),
      num_steps=10_000,
      chunk_steps=20,
      log_every=20,
      checkpoint_every=20,
    ),
  )
  mode = common.planning()
  records, summary, runs = common.run_curve(curve, str(tmp_path), mode)
  plans = mode.plans
  assert (records, summary) == ([], {})
  assert len(runs) == 4 and not os.listdir(tmp_path)
  (measured,) = plans
  assert (measured.runs, measured.num_steps, measured.run_steps) == (
    4,
    10_000,
    40_000,
  )
  assert 0 < measured.seconds_per_step < 1
  assert measured.peak_memory_mib > 50
  assert measured.expected_seconds == pytest.approx(
    10_000 * measured.seconds_per_step
  )
  text = plan.table("t", "small", plans)
  assert "| tiny | copy_task | 4 | 10,000 | 40,000 |" in text


@pytest.mark.slow
def test_small_scale_runs_sit_inside_the_official_bands(tmp_path, monkeypatch):
  monkeypatch.setenv("DATA_DIR", str(dataset_dir_or_skip("ptb").parent))
  result = ok_official.ok_official_logs("small", str(tmp_path))
  judged = [r for r in result.table if r["inside"] is not None]
  assert {r["metric"] for r in judged} == {
    "curriculum_length",
    "valid_bpc",
    "train_loss_ema_bits",
  }
  outside = [r for r in judged if not r["inside"]]
  assert not outside, outside
