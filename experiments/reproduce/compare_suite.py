"""The comparison nobody publishes (`compare_suite`): exact RTRL, r-OK and
r-B-OK, r-KF-AVG, KF-RTRL, SK-RTRL, SnAp-1/2/3 (dense and 90% sparse),
RFLO, UORO and TBPTT on every task of `rtrl.tasks.suite`, each trained
online with an exact-RTRL shadow on its own trajectory
(`experiments/online/suite_runs.py`): per method and task, the cosine of
its gradient to exact RTRL's over training, the task metric, its step time
and its tangent's size.

Methods are data (`methods()`); a method whose estimator or cell is not in
this tree (`rtrl.estimators.names()`, `rtrl.cells`) is left out and named
in the table's notes. Every (task, method) result is kept as JSON in
`WORKDIR/compare_suite/results/`, so a rerun resumes, and several processes
may share the work (`--set tasks=adding,henon`); the target then writes
`table.md`, `table.json` and the figures from whatever is there.

`--set` takes, besides the settings' fields (`hidden_size`, `num_steps`,
...), `tasks=a,b` and `methods=Label1,Label2` to run a subset.
"""

from __future__ import annotations

from collections.abc import Callable
import json
import os
import time
from typing import Any
import warnings

import numpy as np

from experiments.online import suite_runs
from experiments.online.suite_runs import Method
from experiments.reproduce import common
from experiments.reproduce import plan
from rtrl import cells
from rtrl import estimators
from rtrl.tasks import suite

NAME = "compare_suite"
# sketched-rtrl's published mean cosines to exact RTRL (n = 64, chaotic
# series, tanh RNN): beside ours where our task and method match.
SKETCHED_RTRL_COSINE = {
  "SnAp-1": 0.505,
  "KF-RTRL": 0.512,
  "RFLO": 0.288,
  "UORO": 0.056,
}
SPARSE = {"recurrent_density": 0.1}  # 90% of the recurrent weights zero

SETTINGS = {
  "small": suite_runs.Settings(
    cell="rnn",
    hidden_size=16,
    batch_size=8,
    seeds=3,
    num_steps=600,
    shadow_every=1,
    learning_rate=3e-3,
    timing_steps=200,
  ),
  "paper": suite_runs.Settings(
    cell="rnn",
    hidden_size=64,
    batch_size=8,
    seeds=5,
    num_steps=20_000,
    shadow_every=100,
    learning_rate=1e-3,
    timing_steps=1000,
  ),
}
# Methods a scale leaves out, and why (in the notes).
SKIPPED = {
  "small": {
    "16-SK-RTRL": "at n = 16 rank 16 is exact RTRL by construction "
    "(r = S n), and its program had not finished after 6 minutes on the "
    "shared 2-core machine"
  },
  "paper": {},
}
# Task settings per scale (the rest: the peers' defaults, `suite.TASKS`).
# Small: short episodes, so that 600 steps hold many targets.
TASK_SETTINGS = {
  "small": {
    "adding": {"length": 20},
    "copy_memory": {"delay": 10},
    "rotation": {"length": 16},
    "rotation_recall": {"length": 16, "recall": 4},
    "anbn": {"n_max": 8},
  },
  "paper": {},
}


def methods(truncation: int) -> list[Method]:
  """Every method of the comparison, in the table's order."""
  ranked = [
    Method(f"{r}-{label}", name, {"rank": r})
    for name, label, ranks in (
      ("ok", "OK", (1, 4, 16)),
      ("ok_biased", "B-OK", (1, 4, 16)),
      ("kf_avg", "KF-AVG", (4,)),
      ("sk_rtrl", "SK-RTRL", (4, 16)),
    )
    for r in ranks
  ]
  snap = [
    Method("SnAp-1", "snap1"),
    Method("SnAp-2", "snap", {"order": 2}),
    Method("SnAp-3", "snap", {"order": 3}),
  ]
  sparse = [
    m._replace(label=m.label + " (90% sparse)", cell=SPARSE) for m in snap
  ]
  rflo_cell = "leaky_rnn" if hasattr(cells, "LeakyRNN") else "rnn"
  return [
    Method("RTRL", "rtrl"),
    Method("RTRL (90% sparse)", "rtrl", cell=SPARSE),
    *ranked,
    Method("KF-RTRL", "kf"),
    # On a dense cell SnAp-2 and SnAp-3 are exact RTRL (every unit reaches
    # every other in one step) at its cost: only SnAp-1 runs dense.
    snap[0],
    *sparse,
    Method("RFLO", "rflo", cell_name=rflo_cell),
    Method("UORO", "uoro"),
    Method(f"TBPTT-{truncation}", "tbptt", {"truncation": truncation}),
  ]


