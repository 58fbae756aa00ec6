"""The official OK code's training logs, as numbers (the ground truth of the
`official` presets; see `shared/data/official_ok_logs/README.md`).

Two CSV files, one row per 1000 steps, one column per seed and metric:

* `copy_16ok_rhn128_b16.csv`: `T_seed{1..5}` (curriculum length) and
  `loss_ema_bits_seed{1..5}` (the moving average that drives it); seed 1
  ran 4,005,000 steps, seeds 2-5 about 2M (their later cells are empty).
* `ptb_8ok_rhn256_b32.csv`: `train_loss_ema_bits_seed{1..5}` and, every
  10,000 steps, `valid_bpc_seed{1..5}`; 1M steps.

Found in `data_dir`, else `$DATA_DIR/official_ok_logs`, else
`../shared/data/official_ok_logs` beside the repository.
"""

from __future__ import annotations

import csv
import os
import pathlib
from typing import NamedTuple

import numpy as np

from experiments.data import files

NAME = "official_ok_logs"
COPY_FILE = "copy_16ok_rhn128_b16.csv"
PTB_FILE = "ptb_8ok_rhn256_b32.csv"
NUM_SEEDS = 5
# What each file holds: our metric name -> the file's column prefix.
COPY_METRICS = {"curriculum_length": "T", "error_ema_bits": "loss_ema_bits"}
PTB_METRICS = {
  "train_loss_ema_bits": "train_loss_ema_bits",
  "valid_bpc": "valid_bpc",
}


class OfficialLog(NamedTuple):
  """`steps` (S,) and, per metric, values (S, 5 seeds), NaN where a seed's
  log has no value at that step."""

  steps: np.ndarray
  values: dict[str, np.ndarray]

  def band(self, metric: str, step: int) -> tuple[float, float, float]:
    """`(min, mean, max)` over the seeds that logged `metric` at `step`."""
    index = int(np.searchsorted(self.steps, step))
    if index >= len(self.steps) or self.steps[index] != step:
      raise KeyError(f"the official log has no row at step {step}")
    row = self.values[metric][index]
    row = row[np.isfinite(row)]
    if not row.size:
      raise KeyError(f"no seed logged {metric} at step {step}")
    return float(row.min()), float(row.mean()), float(row.max())


def find_dir(data_dir: str | None = None) -> pathlib.Path:
  """The folder holding both CSV files (`data_dir`, else
  `$DATA_DIR/official_ok_logs`, else `../shared/data/official_ok_logs`
  beside the repository); a FileNotFoundError says where to put them."""
  given = files.data_folder(data_dir, NAME)
  repo = pathlib.Path(__file__).resolve().parents[2]
  folder = given or repo.parent / "shared" / "data" / NAME
  if (folder / COPY_FILE).is_file() and (folder / PTB_FILE).is_file():
    return folder
  raise FileNotFoundError(
    f"the official OK logs ({COPY_FILE}, {PTB_FILE}) were not found in "
    f"{folder}. {files.how_to_provide(NAME)}"
  )


def read(path: str | os.PathLike, metrics: dict[str, str]) -> OfficialLog:
  """Parses one log file; `metrics` maps our names to its column prefixes."""
  with open(path, newline="") as f:
    rows = list(csv.DictReader(f))
  if not rows:
    raise ValueError(f"{path}: no rows")
  missing = [
    f"{prefix}_seed{s}"
    for prefix in metrics.values()
    for s in range(1, NUM_SEEDS + 1)
    if f"{prefix}_seed{s}" not in rows[0]
  ]
  if missing or "step" not in rows[0]:
    raise ValueError(f"{path}: missing columns {missing or ['step']}")
  number = lambda text: float(text) if text.strip() else np.nan
  values = {
    name: np.array(
      [
        [number(row[f"{prefix}_seed{s}"]) for s in range(1, NUM_SEEDS + 1)]
        for row in rows
      ]
    )
    for name, prefix in metrics.items()
  }
  return OfficialLog(np.array([int(row["step"]) for row in rows]), values)


def load_copy(data_dir: str | None = None) -> OfficialLog:
  return read(find_dir(data_dir) / COPY_FILE, COPY_METRICS)


def load_ptb(data_dir: str | None = None) -> OfficialLog:
  return read(find_dir(data_dir) / PTB_FILE, PTB_METRICS)
