"""Plots a metric of several runs against steps (e.g. the paper's Figure 1).

  python -m scripts.plot_runs runs/copy_ok16 runs/copy_tbptt50 \
    --metric curriculum_length --out copy.png

Runs whose config.json differs only in `seed` are grouped: the plot shows
their mean and standard deviation (shaded), as in Benzing et al. Figure 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from experiments.loop import workdir as workdir_lib
from rtrl import estimators


def run_label(config: dict) -> str:
  """'16-OK (rhn-128)', 'TBPTT-50 (rhn-128)', ... from a run's config.json."""
  estimator = config.get("estimator", "?")
  if estimator == "tbptt":
    name = f"TBPTT-{config.get('truncation')}"
  elif estimator in estimators.names() and "rank" in estimators.hyperparameters(
    estimator
  ):
    name = f"{config.get('rank')}-{estimator.upper().replace('_', '-')}"
  else:
    name = estimator.upper()
  return f"{name} ({config.get('cell', '?')}-{config.get('hidden_size', '?')})"


def load_groups(workdirs, metric):
  groups = collections.defaultdict(list)
  for path in workdirs:
    with open(os.path.join(path, workdir_lib.CONFIG_FILE)) as f:
      config = json.load(f)
    records = [r for r in workdir_lib.read_metrics(path) if metric in r]
    if not records:
      print(f"warning: no '{metric}' in {path}/metrics.jsonl; skipped")
      continue
    steps = np.array([r["step"] for r in records])
    values = np.array([r[metric] for r in records], dtype=float)
    groups[run_label(config)].append((steps, values))
  return groups


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("workdirs", nargs="+")
  parser.add_argument("--metric", default="curriculum_length")
  parser.add_argument("--out", default="runs.png")
  args = parser.parse_args()
  groups = load_groups(args.workdirs, args.metric)
  if not groups:
    raise SystemExit("nothing to plot")
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for label, runs in sorted(groups.items()):
    length = min(len(steps) for steps, _ in runs)
    steps = runs[0][0][:length]
    values = np.stack([v[:length] for _, v in runs])
    mean, std = values.mean(0), values.std(0)
    ax.plot(steps, mean, label=f"{label}, n={len(runs)}")
    if len(runs) > 1:
      ax.fill_between(steps, mean - std, mean + std, alpha=0.25)
  ax.set_xlabel("step")
  ax.set_ylabel(args.metric)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(args.out, dpi=120)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
