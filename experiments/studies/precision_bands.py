"""Training at `tensorfloat32` GEMMs against `highest`, both judged by the
official OK code's logs, at every 1000 steps that any run logged.

The runs (a GPU's work; each may be stopped by SIGTERM after a wall-clock
budget, its workdir then holds the steps it reached). The `official` presets
already log every 1000 steps and PTB's valid BPC every 10,000, as the
official logs do:

  python -m experiments.copy_task --config configs/copy_task.py:official \
    --config.num_seeds=5 --config.num_steps=N \
    --config.matmul_precision=highest --workdir W/copy_highest
  (the same with tensorfloat32 and --workdir W/copy_tensorfloat32)
  python -m experiments.ptb --config configs/ptb.py:official \
    --config.num_seeds=5 --config.num_steps=N \
    --config.matmul_precision=highest --workdir W/ptb_highest
  (the same with tensorfloat32 and --workdir W/ptb_tensorfloat32)

Then, for every panel of `experiments.reproduce.ok_official.PANELS` whose
runs exist (Copy's curriculum T and loss moving average, PTB's training-loss
moving average and valid BPC), a table of each precision's mean over seeds
next to the official min / mean / max, whether each is inside the band
widened by `ok_official.TOLERANCE` (judged from `ok_official.JUDGED_FROM`),
and |tensorfloat32 - highest|, with a summary line; written to
`DIR/precision_bands.md` (rows also as `.json`) with the figure
`DIR/precision_bands.png`:

  python -m experiments.studies.precision_bands --workdir W [--every 1000] [--out DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
import json
import os
from typing import NamedTuple
import warnings

import numpy as np

from experiments.loop import workdir as workdir_lib
from experiments.reproduce import common
from experiments.reproduce import ok_official

PRECISIONS = ("highest", "tensorfloat32")
# `ok_official.PANELS`' curve index -> the workdir's prefix (`copy_highest`).
TASKS = ("copy", "ptb")
COLORS = {"highest": "tab:blue", "tensorfloat32": "tab:orange"}


class PrecisionRun(NamedTuple):
  """One workdir: its records and how many runs (seeds) each one lists."""

  path: str
  records: list[dict]
  num_runs: int


def read_run(path: str, precision: str) -> PrecisionRun:
  """The records of the run in `path`, made at `precision`.

  Raises:
    ValueError: `path/metrics.jsonl` has no records, or `path/config.json`
      names another `matmul_precision`.
  """
  records = workdir_lib.read_metrics(path)
  if not records:
    raise ValueError(
      f"{os.path.join(path, workdir_lib.METRICS_FILE)}: no records (a run "
      "writes one every log_every steps)"
    )
  config_path = os.path.join(path, workdir_lib.CONFIG_FILE)
  if os.path.exists(config_path):
    with open(config_path) as f:
      saved = json.load(f).get("matmul_precision", precision)
    if saved != precision:
      raise ValueError(
        f"{config_path}: matmul_precision is {saved!r}, but the folder's "
        f"name says {precision!r}"
      )
  num_runs = max(
    (len(v) for r in records for v in r.values() if isinstance(v, list)),
    default=1,
  )
  return PrecisionRun(path, records, num_runs)


def find_runs(workdir: str) -> dict[tuple[str, str], PrecisionRun]:
  """`{(task, precision): run}` for each of `workdir/{copy,ptb}_{highest,
  tensorfloat32}` that exists.

  Raises:
    ValueError: none exists, or one has no records (see `read_run`).
  """
  names = [(task, p) for task in TASKS for p in PRECISIONS]
  runs = {
    (task, p): read_run(os.path.join(workdir, f"{task}_{p}"), p)
    for task, p in names
    if os.path.isdir(os.path.join(workdir, f"{task}_{p}"))
  }
  if not runs:
    raise ValueError(
      f"workdir {workdir!r} holds none of "
      f"{[f'{task}_{p}' for task, p in names]}"
    )
  return runs


def seed_series(run: PrecisionRun, metric: str):
  """`(steps (S,), values (runs, S), mean over runs (S,))` of `metric` where
  it was logged; the mean skips NaN seeds (NaN where all are)."""
  steps, values = common.series(
    run.records, metric, list(range(run.num_runs)), run.num_runs
  )
  with warnings.catch_warnings():  # An all-NaN step's mean is NaN: fine.
    warnings.simplefilter("ignore", RuntimeWarning)
    return steps, values, np.nanmean(values, axis=0)


def seed_means(run: PrecisionRun, metric: str) -> dict[int, float]:
  """`{step: mean over the runs' values of metric}` where it was logged."""
  steps, _, means = seed_series(run, metric)
  return {int(step): float(mean) for step, mean in zip(steps, means)}


def precision_rows(
  runs: Mapping[tuple[str, str], PrecisionRun], every: int = 1000
) -> list[dict]:
  """For each panel of `ok_official.PANELS` whose task has runs, a row at
  every `every` steps that any of its runs and the official log hold: each
  precision's mean over seeds (None where it did not reach the step), the
  official band, inside or not, and the absolute difference between the
  precisions (None unless both reached the step)."""
  rows = []
  for curve, metric, load, _ in ok_official.PANELS:
    task = TASKS[curve]
    means = {
      p: seed_means(runs[task, p], metric)
      for p in PRECISIONS
      if (task, p) in runs
    }
    if not means:
      continue
    log = load()
    reached = set.union(*(set(m) for m in means.values()))
    for step in sorted(s for s in reached if s % every == 0):
      band = ok_official.official_band(log, metric, step)
      if band is None:
        continue
      row: dict = {"task": task, "metric": metric, "step": step}
      for p in PRECISIONS:
        value = means[p].get(step) if p in means else None
        row[p] = value
        row[f"inside_{p}"] = (
          None
          if value is None
          else ok_official.inside_band(metric, step, value, band)
        )
      row.update(
        official_min=band[0],
        official_mean=band[1],
        official_max=band[2],
        tolerance=ok_official.TOLERANCE.get(metric),
        difference=(
          None
          if None in (row["tensorfloat32"], row["highest"])
          else abs(row["tensorfloat32"] - row["highest"])
        ),
      )
      rows.append(row)
  return rows


def summarize(rows: Sequence[dict], task: str, metric: str) -> dict:
  """One panel's rows in numbers: steps compared, judged and inside per
  precision, the largest |difference| and the largest ratio of a difference
  to the official band's width (max - min; steps where it is 0 are left
  out of the ratio)."""
  mine = [r for r in rows if (r["task"], r["metric"]) == (task, metric)]
  summary: dict = {"task": task, "metric": metric, "steps": len(mine)}
  for p in PRECISIONS:
    judged = [r[f"inside_{p}"] for r in mine if r[f"inside_{p}"] is not None]
    summary[f"judged_{p}"] = len(judged)
    summary[f"inside_{p}"] = sum(judged)
  differences = [r for r in mine if r["difference"] is not None]
  summary["max_difference"] = max(
    (r["difference"] for r in differences), default=None
  )
  ratios = [
    r["difference"] / (r["official_max"] - r["official_min"])
    for r in differences
    if r["official_max"] > r["official_min"]
  ]
  summary["max_difference_over_band_width"] = max(ratios, default=None)
  return summary


def _number(value, fmt: str = ".4f") -> str:
  return "" if value is None else format(value, fmt)


def _verdict(inside: bool | None) -> str:
  return {True: "yes", False: "**no**", None: "-"}[inside]


def markdown(rows: Sequence[dict]) -> str:
  """One table and summary line per panel that has rows."""
  lines = [
    "# Precision: tensorfloat32 against highest and the official OK logs",
    "",
    "Means over seeds; the official band is its 5 seeds' min / mean / max; "
    "inside: within the band widened by the tolerance (- : not judged).",
  ]
  for curve, metric, _, label in ok_official.PANELS:
    task = TASKS[curve]
    mine = [r for r in rows if (r["task"], r["metric"]) == (task, metric)]
    if not mine:
      continue
    tolerance = ok_official.TOLERANCE.get(metric)
    lines += [
      "",
      f"## {label} (`{metric}`, tolerance {_number(tolerance, 'g') or '-'})",
      "",
      "| step | highest | tf32 | official min | official mean | official max"
      " | highest inside | tf32 inside | \\|tf32 - highest\\| |",
      "|" + "---|" * 9,
    ]
    for r in mine:
      cells = [
        str(r["step"]),
        _number(r["highest"]),
        _number(r["tensorfloat32"]),
        _number(r["official_min"]),
        _number(r["official_mean"]),
        _number(r["official_max"]),
        *(
          "" if r[p] is None else _verdict(r[f"inside_{p}"]) for p in PRECISIONS
        ),
        _number(r["difference"], ".4g"),
      ]
      lines.append("| " + " | ".join(cells) + " |")
    s = summarize(rows, task, metric)
    lines += [
      "",
      f"Summary {task}/{metric}: {s['steps']} steps compared; inside: "
      f"highest {s['inside_highest']}/{s['judged_highest']}, tf32 "
      f"{s['inside_tensorfloat32']}/{s['judged_tensorfloat32']} judged; "
      f"max |tf32 - highest| {_number(s['max_difference'], '.4g') or '-'}; "
      "max |tf32 - highest| / official band width "
      f"{_number(s['max_difference_over_band_width'], '.3g') or '-'}.",
    ]
  return "\n".join(lines) + "\n"


def plot(runs: Mapping[tuple[str, str], PrecisionRun], path: str) -> str:
  """`ok_official`'s panels of each task that has runs: the official band in
  grey, each precision's mean over seeds (thick) and its seeds (thin)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  panels = [
    panel
    for panel in ok_official.PANELS
    if any((TASKS[panel[0]], p) in runs for p in PRECISIONS)
  ]  # find_runs found at least one task
  rows = (len(panels) + 1) // 2
  fig, axes = plt.subplots(rows, 2, figsize=(11, 3.75 * rows), squeeze=False)
  for ax, (curve, metric, load, label) in zip(axes.flat, panels):
    drawn = {
      p: seed_series(runs[TASKS[curve], p], metric)
      for p in PRECISIONS
      if (TASKS[curve], p) in runs
    }
    last = max((s.max() for s, _, _ in drawn.values() if s.size), default=0)
    ok_official.draw_official_band(ax, load(), metric, last or 1000)
    for p, (steps, values, means) in drawn.items():
      ax.plot(steps, values.T, color=COLORS[p], lw=0.5, alpha=0.5)
      ax.plot(
        steps,
        means,
        color=COLORS[p],
        lw=1.6,
        marker="o" if steps.size < 30 else None,
        label=f"{p}, mean of {len(values)} seeds",
      )
    ax.set(xlabel="training steps", ylabel=label)
    if not drawn:
      ax.set_title(f"no {TASKS[curve]}_* runs", fontsize="small")
    ax.legend(fontsize="small")
  fig.suptitle(
    "tensorfloat32 against highest GEMMs and the official OK logs",
    fontsize="medium",
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def main(argv: Sequence[str] | None = None) -> list[str]:
  """Reads the runs, prints the tables and writes them and the figure;
  returns the files written."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--every", type=int, default=1000)
  parser.add_argument("--out", default=None, help="default: --workdir")
  args = parser.parse_args(argv)
  if args.every < 1:
    parser.error(f"--every must be a positive integer, got {args.every}")
  runs = find_runs(args.workdir)
  out = args.out or args.workdir
  os.makedirs(out, exist_ok=True)
  rows = precision_rows(runs, args.every)
  text = markdown(rows)
  print(text, end="", flush=True)
  stem = os.path.join(out, "precision_bands")
  with open(stem + ".md", "w") as f:
    f.write(text)
  with open(stem + ".json", "w") as f:
    json.dump(rows, f, indent=2)
  return [stem + ".md", stem + ".json", plot(runs, stem + ".png")]


if __name__ == "__main__":
  main()
