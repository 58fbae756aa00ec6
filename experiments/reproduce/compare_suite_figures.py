"""The `compare_suite` target's figures: mean cosine against cost
(`plot_cost`) and cosine over training per task (`plot_curves`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from experiments.reproduce.compare_suite_tables import by_method_and_task
from experiments.reproduce.compare_suite_tables import table_rows


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

  _, tasks, cell = by_method_and_task(summaries)
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