def available(method: Method) -> str:
  """'' if this tree has what `method` needs, else why not."""
  if method.estimator != "tbptt" and method.estimator not in estimators.names():
    return f"estimator {method.estimator!r} not in this tree"
  if method.cell_name:
    try:
      cells.make(method.cell_name, 2)
    except ValueError:
      return f"cell {method.cell_name!r} not in this tree"
  return ""


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


def _plan_one(task, method, settings, mode) -> None:
  """Plan mode: the program's cost without the shadow, by `plan.measure`'s
  short run of `suite_runs.train` in a child."""
  config = suite_runs.program_config(task.name, task.settings, method, settings)
  mode.plans.append(
    plan.measure(f"{task.name}: {method.label}", "online.suite_runs", config)
  )


def run_all(scale: str, out: str, mode: common.Mode) -> tuple[list, list]:
  """Runs (or reads) every (task, method); returns `(summaries, notes)`."""
  overrides = dict(mode.overrides)
  settings = _settings(scale, overrides)
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
  summaries = []
  timing_task = suite.names()[0]  # step time does not depend on the data
  for name in tasks:
    task = suite.make_task(name, **TASK_SETTINGS[scale].get(name, {}))
    for method in runnable:
      if mode.planning:
        _plan_one(task, method, settings, mode)
        continue
      path = _result_path(out, name, method.label)
      if os.path.exists(path):
        with open(path) as f:
          summaries.append(json.load(f))
        continue
      if overrides.get("report_only"):
        notes.append(f"{name}: {method.label} not run")
        continue
      start = time.perf_counter()
      try:
        outcome = suite_runs.run_method(
          task, method, settings, timed=name == timing_task
        )
      except Exception as error:  # pylint: disable=broad-except
        # One method's failure is a row of the notes, not a lost run.
        notes.append(f"{name}: {method.label} failed: {error!r:.300}")
        print(f"  {name:10s} {method.label:22s} FAILED {error!r:.300}")
        continue
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
      summaries.append(summary)
  return summaries, notes


def _by(summaries: list[dict]) -> tuple[list[str], list[str], dict]:
  """`(methods, tasks, {(method, task): summary})`, in run order."""
  methods_ = list(dict.fromkeys(s["method"] for s in summaries))
  tasks = list(dict.fromkeys(s["task"] for s in summaries))
  return methods_, tasks, {(s["method"], s["task"]): s for s in summaries}


def table_rows(summaries: list[dict]) -> list[dict]:
  """One row per method: its cost, its cosine to exact RTRL per task and
  on average over the tasks it ran, and its task metric per task (mean
  over seeds, last fifth of training)."""
  methods_, tasks, cell = _by(summaries)
  rows = []
  for method in methods_:
    mine = [cell[(method, t)] for t in tasks if (method, t) in cell]
    timed = [s["ms_per_step"] for s in mine if np.isfinite(s["ms_per_step"])]
    row = {
      "method": method,
      "tangent_floats": mine[0]["tangent_floats"],
      "ms_per_step": timed[0] if timed else None,
      "mean_cosine": float(np.mean([s["cosine_mean"] for s in mine])),
      "tasks_run": len(mine),
    }
    for t in tasks:
      s = cell.get((method, t))
      row[f"cos {t}"] = None if s is None else s["cosine_mean"]
    for t in tasks:
      s = cell.get((method, t))
      row[f"metric {t}"] = (
        None if s is None else float(np.mean(s["metric_last_fifth"]))
      )
    certificate = [
      s["estimator_metrics"]["certificate"]
      for s in mine
      if "certificate" in s["estimator_metrics"]
    ]
    if certificate:
      row["certificate"] = float(np.mean(certificate))
    rows.append(row)
  return rows


def metric_rows(summaries: list[dict]) -> list[dict]:
  """The task metric table: one row per method, then each task's metric
  name, its trivial predictor's value and which way is better."""
  _, tasks, cell = _by(summaries)
  rows = [
    {k: v for k, v in row.items() if k == "method" or k.startswith("metric ")}
    for row in table_rows(summaries)
  ]
  first = {t: next(s for (m, tt), s in cell.items() if tt == t) for t in tasks}
  rows.append(
    {
      "method": "(baseline)",
      **{f"metric {t}": first[t]["metric_baseline"] for t in tasks},
    }
  )
  rows.append(
    {
      "method": "(metric)",
      **{
        f"metric {t}": first[t]["metric_name"]
        + (" ↑" if first[t]["higher_is_better"] else " ↓")
        for t in tasks
      },
    }
  )
  return rows


