"""The comparison's tables (per epoch, end losses, time per step) and its
figure (loss per epoch and per second), from the finished runs."""

from __future__ import annotations

import json
import os

import numpy as np

from experiments.studies import compare_rls_second_moment as previous
from experiments.studies.second_order.common import EPOCHS
from experiments.studies.second_order.common import slug
from experiments.studies.second_order.common import task_config
from experiments.studies.second_order.optax_runs import step_seconds


def read_results(workdir, task_name, labels, seeds, epochs) -> dict:
  """label -> list over seeds of per-epoch records (finished runs only)."""
  found = {}
  for label in labels:
    runs = []
    for seed in range(seeds):
      path = os.path.join(workdir, task_name, slug(label), f"seed_{seed}.json")
      if os.path.exists(path):
        with open(path) as f:
          records = json.load(f)["records"]
        if len(records) >= epochs:
          runs.append(records[:epochs])
    if runs:
      found[label] = runs
  return found


def _stat(runs, key, epoch) -> np.ndarray:
  return np.asarray([r[epoch][key] for r in runs], np.float64)


def _mean_std(values: np.ndarray) -> str:
  return f"{values.mean():.4f} ± {values.std():.4f}"


def steps_per_epoch(task_name) -> int:
  config = task_config(task_name, "Adam")
  num_train = {"mnist": 60_000, "cifar10": config.train_limit}[task_name]
  return num_train // config.batch_size


def seconds_per_step(task_name, results, timing, timing_results=None) -> dict:
  """label -> seconds per step: the interleaved timing for optax
  optimisers, the median measured epoch over steps for K-FAC (from
  ``timing_results``, label -> runs timed apart, where given)."""
  seconds = dict(timing)
  for label, runs in results.items():
    runs = (timing_results or {}).get(label, runs)
    if label not in seconds:
      epoch = np.median([[e["seconds"] for e in r] for r in runs])
      seconds[label] = float(epoch) / steps_per_epoch(task_name)
  return seconds


def table(task_name, results, seconds) -> list[str]:
  """Markdown: epoch-mean train loss per epoch, the end losses, accuracy,
  time per step and relative to Adam, measured seconds per epoch."""
  epochs = EPOCHS[task_name]
  title = previous.TASKS[task_name][2]
  header = (
    ["optimiser"]
    + [f"train loss ep {e + 1}" for e in range(epochs)]
    + [
      "end full-train loss",
      "test acc",
      "ms/step",
      "x Adam time",
      "s/epoch (run)",
    ]
  )
  lines = [f"## {title}", "", "| " + " | ".join(header) + " |"]
  lines.append("|" + "---|" * len(header))
  adam = seconds.get("Adam")
  for label, runs in results.items():
    row = [label]
    row += [_mean_std(_stat(runs, "train_loss", e)) for e in range(epochs)]
    row.append(_mean_std(_stat(runs, "train_eval_loss", epochs - 1)))
    row.append(_mean_std(_stat(runs, "test_accuracy", epochs - 1)))
    row.append(f"{1e3 * seconds[label]:.1f}")
    row.append(f"{seconds[label] / adam:.2f}" if adam else "")
    row.append(f"{np.median([[e['seconds'] for e in r] for r in runs]):.1f}")
    lines.append("| " + " | ".join(row) + " |")
  return lines + [""]


def plot(all_results, all_seconds, path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(
    len(all_results), 2, figsize=(11, 3.8 * len(all_results)), squeeze=False
  )
  for row, (task_name, results) in enumerate(all_results.items()):
    steps = steps_per_epoch(task_name)
    for label, runs in results.items():
      epochs = len(runs[0])
      losses = np.asarray([[e["train_loss"] for e in r] for r in runs])
      line = axes[row, 0].errorbar(
        np.arange(1, epochs + 1),
        losses.mean(0),
        yerr=losses.std(0),
        marker="o",
        capsize=3,
        label=label,
      )
      # Per second: each epoch's 10 block means (seed mean) at the end of
      # their block, at the optimiser's seconds per step.
      curve = np.asarray([sum((e["curve"] for e in r), []) for r in runs])
      block_ends = (np.arange(curve.shape[1]) + 1) * steps / 10
      axes[row, 1].plot(
        block_ends * all_seconds[task_name][label],
        curve.mean(0),
        color=line[0].get_color(),
        label=label,
      )
    axes[row, 0].set(
      xlabel="epoch",
      ylabel="train loss (epoch mean, eq. 57 MSE)",
      yscale="log",
      title=previous.TASKS[task_name][2],
    )
    axes[row, 1].set(
      xlabel="seconds (steps x s/step, one seed, 2 shared CPU cores)",
      ylabel="train loss (mean over a tenth of an epoch)",
      xscale="log",
      yscale="log",
    )
    axes[row, 0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def timing_for(workdir, task_name, labels) -> dict:
  """`step_seconds` of the optax labels, measured once and cached in
  WORKDIR/TASK/step_seconds.json."""
  path = os.path.join(workdir, task_name, "step_seconds.json")
  cached = {}
  if os.path.exists(path):
    with open(path) as f:
      cached = json.load(f)
  missing = [l for l in labels if l != "K-FAC" and l not in cached]
  if missing:
    print(f"== timing {task_name}: {missing}", flush=True)
    # About a second per timed scan (20 MNIST steps, ~50 ms, were noise).
    steps = 300 if task_name == "mnist" else 10
    cached.update(step_seconds(task_name, missing, steps=steps, repeats=5))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(cached, f)
  return {l: cached[l] for l in labels if l in cached}


def report(
  workdir,
  task_names,
  labels,
  seeds,
  table_path,
  figure_path,
  kfac_timing_workdir=None,
):
  """The tables (to ``table_path`` and stdout) and the figure. K-FAC's time
  per step comes from its runs in ``kfac_timing_workdir`` where given (a
  seed run alone on the machine), else from its runs in ``workdir``."""
  all_results, all_seconds, lines = {}, {}, []
  for task_name in task_names:
    results = read_results(workdir, task_name, labels, seeds, EPOCHS[task_name])
    if results:
      timing = timing_for(workdir, task_name, list(results))
      timed_apart = {}
      if kfac_timing_workdir and "K-FAC" in results:
        timed_apart = read_results(
          kfac_timing_workdir, task_name, ["K-FAC"], 1, EPOCHS[task_name]
        )
      all_seconds[task_name] = seconds_per_step(
        task_name, results, timing, timed_apart
      )
      all_results[task_name] = results
      lines += table(task_name, results, all_seconds[task_name])
  for task_name in task_names:
    path = os.path.join(workdir, task_name, "k_fac", "seed_0.json")
    if os.path.exists(path):
      with open(path) as f:
        tags = json.load(f).get("kfac_blocks", [])
      lines += [f"kfac-jax curvature blocks, {task_name}:", ""]
      lines += [f"    {t}" for t in tags] + [""]
  with open(table_path, "w") as f:
    f.write("\n".join(lines))
  if all_results:
    plot(all_results, all_seconds, figure_path)
  print("\n".join(lines))
