"""The RLS paper's figures and run-time ratios (Zhang et al. 2021, section VI).

Every target takes `(scale, workdir)` and covers the three networks (MNIST
FNN, CIFAR-10 mini-VGG, IMDB LSTM). `scale='paper'`: the paper's networks and
settings (`configs/{mnist,cifar10,imdb}.py` without `small`), 100 epochs, 5
seeds vmapped in one program per curve. `scale='small'` (measured on 2
shared CPU cores: rls_fig2 5.6 min, rls_fig3 3.5, rls_fig4 5.0, rls_fig5
5.3, rls_runtime 3.2): the `small` presets (MNIST: first 10,000 training
images; CIFAR-10: quarter-width net on at most 4,000 images; IMDB: LSTM(64),
length 100, vocabulary 5,000, 10,000 training reviews), 2-3 epochs, 1 seed
(2 on MNIST). Results go to `workdir/<target>/`: a sub-workdir per curve
(resumable), `figure.png` (one column per network: test accuracy per epoch,
training loss per 10 steps), `table.{md,json}` (each curve's last epoch,
and its best epoch by the seeds' mean test accuracy) and `epochs.{md,json}`
(each curve's seed-mean training loss and test accuracy at epochs 1, 2, 3,
5, 10, 20, 50, 100 and its last).

Data: the loaders read `$DATA_DIR/{mnist,cifar10,imdb}` (e.g.
`DATA_DIR=../shared/data python scripts/reproduce.py rls_fig2`), else
download into `~/.cache/rtrl_rls`. With `../shared/data`, CIFAR-10 is the
4,000/1,000-image subset (the loader says so), at both scales.

Targets: `rls_fig2` (RLS, RLS+M, RLS+M+R vs Adam, MSE), `rls_fig3` (the
hybrid HRLS, +M, +M+R vs Adam, cross-entropy), `rls_fig4` (k in {0.01, 0.1,
1, 10}), `rls_fig5` (η in the same set; both sweeps vmapped in one program per
network), `rls_runtime` (time per step of each optimiser next to Adam's,
measured side by side, with Table I's FLOP prediction and the paper's
ratios).
"""

from __future__ import annotations

from collections.abc import Callable
import os

import numpy as np

from experiments.reproduce import common
from experiments.reproduce import rls_figures
from experiments.reproduce.common import Curve

DATASETS = ("mnist", "cifar10", "imdb")
SWEEP_VALUES = (0.01, 0.1, 1.0, 10.0)


def _scale_overrides(dataset: str, scale: str) -> tuple[str, dict]:
  """`(preset suffix, overrides)` of a dataset at a scale."""
  if scale == "paper":
    # The paper's PyTorch defaults: initialisation, and the partial batch
    # (`keep_partial_batch`, on by default) of every epoch.
    return "", dict(epochs=100, num_seeds=5, param_init="pytorch")
  small = {
    "mnist": dict(epochs=2, num_seeds=2),
    "cifar10": dict(epochs=3, num_seeds=1),
    "imdb": dict(epochs=2, num_seeds=1, train_limit=10_000),
  }
  return ",small", small[dataset]


def _curve(
  dataset: str, scale: str, preset: str, label: str, **overrides
) -> Curve:
  suffix, sized = _scale_overrides(dataset, scale)
  return Curve(
    f"{dataset} {label}", dataset, {**sized, **overrides}, preset + suffix
  )


def _variants_target(
  name: str,
  scale: str,
  workdir: str,
  presets: dict,
  title: str,
  mode: common.Mode = common.RUN,
) -> common.Result:
  out = os.path.join(workdir, name)
  os.makedirs(out, exist_ok=True)
  groups, rows = {}, []
  for dataset in DATASETS:
    groups[dataset] = []
    for preset, label in presets.items():
      curve = _curve(dataset, scale, preset, label)
      records, _, runs = common.run_curve(curve, out, mode=mode)
      if mode.planning or not records:
        continue  # Measured, or not run (`--only`): nothing to tabulate.
      every = list(range(len(runs)))
      groups[dataset].append((label, records, every, len(runs)))
      rows.append(rls_figures.row(curve.label, records, every, len(runs)))
  if mode.planning:
    return common.Result(name, [], [])
  return rls_figures.figure_and_table(name, out, groups, rows, title)


