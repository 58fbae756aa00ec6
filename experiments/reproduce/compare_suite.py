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
import os

from experiments.reproduce import common
from experiments.reproduce.compare_suite_figures import CURVE_METHODS
from experiments.reproduce.compare_suite_figures import plot_cost
from experiments.reproduce.compare_suite_figures import plot_curves
from experiments.reproduce.compare_suite_methods import SETTINGS
from experiments.reproduce.compare_suite_methods import SKETCHED_RTRL_COSINE
from experiments.reproduce.compare_suite_methods import SKIPPED
from experiments.reproduce.compare_suite_methods import SPARSE
from experiments.reproduce.compare_suite_methods import TASK_SETTINGS
from experiments.reproduce.compare_suite_methods import available
from experiments.reproduce.compare_suite_methods import methods
from experiments.reproduce.compare_suite_runs import run_all
from experiments.reproduce.compare_suite_tables import metric_rows
from experiments.reproduce.compare_suite_tables import table_rows
from rtrl.tasks import suite

NAME = "compare_suite"


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


__all__ = [
  "CURVE_METHODS",
  "NAME",
  "SETTINGS",
  "SKETCHED_RTRL_COSINE",
  "SKIPPED",
  "SPARSE",
  "TARGETS",
  "TASK_SETTINGS",
  "available",
  "compare_suite",
  "methods",
  "metric_rows",
  "plot_cost",
  "plot_curves",
  "run_all",
  "suite",
  "table_rows",
]
