"""What every reproduction target shares: curves of runs, the paper's
best-learning-rate selection, figures and result tables.

A target is a small function `(scale, workdir, mode=RUN) -> Result` (see
`ok_paper.py`); `mode` (a `Mode`, `modes.py`) says whether to train, plan,
list its programs for a launcher or collect, and which fields to override
in every curve, and is passed down to every curve. It describes each curve
of a figure as a `Curve`: an
experiment (`copy_task`, `ptb`, ...), its config preset and overrides. Each
curve runs as ONE program over all its seeds and learning rates (the run
loop's run axis, `experiments/loop/run_axes.py`), in its own sub-workdir, so a
rerun of the target resumes every curve where it stopped and skips finished
ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import importlib
import json
import os
from typing import Any

import numpy as np

from experiments.loop import checkpoints
from experiments.loop import run_axes
from experiments.loop import workdir as workdir_lib
from experiments.loop.config_files import load_config
from experiments.reproduce import modes
from experiments.reproduce import plan

SCALES = ("small", "paper")

# How a target runs and the gate of its programs (`modes.py`), named here
# as the targets and launchers name them.
Mode = modes.Mode
RUN = modes.RUN
Program = modes.Program
TRAIN, READ, SKIP = modes.TRAIN, modes.READ, modes.SKIP
planning, listing, collecting = modes.planning, modes.listing, modes.collecting
visit = modes.visit


@dataclasses.dataclass(frozen=True)
class Curve:
  """One curve of a figure (or row of a table): one experiment config, run
  for every seed and learning rate of the grid at once."""

  label: str
  experiment: str  # module under experiments/, e.g. 'copy_task'
  overrides: dict[str, Any]
  preset: str = ""  # configs/<experiment>.py preset

  @property
  def dirname(self) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in self.label)


@dataclasses.dataclass
class CurveResult:
  curve: Curve
  workdir: str
  records: list[dict]
  summary: dict
  runs: list[dict]
  best_runs: list[int]  # run indices of the selected learning rate
  best_learning_rate: float | None


@dataclasses.dataclass
class Result:
  """What a target made: files written and the numbers for its table."""

  name: str
  files: list[str]
  table: list[dict]


def make_config(curve: Curve, mode: Mode = RUN):
  """The curve's config: its preset, its overrides, then the mode's."""
  config = load_config(curve.experiment, curve.preset)
  unknown = sorted(set(curve.overrides) - set(config.keys()))
  if unknown:
    raise ValueError(
      f"curve {curve.label!r}: configs/{curve.experiment}.py "
      f"has no field(s) {unknown}"
    )
  config.update(curve.overrides)
  config.update({k: v for k, v in mode.overrides.items() if k in config})
  return config


# Experiments whose run writes no `summary.json` (their `Experiment` has no
# `finish`): finished once their newest checkpoint is at `num_steps`.
NO_SUMMARY = frozenset({"copy_task"})


def _finished(config, curve_dir: str, experiment: str = "") -> bool:
  """The curve ran to its end with this very config and wrote its summary
  (the run loop writes it last; an experiment in `NO_SUMMARY` its last
  checkpoint): a rerun only reads it (the run loop would redo the
  experiment's `finish`, e.g. PTB's test-set evaluation of every run).
  Step-counted configs also check the last record reached `num_steps`;
  epoch-counted ones (the classifiers) have none."""
  config_path = os.path.join(curve_dir, workdir_lib.CONFIG_FILE)
  if not os.path.exists(config_path):
    return False
  if experiment in NO_SUMMARY:
    last = checkpoints.latest_checkpoint_step(curve_dir)
    if last is None or last < config.num_steps:
      return False
  elif not os.path.exists(os.path.join(curve_dir, workdir_lib.SUMMARY_FILE)):
    return False
  records = workdir_lib.read_metrics(curve_dir)
  if not records:
    return False
  if "num_steps" in config and records[-1].get("step", 0) < config.num_steps:
    return False
  with open(config_path) as f:
    saved = json.load(f)
  saved.pop("runs", None)
  return not workdir_lib.config_differences(
    saved, workdir_lib._to_jsonable(config)
  )  # pylint: disable=protected-access


def train(experiment: str, config, workdir: str) -> None:
  """`experiments.<experiment>.train(config, workdir)`."""
  importlib.import_module(f"experiments.{experiment}").train(config, workdir)


def run_curve(
  curve: Curve, workdir: str, mode: Mode = RUN
) -> tuple[list[dict], dict, list]:
  """Trains (or resumes) one curve; returns its records, summary and runs.
  A finished curve (same config) is read, not rerun. In plan mode it only
  measures the curve's program, and in listing mode it trains only the
  chosen program (`Mode`): no records, no summary otherwise."""
  config = make_config(curve, mode)
  grid = run_axes.run_grid(
    config, tuple(name for name in plan.SWEPT if name in config)
  )
  curve_dir = os.path.join(workdir, curve.dirname)
  finished = mode.plans is None and _finished(
    config, curve_dir, curve.experiment
  )
  todo = visit(
    mode, Program(curve.label, curve.experiment, config, curve_dir, finished)
  )
  selected = not mode.only or any(part in curve.label for part in mode.only)
  if todo == SKIP:
    return [], {}, grid
  if todo == READ or not selected:
    if not os.path.exists(os.path.join(curve_dir, workdir_lib.CONFIG_FILE)):
      print(f"=== {curve.label}: not run", flush=True)
      return [], {}, grid
    if not finished:
      print(f"=== {curve.label}: not finished, read as it is", flush=True)
  elif finished:
    print(f"=== {curve.label}: finished in {curve_dir}", flush=True)
  else:
    print(f"=== {curve.label} -> {curve_dir}", flush=True)
    train(curve.experiment, config, curve_dir)
  with open(os.path.join(curve_dir, workdir_lib.CONFIG_FILE)) as f:
    saved = json.load(f)
  runs = saved.get("runs") or grid
  summary_path = os.path.join(curve_dir, workdir_lib.SUMMARY_FILE)
  summary = {}
  if os.path.exists(summary_path):
    with open(summary_path) as f:
      summary = json.load(f)
  return workdir_lib.read_metrics(curve_dir), summary, runs


def per_run(value: Any, num_runs: int) -> list:
  """A metric as a list over runs (a single run's scalar becomes `[x]`)."""
  return list(value) if isinstance(value, list) else [value] * num_runs


def select_learning_rate(
  runs: list[dict], scores: Sequence[float], higher_is_better: bool
) -> tuple[list[int], Any]:
  """The paper's protocol: the learning rate whose mean score over seeds is
  best. Runs that diverged (NaN) count as the worst score.

  Returns:
    `(run indices of that learning rate, the learning rate)`.
  """
  by_rate: dict[Any, list[int]] = {}
  for index, run in enumerate(runs):
    by_rate.setdefault(run.get("learning_rate"), []).append(index)
  worst = -np.inf if higher_is_better else np.inf

  def mean_score(indices):
    values = [
      scores[i] if scores[i] is not None and np.isfinite(scores[i]) else worst
      for i in indices
    ]
    return float(np.mean(values))

  pick = max if higher_is_better else min
  rate = pick(by_rate, key=lambda r: mean_score(by_rate[r]))
  return by_rate[rate], rate


def run_curves(
  curves: Sequence[Curve],
  workdir: str,
  score: Callable[[list[dict], dict, int], float],
  higher_is_better: bool,
  mode: Mode = RUN,
) -> list[CurveResult]:
  """Runs every curve and selects each one's learning rate by `score(records,
  summary, run_index)`."""
  results = []
  for curve in curves:
    records, summary, runs = run_curve(curve, workdir, mode)
    scores = [score(records, summary, r) for r in range(len(runs))]
    best, rate = select_learning_rate(runs, scores, higher_is_better)
    results.append(
      CurveResult(
        curve,
        os.path.join(workdir, curve.dirname),
        records,
        summary,
        runs,
        best,
        rate,
      )
    )
  return results


def series(
  records: list[dict], metric: str, runs: list[int], num_runs: int
) -> tuple[np.ndarray, np.ndarray]:
  """`(steps, values (len(runs), len(steps)))` of `metric` over records that
  have it."""
  kept = [r for r in records if r.get(metric) is not None]
  steps = np.array([r["step"] for r in kept])
  values = np.array(
    [
      [
        np.nan if v is None else v
        for v in (per_run(r[metric], num_runs)[i] for i in runs)
      ]
      for r in kept
    ],
    dtype=float,
  ).T
  return steps, values.reshape(len(runs), len(steps))


def plot_curves(
  results: list[CurveResult],
  metric: str,
  ylabel: str,
  title: str,
  path: str,
  log_y: bool = False,
) -> str:
  """Mean and standard deviation (shaded) over the selected runs of each
  curve against training steps, as the paper's Figures 1, 2, 4 and 5."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  many = len(results) > 5  # then the legend goes beside the axes
  fig, ax = plt.subplots(figsize=(8.5 if many else 6, 4))
  for result in results:
    steps, values = series(
      result.records, metric, result.best_runs, len(result.runs)
    )
    if not steps.size:
      continue
    mean = np.nanmean(values, axis=0)
    std = np.nanstd(values, axis=0)
    rate = result.best_learning_rate
    label = result.curve.label + (f" (lr {rate:.2g})" if rate else "")
    ax.plot(steps, mean, label=label)
    ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
  ax.set(xlabel="training steps", ylabel=ylabel)
  ax.set_title(title, fontsize="medium")  # Long titles fit the figure.
  if log_y:
    ax.set_yscale("log")
  if not ax.get_legend_handles_labels()[0]:
    pass  # Nothing recorded yet (e.g. --plan): no legend to draw.
  elif many:
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
  else:
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def write_table(rows: list[dict], path_stem: str, title: str) -> list[str]:
  """`rows` as `<stem>.json` and a Markdown table `<stem>.md`."""
  with open(path_stem + ".json", "w") as f:
    json.dump(rows, f, indent=2)
  columns = list(dict.fromkeys(k for row in rows for k in row))

  def cell(value):
    if isinstance(value, float):
      return f"{value:.4g}"
    return "" if value is None else str(value)

  lines = [
    f"# {title}",
    "",
    "| " + " | ".join(columns) + " |",
    "|" + "---|" * len(columns),
  ]
  lines += [
    "| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows
  ]
  with open(path_stem + ".md", "w") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines), flush=True)
  return [path_stem + ".json", path_stem + ".md"]


def mean_std(values: Sequence[float]) -> tuple[float, float]:
  finite = [v for v in values if v is not None and np.isfinite(v)]
  if not finite:
    return float("nan"), float("nan")
  return float(np.mean(finite)), float(np.std(finite))
