"""The `compare_suite` target's tables, from the kept summaries: cosine to
exact RTRL and cost per method (`table_rows`), and the task metric per
method and task (`metric_rows`).
"""

from __future__ import annotations

import numpy as np


def by_method_and_task(
  summaries: list[dict],
) -> tuple[list[str], list[str], dict]:
  """`(methods, tasks, {(method, task): summary})`, in run order."""
  methods_ = list(dict.fromkeys(s["method"] for s in summaries))
  tasks = list(dict.fromkeys(s["task"] for s in summaries))
  return methods_, tasks, {(s["method"], s["task"]): s for s in summaries}


def table_rows(summaries: list[dict]) -> list[dict]:
  """One row per method: its cost, its cosine to exact RTRL per task and
  on average over the tasks it ran, and its task metric per task (mean
  over seeds, last fifth of training)."""
  methods_, tasks, cell = by_method_and_task(summaries)
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
  _, tasks, cell = by_method_and_task(summaries)
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
