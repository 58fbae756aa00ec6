"""Copy-task and char-PTB curves of online training, as the OK paper's
targets (`ok_paper.py`) and the estimator comparison (`compare_online.py`)
both draw them: the estimator fields of a curve, each task's base settings
at both scales, the paper's scores (final curriculum length, best validation
BPC) and each task's figure and table.

A table's rows hold what every such target reports (the selected learning
rate, mean and standard deviation over its seeds); `columns(result) -> dict`
adds the target's own (the paper's numbers, step times).
"""

from __future__ import annotations

from collections.abc import Callable
import os

import numpy as np

from experiments.reproduce import common
from experiments.reproduce.common import Curve

PAPER_LEARNING_RATES = (10**-2.5, 10**-3, 10**-3.5, 10**-4)
SMALL_LEARNING_RATES = (10**-2.5, 10**-3)

Columns = Callable[[common.CurveResult], dict]


def estimator(name: str, rank: int = 0, truncation: int = 0) -> dict:
  """A curve's estimator fields: `estimator`, and `rank` or `truncation`."""
  if name == "tbptt":
    return dict(estimator="tbptt", truncation=truncation)
  return dict(estimator=name, rank=rank) if rank else dict(estimator=name)


# --------------------------------------------------------------------------
# Copy task: curriculum length against steps.
# --------------------------------------------------------------------------


def copy_base(scale: str, batch_size: int) -> dict:
  """Paper: RHN-128, 5 seeds, the paper's rate grid, 4M steps; small: RHN-32,
  2 seeds, 2 rates, 20k steps; the official curriculum at both."""
  if scale == "paper":
    return dict(
      hidden_size=128,
      batch_size=batch_size,
      num_seeds=5,
      learning_rates=PAPER_LEARNING_RATES,
      num_steps=4_000_000,
      curriculum="official",
      chunk_steps=400,
      log_every=4000,
      checkpoint_every=40_000,
    )
  return dict(
    hidden_size=32,
    batch_size=batch_size,
    num_seeds=2,
    learning_rates=SMALL_LEARNING_RATES,
    num_steps=20_000,
    curriculum="official",
    chunk_steps=400,
    log_every=2000,
    checkpoint_every=4000,
  )


def copy_curve(label: str, scale: str, overrides: dict) -> Curve:
  """A Copy-task curve; at paper scale on the `official` preset (the
  official code's initialisation, clipping and curriculum)."""
  return Curve(
    label, "copy_task", overrides, "official" if scale == "paper" else ""
  )


def final_length(records, summary, run_index) -> float:
  """The score of a Copy run: its curriculum length at the last record."""
  del summary
  if not records:
    return float("nan")
  return float(
    common.per_run(records[-1]["curriculum_length"], run_index + 1)[run_index]
  )


def copy_figure(
  name: str,
  curves: list[Curve],
  workdir: str,
  title: str,
  scale: str,
  columns: Columns | None = None,
  mode: common.Mode = common.RUN,
) -> common.Result:
  """Runs `curves`, picks each one's learning rate by the mean final T;
  writes `figure.png` (T against steps) and the table (final T per curve,
  then `columns(result)`) under `workdir/name/`."""
  title = f"{title} ({scale} scale)"
  out = os.path.join(workdir, name)
  os.makedirs(out, exist_ok=True)
  results = common.run_curves(
    curves, out, final_length, higher_is_better=True, mode=mode
  )
  if mode.planning:  # Nothing ran (--plan, a launcher's listing).
    return common.Result(name, [], [])
  figure = common.plot_curves(
    results,
    "curriculum_length",
    "curriculum length T",
    title,
    os.path.join(out, "figure.png"),
  )
  rows = []
  for result in results:
    lengths = [final_length(result.records, {}, r) for r in result.best_runs]
    mean, std = common.mean_std(lengths)
    rows.append(
      {
        "curve": result.curve.label,
        "learning_rate": result.best_learning_rate,
        "final_T_mean": mean,
        "final_T_std": std,
        "seeds": len(result.best_runs),
        **(columns(result) if columns else {}),
      }
    )
  files = [figure] + common.write_table(rows, os.path.join(out, "table"), title)
  return common.Result(name, files, rows)


# --------------------------------------------------------------------------
# Char-PTB: validation BPC against steps, best valid and test BPC.
# --------------------------------------------------------------------------