def plot_cost(summaries: list[dict], path: str) -> str:
  """Mean cosine to exact RTRL (over tasks) against tangent floats and
  against step time: who wins at equal memory and at equal time."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  rows = table_rows(summaries)
  fig, axes = plt.subplots(1, 2, figsize=(12, 5))
  for ax, key, xlabel in (
    (axes[0], "tangent_floats", "tangent floats per example (log)"),
    (axes[1], "ms_per_step", "ms per step, all seeds (log)"),
  ):
    for row in rows:
      x, y = row[key], row["mean_cosine"]
      if x is None or not np.isfinite(y):
        continue
      ax.scatter(x, y, s=18)
      ax.annotate(
        row["method"],
        (x, y),
        fontsize=7,
        xytext=(3, 2),
        textcoords="offset points",
      )
    ax.set(xscale="log", xlabel=xlabel, ylabel="mean cosine to exact RTRL")
    ax.xaxis.set_minor_formatter(plt.NullFormatter())  # labels collide
    ax.grid(alpha=0.3)
  fig.suptitle(
    "Gradient quality against cost (mean over tasks and seeds)",
    fontsize="medium",
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


CURVE_METHODS = (
  "4-OK",
  "4-B-OK",
  "4-SK-RTRL",
  "KF-RTRL",
  "SnAp-1",
  "SnAp-2 (90% sparse)",
  "RFLO",
  "UORO",
  "TBPTT-10",
)


def plot_curves(summaries: list[dict], path: str) -> str:
  """Cosine to exact RTRL against training steps, one panel per task."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  _, tasks, cell = _by(summaries)
  columns = min(3, len(tasks))
  rows = -(-len(tasks) // columns)
  fig, axes = plt.subplots(
    rows, columns, figsize=(4.5 * columns, 3.4 * rows), squeeze=False
  )
  for ax, task in zip(axes.flat, tasks):
    for index, method in enumerate(CURVE_METHODS):
      s = cell.get((method, task))
      if s is None:
        continue
      steps = np.asarray(s["cosine_steps"])
      curve = np.asarray(s["cosine_curve"], float)
      kept = np.isfinite(curve)  # steps with a target
      steps, curve = steps[kept], curve[kept]
      if not curve.size:
        continue
      width = max(1, len(curve) // 10)  # smoothed over a tenth of the run
      smooth = np.convolve(curve, np.ones(width) / width, mode="valid")
      ax.plot(steps[width - 1 :], smooth, label=method, color=f"C{index}")
    ax.set(title=task, xlabel="training step", ylabel="cosine")
    ax.set_ylim(-0.2, 1.02)
    ax.grid(alpha=0.3)
  for ax in list(axes.flat)[len(tasks) :]:
    ax.axis("off")
  handles: dict[str, Any] = {}
  for ax in axes.flat:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      handles.setdefault(label, handle)
  fig.legend(
    list(handles.values()),
    list(handles),
    loc="lower center",
    ncol=min(5, max(1, len(handles))),
    fontsize="small",
  )
  fig.tight_layout(rect=(0, 0.08, 1, 1))
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def compare_suite(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Exact RTRL, 1/4/16-OK and -B-OK, 4-KF-AVG, KF-RTRL, 4/16-SK-RTRL,
  SnAp-1/2/3 (dense and 90% sparse), RFLO, UORO and TBPTT-10 on every
  task of rtrl.tasks.suite, each trained online with an exact-RTRL shadow:
  cosine to exact RTRL's gradient on its own trajectory at every step,
  the task metric over the last fifth of training, ms per step (no shadow)
  and tangent floats. Small: tanh RNN-16, batch 8, 3 seeds vmapped, 600
  steps, Adam 3e-3, short episodes (TASK_SETTINGS); 144 programs of
  30-60 s each on a contended 2-core CPU, mostly compilation: ~1 h 45 min
  in one process, 19 min as 4 processes sharing the workdir
  (`--set tasks=...`). Paper: RNN-64 (sketched-rtrl's),
  5 seeds, 20k steps, the tasks' peer settings, compared every 100 steps.
  Outside reference (sketched-rtrl, n=64, chaotic series): SnAp-1 0.505,
  KF-RTRL 0.512, RFLO 0.288, UORO 0.056."""
  out = os.path.join(workdir, NAME)
  summaries, notes = run_all(scale, out, mode)
  if mode.planning or not summaries:
    return common.Result(NAME, [], [])
  rows = table_rows(summaries)
  cosine_columns = [
    {k: v for k, v in row.items() if not k.startswith("metric ")}
    for row in rows
  ]
  files = common.write_table(
    cosine_columns,
    os.path.join(out, "table"),
    f"{NAME} ({scale}): cosine to exact RTRL and cost",
  )
  files += common.write_table(
    metric_rows(summaries),
    os.path.join(out, "table_metric"),
    f"{NAME} ({scale}): task metric, last fifth of training",
  )
  with open(os.path.join(out, "notes.md"), "w") as f:
    f.write("\n".join(f"- {n}" for n in notes) + "\n")
  files.append(os.path.join(out, "notes.md"))
  files.append(plot_cost(summaries, os.path.join(out, "cost.png")))
  files.append(plot_curves(summaries, os.path.join(out, "curves.png")))
  return common.Result(NAME, files, rows)


TARGETS: dict[str, Callable[..., common.Result]] = {NAME: compare_suite}
