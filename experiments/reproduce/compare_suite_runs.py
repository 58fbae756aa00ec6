"""Running the `compare_suite` target: every chosen (task, method) trained
online with an exact-RTRL shadow (`experiments/online/suite_runs.py`), or
read back from its JSON under `results/` when an earlier run kept it, or
measured for `--plan`.
"""

from __future__ import annotations

import json
import os
import time
import warnings

import numpy as np

from experiments.online import suite_runs
from experiments.reproduce import common
from experiments.reproduce.compare_suite_methods import SETTINGS
from experiments.reproduce.compare_suite_methods import SKIPPED
from experiments.reproduce.compare_suite_methods import TASK_SETTINGS
from experiments.reproduce.compare_suite_methods import available
from experiments.reproduce.compare_suite_methods import methods
from rtrl.tasks import suite


def _settings(scale: str, overrides) -> suite_runs.Settings:
  base = SETTINGS[scale]
  return base._replace(
    **{
      k: type(getattr(base, k))(v)
      for k, v in overrides.items()
      if k in base._fields
    }
  )


def _subset(text, names: list[str], what: str) -> list[str]:
  if not text:
    return names
  items = text if isinstance(text, (list, tuple)) else str(text).split(",")
  wanted = [str(t).strip() for t in items if str(t).strip()]
  unknown = sorted(set(wanted) - set(names))
  if unknown:
    raise ValueError(f"{what} {unknown} unknown; known: {names}")
  return wanted


def _result_path(out: str, task: str, label: str) -> str:
  safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
  return os.path.join(out, "results", task, safe + ".json")


def _summary(task, method, settings, outcome) -> dict:
  """The JSON kept for one (task, method)."""
  with warnings.catch_warnings():
    # Steps without a target have no gradient, hence NaN cosines.
    warnings.simplefilter("ignore", RuntimeWarning)
    return _summary_of(task, method, settings, outcome)


def _summary_of(task, method, settings, outcome) -> dict:
  last = max(1, settings.num_steps // 5)
  metric = suite_runs.metric_value(outcome.metric_sums, last)
  cosine_per_seed = np.nanmean(outcome.cosine, axis=1)
  tenth = max(1, outcome.cosine.shape[1] // 10)
  return {
    "task": task.name,
    "task_settings": task.settings,
    "method": method.label,
    "estimator": method.estimator,
    "hparams": dict(method.hparams),
    "cell": method.cell_name or settings.cell,
    "cell_settings": dict(method.cell),
    "settings": settings._asdict(),
    "metric_name": task.metric.name,
    "metric_baseline": task.metric.baseline,
    "higher_is_better": task.metric.higher_is_better,
    "metric_last_fifth": metric.tolist(),
    "cosine_mean": float(np.mean(cosine_per_seed)),
    "cosine_std_over_seeds": float(np.std(cosine_per_seed)),
    "cosine_first_tenth": float(np.nanmean(outcome.cosine[:, :tenth])),
    "cosine_last_tenth": float(np.nanmean(outcome.cosine[:, -tenth:])),
    "cosine_steps": outcome.steps.tolist(),
    "cosine_curve": np.nanmean(outcome.cosine, axis=0).tolist(),
    "norm_ratio_median": float(np.nanmedian(outcome.norm_ratio)),
    "estimator_metrics": {
      k: float(np.nanmean(v)) for k, v in outcome.estimator_metrics.items()
    },
    "loss_last_fifth": float(np.nanmean(outcome.loss[:, -last:])),
    "ms_per_step": outcome.ms_per_step,
    "tangent_floats": outcome.tangent_floats,
    "shadow_seconds": outcome.shadow_seconds,
  }


def _chosen(scale: str, overrides) -> tuple[list[str], list, list[str]]:
  """`(tasks, methods, notes)`: the `--set` subset of tasks and of the
  methods this scale and tree can run, and a note per method left out."""
  truncation = 10
  all_methods = methods(truncation)
  labels = _subset(
    overrides.get("methods"), [m.label for m in all_methods], "methods"
  )
  chosen = [m for m in all_methods if m.label in labels]
  tasks = _subset(overrides.get("tasks"), list(suite.names()), "tasks")
  notes = []
  runnable = []
  for method in chosen:
    why = SKIPPED[scale].get(method.label) or available(method)
    if why:
      notes.append(f"{method.label}: not run ({why})")
    else:
      runnable.append(method)
  return tasks, runnable, notes


def _train_and_keep(task, method, settings, path: str, timed: bool, notes):
  """Trains one (task, method) and keeps its summary as JSON at `path`;
  returns the summary, or None (and a note) when the training failed."""
  name = task.name
  start = time.perf_counter()
  try:
    outcome = suite_runs.run_method(task, method, settings, timed=timed)
  except Exception as error:  # pylint: disable=broad-except
    # One method's failure is a row of the notes, not a lost run.
    notes.append(f"{name}: {method.label} failed: {error!r:.300}")
    print(f"  {name:10s} {method.label:22s} FAILED {error!r:.300}")
    return None
  summary = _summary(task, method, settings, outcome)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(summary, f)
  print(
    f"  {name:10s} {method.label:22s} cosine "
    f"{summary['cosine_mean']:.3f} {task.metric.name} "
    f"{np.mean(summary['metric_last_fifth']):.4g} "
    f"({time.perf_counter() - start:.0f} s)",
    flush=True,
  )
  return summary


def run_all(scale: str, out: str, mode: common.Mode) -> tuple[list, list]:
  """Runs (or reads) every (task, method); returns `(summaries, notes)`."""
  overrides = dict(mode.overrides)
  settings = _settings(scale, overrides)
  tasks, runnable, notes = _chosen(scale, overrides)
  summaries = []
  timing_task = suite.names()[0]  # step time does not depend on the data
  for name in tasks:
    task = suite.make_task(name, **TASK_SETTINGS[scale].get(name, {}))
    for method in runnable:
      path = _result_path(out, name, method.label)
      config = suite_runs.program_config(
        task.name, task.settings, method, settings
      )
      done = mode.plans is None and os.path.exists(path)
      todo = common.visit(
        mode,
        common.Program(
          f"{name}: {method.label}", "online.suite_runs", config, path, done
        ),
      )
      if done and todo != common.SKIP:
        with open(path) as f:
          summaries.append(json.load(f))
        continue
      if todo != common.TRAIN or overrides.get("report_only"):
        if not mode.planning:
          notes.append(f"{name}: {method.label} not run")
        continue
      summary = _train_and_keep(
        task, method, settings, path, name == timing_task, notes
      )
      if summary is not None:
        summaries.append(summary)
  return summaries, notes
