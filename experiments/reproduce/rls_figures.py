"""The RLS paper targets' figure and tables from their curves' records
(`experiments/reproduce/rls_paper.py`): `figure.png` (one column per
network: test accuracy per epoch, training loss per block of steps),
`table.{md,json}` (each curve's last and best epoch) and `epochs.{md,json}`
(each curve's seed means at `MILESTONE_EPOCHS`).

A curve's records are its `metrics.jsonl` records (one per epoch); `runs`
selects the curve's runs among the program's `num_runs`."""

from __future__ import annotations

import os

import numpy as np

from experiments.reproduce import common

TITLES = {
  "mnist": "FNN on MNIST",
  "cifar10": "CNN on CIFAR-10",
  "imdb": "LSTM on IMDB",
}


def per_epoch(records: list[dict], key: str, runs: list[int], num_runs: int):
  """`(epochs, values (len(runs), epochs))` of a per-epoch metric."""
  epochs = np.array([float(np.mean(r["epoch"])) for r in records])
  values = np.array(
    [[common.per_run(r[key], num_runs)[i] for i in runs] for r in records],
    dtype=float,
  ).T
  return epochs, values


def loss_curve(records: list[dict], runs: list[int], num_runs: int):
  """`(steps, values (len(runs), blocks))` of the per-block training loss
  (`train_loss_curve`, the mean of every `loss_every` steps)."""
  per_run = lambda value: value if num_runs > 1 else [value]
  blocks = [
    np.concatenate([per_run(r["train_loss_curve"])[i] for r in records])
    for i in runs
  ]
  values = np.array(blocks, dtype=float)
  steps_per_block = records[-1]["step"] / max(values.shape[1], 1)
  return steps_per_block * np.arange(1, values.shape[1] + 1), values


def plot(
  groups: dict[str, list[tuple[str, list[dict], list[int], int]]],
  title: str,
  path: str,
) -> str:
  """One column per network: test accuracy per epoch (top), training loss
  against steps (bottom, per block of `loss_every` steps: convergence
  speed); each line the mean over its runs, shaded +- one std."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(
    2, len(groups), figsize=(4.5 * len(groups), 6.5), squeeze=False
  )
  for column, (dataset, lines) in enumerate(groups.items()):
    for label, records, runs, num_runs in lines:
      curves = (
        per_epoch(records, "test_accuracy", runs, num_runs),
        loss_curve(records, runs, num_runs),
      )
      for panel, (x, values) in enumerate(curves):
        mean = np.nanmean(values, axis=0)
        axes[panel, column].plot(
          x, mean, marker="o" if panel == 0 else ".", label=label
        )
        if values.shape[0] > 1:
          std = np.nanstd(values, axis=0)
          axes[panel, column].fill_between(x, mean - std, mean + std, alpha=0.2)
    axes[0, column].set(
      title=TITLES[dataset], xlabel="epoch", ylabel="test accuracy"
    )
    axes[1, column].set(
      xlabel="training steps", ylabel="training loss", yscale="log"
    )
    axes[0, column].legend(fontsize=8)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


MILESTONE_EPOCHS = (1, 2, 3, 5, 10, 20, 50, 100)


def mean_curve(records, key: str, runs: list[int], num_runs: int):
  """`(epochs, mean over runs)` of a per-epoch metric."""
  epochs, values = per_epoch(records, key, runs, num_runs)
  return epochs, np.nanmean(values, axis=0)


def row(
  label: str, records: list[dict], runs: list[int], num_runs: int, **extra
) -> dict:
  accuracy = [
    common.per_run(records[-1]["test_accuracy"], num_runs)[i] for i in runs
  ]
  loss = [common.per_run(records[-1]["train_loss"], num_runs)[i] for i in runs]
  acc_mean, acc_std = common.mean_std(accuracy)
  loss_mean, _ = common.mean_std(loss)
  epochs, mean_accuracy = mean_curve(records, "test_accuracy", runs, num_runs)
  finite = np.isfinite(mean_accuracy)
  best = int(np.argmax(np.where(finite, mean_accuracy, -np.inf)))
  return {
    "curve": label,
    **extra,
    "epochs": records[-1]["epoch"]
    if not isinstance(records[-1]["epoch"], list)
    else records[-1]["epoch"][0],
    "test_accuracy_mean": acc_mean,
    "test_accuracy_std": acc_std,
    "final_train_loss": loss_mean,
    # The best epoch of the seeds' mean curve (selected on the test set).
    "best_test_accuracy": float(mean_accuracy[best]) if finite.any() else None,
    "best_epoch": float(epochs[best]) if finite.any() else None,
    "seeds": len(runs),
  }


def epoch_rows(
  label: str, records: list[dict], runs: list[int], num_runs: int
) -> list[dict]:
  """The seeds' mean training loss (the epoch's mean minibatch loss) and
  test accuracy at each of `MILESTONE_EPOCHS` the curve reached, and at its
  last epoch."""
  epochs, loss = mean_curve(records, "train_loss", runs, num_runs)
  _, accuracy = mean_curve(records, "test_accuracy", runs, num_runs)
  wanted = [e for e in MILESTONE_EPOCHS if e < epochs[-1]] + [epochs[-1]]
  rows = []
  for epoch in wanted:
    matches = np.flatnonzero(np.isclose(epochs, epoch))
    if matches.size:
      rows.append(
        {
          "curve": label,
          "epoch": float(epoch),
          "train_loss_mean": float(loss[matches[0]]),
          "test_accuracy_mean": float(accuracy[matches[0]]),
        }
      )
  return rows


def figure_and_table(name, out, groups, rows, title) -> common.Result:
  """The figure of the networks with a run curve (none: no figure), the
  table of every run curve, and `epochs.{md,json}`: each curve's mean
  training loss and test accuracy at the milestone epochs."""
  groups = {dataset: lines for dataset, lines in groups.items() if lines}
  files = (
    [plot(groups, title, os.path.join(out, "figure.png"))] if groups else []
  )
  files += common.write_table(rows, os.path.join(out, "table"), title)
  by_epoch = [
    entry
    for dataset, lines in groups.items()
    for label, records, runs, num_runs in lines
    for entry in epoch_rows(f"{dataset} {label}", records, runs, num_runs)
  ]
  files += common.write_table(
    by_epoch, os.path.join(out, "epochs"), f"{title}, by epoch"
  )
  return common.Result(name, files, rows)
