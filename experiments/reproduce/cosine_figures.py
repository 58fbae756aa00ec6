"""The gradient-cosine figures' shared machinery (OK paper Figures 3, 6,
7/8, 9, 10/11): train a network, run `experiments.gradient_cosine` on it per
setting, and write the target's `figure.png` and table."""

from __future__ import annotations

import json
import os

import numpy as np

from experiments.reproduce import common
from experiments.reproduce.common import Curve


def run_cosine(
  out: str, label: str, overrides: dict, mode: common.Mode = common.RUN
) -> dict:
  """One gradient-cosine run (skipped when its summary exists)."""
  from experiments.online import cosine_experiment as gradient_cosine  # pylint: disable=g-import-not-at-top

  workdir = os.path.join(out, Curve(label, "", {}).dirname)
  summary_path = os.path.join(workdir, gradient_cosine.SUMMARY_FILE)
  config = common.make_config(
    Curve(label, "gradient_cosine", overrides), mode=mode
  )
  done = mode.plans is None and os.path.exists(summary_path)
  todo = common.visit(
    mode, common.Program(label, "gradient_cosine", config, workdir, done)
  )
  if done and todo != common.SKIP:
    with open(summary_path) as f:
      return json.load(f)
  if todo != common.TRAIN:
    return {"estimators": {}}
  print(f"=== cosine: {label} -> {workdir}", flush=True)
  return gradient_cosine.run(config, workdir)


def cosine_rows(label: str, summary: dict, **extra) -> list[dict]:
  return [
    {
      "setting": label,
      "estimator": name,
      **extra,
      "mean_cosine": stats.get("mean_cosine"),
      "std_cosine": stats.get("mean_std_cosine"),
      "final_mean_cosine": stats.get("final_mean_cosine"),
    }
    for name, stats in summary["estimators"].items()
  ]


def train_single(
  out: str,
  label: str,
  experiment: str,
  overrides: dict,
  preset: str = "",
  mode: common.Mode = common.RUN,
) -> str:
  """Trains one network (one seed, one learning rate) for a cosine figure;
  returns its workdir."""
  curve = Curve(
    label,
    experiment,
    {**overrides, "num_seeds": 1, "learning_rates": ()},
    preset,
  )
  common.run_curve(curve, out, mode=mode)
  return os.path.join(out, curve.dirname)


def cosine_records(out: str, label: str) -> list[dict]:
  # pylint: disable-next=g-import-not-at-top
  from experiments.loop import workdir as workdir_lib

  return workdir_lib.read_metrics(
    os.path.join(out, Curve(label, "", {}).dirname)
  )


def cosine_series(records: list[dict], estimator: str, field: str):
  return np.array(
    [
      np.nan
      if r.get(f"{estimator}/{field}") is None
      else r[f"{estimator}/{field}"]
      for r in records
    ],
    float,
  )


def plot_cosine(
  out: str,
  labels: list[str],
  title: str,
  path: str,
  sizes: tuple[int, ...] = (),
  columns: int = 0,
) -> str:
  """The target's `figure.png`: per setting, mean ± std over repetitions of
  each estimator's cosine against steps (one panel each, `columns` to a row;
  0: all in one row); with `sizes` (one per setting, Figure 9) the last
  step's cosine against the RHN size."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  records = {label: cosine_records(out, label) for label in labels}
  estimators = [
    k[: -len("/mean_cosine")]
    for k in records[labels[0]][0]
    if k.endswith("/mean_cosine")
  ]
  if sizes:
    fig, ax = plt.subplots(figsize=(6, 4))
    for estimator in estimators:
      last = [records[label][-1] for label in labels]
      ax.errorbar(
        sizes,
        cosine_series(last, estimator, "mean_cosine"),
        yerr=cosine_series(last, estimator, "std_cosine"),
        marker="o",
        capsize=3,
        label=estimator,
      )
    ax.set_xscale("log", base=2)
    ax.set(
      xlabel="hidden units n",
      ylabel=f"cosine at step {records[labels[0]][-1]['step']}",
    )
    axes = [ax]
  else:
    columns = columns or len(labels)
    rows = -(-len(labels) // columns)
    fig, axes = plt.subplots(
      rows,
      columns,
      squeeze=False,
      sharey=True,
      figsize=(4.5 * columns + 1.5, 4 * rows),
    )
    for ax in axes.flat[len(labels) :]:
      ax.set_visible(False)
    axes = list(axes.flat[: len(labels)])
    for ax, label in zip(axes, labels):
      steps = np.array([r["step"] for r in records[label]])
      for estimator in estimators:
        mean = cosine_series(records[label], estimator, "mean_cosine")
        std = cosine_series(records[label], estimator, "std_cosine")
        (line,) = ax.plot(steps, mean, label=estimator, linewidth=1)
        ax.fill_between(
          steps,
          mean - std,
          np.minimum(mean + std, 1.0),
          color=line.get_color(),
          alpha=0.15,
          linewidth=0,
        )
      ax.set(title=label, xlabel="step")
    for ax in axes[::columns]:
      ax.set_ylabel("cosine to exact RTRL gradient")
  for ax in axes:
    ax.grid(alpha=0.3)
  axes[-1].legend(
    loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small"
  )
  fig.suptitle(title, fontsize="medium")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def cosine_target(
  name: str,
  workdir: str,
  title: str,
  settings: list[tuple[str, dict]],
  scale: str,
  paper: str = "",
  sizes: tuple[int, ...] = (),
  columns: int = 0,
  note: str = "",
  mode: common.Mode = common.RUN,
) -> common.Result:
  """Runs every setting's cosine tool; writes `figure.png` (see
  `plot_cosine`) and the table, titled with the scale, what the paper's
  figure shows in `paper` (it gives no numbers) and `note`. Under `--plan`
  (nothing ran) it writes nothing."""
  out = os.path.join(workdir, name)
  os.makedirs(out, exist_ok=True)
  rows = []
  for label, overrides in settings:
    summary = run_cosine(out, label, overrides, mode=mode)
    rows += cosine_rows(label, summary)
  if mode.planning:
    return common.Result(name, [], rows)
  title = f"{title} ({scale} scale)"
  files = [
    plot_cosine(
      out,
      [label for label, _ in settings],
      title,
      os.path.join(out, "figure.png"),
      sizes,
      columns,
    )
  ]
  table_title = (
    title
    + (f". Paper: {paper}" if paper else "")
    + (f". {note}" if note else "")
  )
  files += common.write_table(rows, os.path.join(out, "table"), table_title)
  return common.Result(name, files, rows)


def cosine_size(scale: str) -> dict:
  if scale == "paper":
    return dict(num_steps=1000, repetitions=20, chunk_steps=50)
  return dict(num_steps=200, repetitions=5, chunk_steps=100)