def rls_fig2(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Fig. 2: RLS, RLS+M, RLS+M+R against Adam, MSE loss, three networks."""
  presets = {
    "rls": "RLS",
    "rls_momentum": "RLS+M",
    "rls_momentum_l1": "RLS+M+R",
    "adam_mse": "Adam",
  }
  return _variants_target(
    "rls_fig2",
    scale,
    workdir,
    presets,
    "RLS vs Adam, MSE loss (Fig. 2)",
    mode=mode,
  )


def rls_fig3(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Fig. 3: the hybrid HRLS, HRLS+M, HRLS+M+R against Adam, cross-entropy."""
  presets = {
    "rls_hybrid": "HRLS",
    "rls_hybrid_momentum": "HRLS+M",
    "rls_hybrid_momentum_l1": "HRLS+M+R",
    "adam_ce": "Adam",
  }
  return _variants_target(
    "rls_fig3",
    scale,
    workdir,
    presets,
    "RLS on hidden layers + Adam, cross-entropy (Fig. 3)",
    mode=mode,
  )


def _sweep_target(
  name: str,
  field: str,
  symbol: str,
  scale: str,
  workdir: str,
  title: str,
  mode: common.Mode = common.RUN,
) -> common.Result:
  """One curve per network with `field`s = SWEEP_VALUES (vmapped runs)."""
  out = os.path.join(workdir, name)
  os.makedirs(out, exist_ok=True)
  groups, rows = {}, []
  for dataset in DATASETS:
    curve = _curve(
      dataset,
      scale,
      "rls",
      f"RLS {symbol} sweep",
      **{field + "s": SWEEP_VALUES},
    )
    records, _, runs = common.run_curve(curve, out, mode=mode)
    if mode.planning or not records:
      continue  # Measured, or not run (`--only`): nothing to tabulate.
    groups[dataset] = []
    for value in SWEEP_VALUES:
      selected = [
        i
        for i, run in enumerate(runs)
        if np.isclose(run.get(field, np.nan), value)
      ]
      label = f"{symbol}={value:g}"
      groups[dataset].append((label, records, selected, len(runs)))
      rows.append(
        rls_figures.row(
          f"{dataset} RLS {label}",
          records,
          selected,
          len(runs),
          **{field: value},
        )
      )
  if mode.planning:
    return common.Result(name, [], [])
  return rls_figures.figure_and_table(name, out, groups, rows, title)


def rls_fig4(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Fig. 4: the ratio k in {0.01, 0.1, 1, 10}, RLS with MSE loss."""
  return _sweep_target(
    "rls_fig4",
    "ratio",
    "k",
    scale,
    workdir,
    "Influence of the ratio k (Fig. 4)",
    mode=mode,
  )


def rls_fig5(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Fig. 5: the gradient scale η in {0.01, 0.1, 1, 10}, RLS with MSE."""
  return _sweep_target(
    "rls_fig5",
    "gradient_scale",
    "eta",
    scale,
    workdir,
    "Influence of the gradient scale eta (Fig. 5)",
    mode=mode,
  )


RUNTIME_PRESETS = (
  "adam_mse",
  "rls",
  "rls_momentum_l1",
  "adam_ce",
  "rls_hybrid",
)


def _runtime_configs(
  dataset: str, scale: str, mode: common.Mode = common.RUN
) -> dict:
  """The `RUNTIME_PRESETS` of a dataset at a scale (with the global
  overrides, as every curve)."""
  suffix = "" if scale == "paper" else ",small"
  return {
    preset: common.make_config(
      Curve(preset, dataset, {}, preset + suffix), mode=mode
    )
    for preset in RUNTIME_PRESETS
  }


def _runtime_rows(
  dataset: str, scale: str, mode: common.Mode = common.RUN
) -> list[dict]:
  """One row per preset: ms per step, the ratio to Adam on the same loss,
  Table I's predicted ratio and the paper's measured one."""
  from experiments.classifier import tasks  # pylint: disable=g-import-not-at-top
  from experiments.classifier import timing  # pylint: disable=g-import-not-at-top

  task = tasks.BY_NAME[dataset]
  configs = _runtime_configs(dataset, scale, mode=mode)
  seconds = timing.time_steps(
    task,
    configs,
    steps=3 if dataset == "cifar10" else 5,
    repeats=5 if scale == "paper" else 3,
  )
  predicted = {
    hybrid: timing.predicted_ratio(task, configs["rls"], hybrid=hybrid)["ratio"]
    for hybrid in (False, True)
  }
  rows = []
  for preset in RUNTIME_PRESETS:
    is_adam = preset.startswith("adam")
    adam = "adam_ce" if configs[preset].loss == "cross_entropy" else "adam_mse"
    rows.append(
      {
        "network": dataset,
        "optimizer": preset,
        "ms_per_step": 1000 * seconds[preset],
        "ratio_to_adam": seconds[preset] / seconds[adam],
        "table1_ratio": None if is_adam else predicted["hybrid" in preset],
        "paper_ratio": None if is_adam else timing.PAPER_RATIOS[dataset],
      }
    )
  return rows


def rls_runtime(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Run time per step of RLS variants vs Adam, side by side, per network,
  next to Table I's FLOP prediction and the paper's ratios (1.1/1.4/1.1)."""
  if mode.planning:  # No program: the target is a short timing itself.
    return common.Result("rls_runtime", [], [])
  out = os.path.join(workdir, "rls_runtime")
  os.makedirs(out, exist_ok=True)
  rows = [
    row
    for dataset in DATASETS
    for row in _runtime_rows(dataset, scale, mode=mode)
  ]
  files = common.write_table(
    rows,
    os.path.join(out, "table"),
    f"RLS / Adam time per step ({scale} networks)",
  )
  return common.Result("rls_runtime", files, rows)


TARGETS: dict[str, Callable[..., common.Result]] = {
  "rls_fig2": rls_fig2,
  "rls_fig3": rls_fig3,
  "rls_fig4": rls_fig4,
  "rls_fig5": rls_fig5,
  "rls_runtime": rls_runtime,
}