def ptb_base(scale: str, batch_size: int) -> tuple[dict, str]:
  """`(overrides, preset)`. Paper: the `official` preset at RHN-256 and
  `batch_size`, 5 seeds, the paper's rate grid, 1M steps; small: the `small`
  preset (RHN-64) at half the batch, 2 seeds, 2 rates, 6k steps."""
  if scale == "paper":
    return dict(
      hidden_size=256,
      batch_size=batch_size,
      num_seeds=5,
      learning_rates=PAPER_LEARNING_RATES,
      num_steps=1_000_000,
      chunk_steps=100,
      log_every=1000,
      eval_every=10_000,
      checkpoint_every=10_000,
    ), "official"
  return dict(
    batch_size=batch_size // 2,
    num_seeds=2,
    learning_rates=SMALL_LEARNING_RATES,
    num_steps=6000,
    chunk_steps=100,
    log_every=500,
    eval_every=2000,
    checkpoint_every=2000,
  ), "small"


def best_valid(records, summary, run_index) -> float:
  """The score of a PTB run: its best validation BPC."""
  del records
  value = summary.get("best_valid_bpc")
  if value is None:
    return float("nan")
  return float(common.per_run(value, run_index + 1)[run_index])


def ptb_table(
  name: str,
  curves: list[Curve],
  workdir: str,
  setting: str,
  columns: Columns | None = None,
  mode: common.Mode = common.RUN,
) -> common.Result:
  """Runs `curves`, picks each one's learning rate by the mean best valid
  BPC; writes `figure.png` (valid BPC against steps) and the table (valid
  and test BPC per curve, then `columns(result)`) under `workdir/name/`;
  `setting` names the network in both titles."""
  out = os.path.join(workdir, name)
  os.makedirs(out, exist_ok=True)
  results = common.run_curves(
    curves, out, best_valid, higher_is_better=False, mode=mode
  )
  if mode.planning:  # Nothing ran (--plan, a launcher's listing).
    return common.Result(name, [], [])
  figure = common.plot_curves(
    results,
    "valid_bpc",
    "validation BPC",
    f"char-PTB, {setting}",
    os.path.join(out, "figure.png"),
  )
  rows = []
  for result in results:
    n = len(result.runs)
    valid = [
      common.per_run(result.summary.get("best_valid_bpc"), n)[r]
      for r in result.best_runs
    ]
    test = [
      common.per_run(result.summary.get("test_bpc"), n)[r]
      for r in result.best_runs
    ]
    (valid_mean, valid_std), (test_mean, test_std) = (
      common.mean_std(valid),
      common.mean_std(test),
    )
    rows.append(
      {
        "model": result.curve.label,
        "learning_rate": result.best_learning_rate,
        "valid_bpc": valid_mean,
        "valid_std": valid_std,
        "test_bpc": test_mean,
        "test_std": test_std,
        **(columns(result) if columns else {}),
      }
    )
  files = [figure] + common.write_table(
    rows, os.path.join(out, "table"), f"char-PTB BPC, {setting}"
  )
  return common.Result(name, files, rows)


# --------------------------------------------------------------------------
# Columns a target may add.
# --------------------------------------------------------------------------


def last_values(result: common.CurveResult, metric: str) -> list[float]:
  """`metric` at the last record that has it, for each selected run (NaN
  where the run diverged or never logged it)."""
  kept = [r for r in result.records if metric in r]
  if not kept:
    return [float("nan")] * len(result.best_runs)
  values = common.per_run(kept[-1][metric], len(result.runs))
  return [
    float("nan") if values[r] is None else float(values[r])
    for r in result.best_runs
  ]


def diverged(result: common.CurveResult, metric: str) -> int:
  """How many selected runs end with a non-finite `metric` (a stacked run
  that diverged goes on as NaN while the others train)."""
  if not result.records:
    return 0
  return int(sum(not np.isfinite(v) for v in last_values(result, metric)))


def ms_per_step(result: common.CurveResult) -> float | None:
  """The program's median milliseconds per step (all its runs at once) over
  its records, the first one (compilation) left out; None without records."""
  rates = [
    r["steps_per_second"]
    for r in result.records
    if isinstance(r.get("steps_per_second"), (int, float))
  ]
  rates = rates[1:] or rates
  if not rates:
    return None
  return float(1000 / np.median(rates))
