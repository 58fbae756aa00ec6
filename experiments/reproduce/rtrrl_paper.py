"""RTRRL's Table 2 (Lemmel & Grosu, "Real-Time Recurrent Reinforcement
Learning", AAAI 2025, appendix) and the estimators nobody has put in an
online RL agent, on the same protocol.

* `rtrrl_table2`: exact RTRL, RFLO (with feedback alignment), PPO (BPTT
  over rollouts) and the memoryless linear TD(λ) agent, CT-RNN-32, on
  MemoryChain-4..64 and CartPole with velocities or positions hidden; the
  median ± std over 5 seeds of each run's best evaluation, beside the
  published numbers.
* `rtrrl_estimators`: r-OK (ranks 1, 4, 16), r-B-OK, KF-RTRL, SnAp-1 and
  SnAp-2 on a 90%-sparse core, SK-RTRL, UORO, online TBPTT, the LRU with
  its exact diagonal RTRL, beside exact RTRL and RFLO: per method the
  longest MemoryChain solved (median best evaluation >= `SOLVED`), the
  CartPole returns and the cost per step.

Scales: `paper` is RTRRL's protocol (up to 50M steps, an evaluation every
100k, early stop after 20 without improvement, 5 seeds); `small` caps the
runs at 300k steps with an evaluation every 50k, minutes per program on a
CPU. A CPU run of the paper protocol with a step cap:
`scripts/reproduce.py rtrrl_table2 --scale paper --set num_steps=1000000`.
Every number in the tables says the step cap it was made with. Both
targets train their curves into `workdir/rtrrl_paper/` (shared: a Table-2
curve is trained once for both) and write their table and figure to
`workdir/TARGET/`.
"""

from __future__ import annotations

import os

import numpy as np

from experiments.reproduce import common
from experiments.reproduce.common import Curve

MEMORY_LENGTHS = (4, 8, 16, 32, 64)
# Our task names and RTRRL's table rows: "-pos" observes the positions
# (their obs_mask "even": x, theta), "-vel" the velocities.
CARTPOLES = {
  "cartpole_velocities_hidden": "CartPole-pos",
  "cartpole_positions_hidden": "CartPole-vel",
}
# RTRRL's appendix Table 2: median ± std of the best evaluation, 5 runs.
PUBLISHED = {
  "MemoryChain-4": {
    "RTRL": (1.00, 0.11),
    "RFLO": (1.00, 0.00),
    "PPO": (1.00, 0.00),
    "linear": (0.07, 0.01),
  },
  "MemoryChain-8": {
    "RTRL": (0.90, 0.25),
    "RFLO": (1.00, 0.00),
    "PPO": (1.00, 0.00),
    "linear": (0.07, 0.02),
  },
  "MemoryChain-16": {
    "RTRL": (0.61, 0.27),
    "RFLO": (1.00, 0.00),
    "PPO": (1.00, 0.00),
    "linear": (0.12, 0.04),
  },
  "MemoryChain-32": {
    "RTRL": (0.56, 0.13),
    "RFLO": (0.77, 0.18),
    "PPO": (1.00, 0.00),
    "linear": (0.17, 0.03),
  },
  "MemoryChain-64": {
    "RTRL": (0.61, 0.13),
    "RFLO": (0.32, 0.08),
    "PPO": (1.00, 0.47),
    "linear": (0.26, 0.07),
  },
  "CartPole-pos": {
    "RTRL": (178.57, 93.04),
    "RFLO": (500.00, 163.17),
    "PPO": (70.76, 11.42),
    "linear": (57.47, 1.38),
  },
  "CartPole-vel": {
    "RTRL": (500.00, 0.00),
    "RFLO": (500.00, 0.00),
    "PPO": (112.11, 40.38),
    "linear": (454.55, 34.47),
  },
}
# Recurrent PPO's Adam rate (rtrl.rl.ppo: of 3e-4..1e-2 the one that
# solved both CartPole with velocities hidden and MemoryChain-64).
PPO_LEARNING_RATE = 3e-3
TABLE2_METHODS = {
  "RTRL": dict(estimator="rtrl"),
  "RFLO": dict(estimator="rflo"),
  "PPO": dict(estimator="ppo", learning_rate=PPO_LEARNING_RATE),
  "linear": dict(estimator="linear"),
}
# A MemoryChain length counts as solved at this median best evaluation.
SOLVED = 0.9


def scale_fields(scale: str) -> dict:
  """The protocol fields of `scale` (`paper`: the presets' RTRRL protocol
  at its 50M-step limit)."""
  if scale == "paper":
    return dict(num_steps=50_000_000, checkpoint_every=1_000_000)
  return dict(
    num_steps=300_000,
    eval_every=50_000,
    log_every=50_000,
    patience=0,
    checkpoint_every=100_000,
  )


def tasks() -> list[tuple[str, str, dict]]:
  """`(row name, preset, fields)` of every task of Table 2."""
  rows = [
    (f"MemoryChain-{m}", "memory_chain", dict(memory_length=m))
    for m in MEMORY_LENGTHS
  ]
  return rows + [(row, preset, {}) for preset, row in CARTPOLES.items()]


def curve(task: str, preset: str, fields: dict, method: str, method_fields):
  return Curve(
    label=f"{task} {method}",
    experiment="rl",
    preset=preset,
    overrides={**fields, **method_fields},
  )


def best_evals(result: common.CurveResult) -> list[float]:
  """Each selected run's best evaluation return (`summary.json`)."""
  values = common.per_run(
    result.summary.get("best_eval_return"), len(result.runs)
  )
  return [
    np.nan if values[i] is None else float(values[i]) for i in result.best_runs
  ]


def median_std(values: list[float]) -> tuple[float, float]:
  finite = [v for v in values if np.isfinite(v)]
  if not finite:
    return float("nan"), float("nan")
  return float(np.median(finite)), float(np.std(finite))


def env_steps_per_second(result: common.CurveResult) -> float:
  """The program's environment steps per second (all its runs), the
  median over its records."""
  speeds = [r["steps_per_second"] for r in result.records[1:]]
  runs = len(result.runs)
  return float(np.median(speeds)) * runs if speeds else float("nan")


def _step_cap(result: common.CurveResult) -> int:
  return int(result.records[-1]["step"]) if result.records else 0


def plot_grid(results, task_names, path: str, title: str) -> str:
  """One panel per task: each method's evaluation return against
  environment steps, the mean over its seeds (± std where at most five
  methods share a panel)."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  methods = list(
    dict.fromkeys(r.curve.label.rsplit(" ", 1)[1] for r in results)
  )
  # One colour per method in every panel; bands only where they stay legible.
  colours = plt.get_cmap("tab20" if len(methods) > 10 else "tab10")
  bands = len(methods) <= 5
  columns = 4
  rows = -(-len(task_names) // columns)
  fig, axes = plt.subplots(
    rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False
  )
  for ax, task in zip(axes.flat, task_names):
    for result in results:
      if not result.curve.label.startswith(task + " "):
        continue
      steps, values = common.series(
        result.records, "eval_return", result.best_runs, len(result.runs)
      )
      if not steps.size:
        continue
      mean, std = np.nanmean(values, 0), np.nanstd(values, 0)
      label = result.curve.label[len(task) + 1 :]
      colour = colours(methods.index(label))
      ax.plot(steps, mean, label=label, color=colour)
      if bands:
        ax.fill_between(steps, mean - std, mean + std, alpha=0.15, color=colour)
    ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    ax.set_title(task, fontsize="medium")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
  for ax in list(axes.flat)[len(task_names) :]:
    ax.axis("off")
  handles, labels = axes.flat[0].get_legend_handles_labels()
  if handles:
    fig.legend(handles, labels, loc="lower right", fontsize="small", ncol=3)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


# Both targets' curves, shared: a Table-2 curve is the estimator table's
# curve of the same task and method, trained once.
CURVES_DIR = "rtrrl_paper"


def _run(scale, workdir, methods, mode):
  curves = [
    curve(task, preset, {**fields, **scale_fields(scale)}, name, method)
    for task, preset, fields in tasks()
    for name, method in methods.items()
  ]
  return common.run_curves(
    curves,
    os.path.join(workdir, CURVES_DIR),
    best_eval_score,
    higher_is_better=True,
    mode=mode,
  )


def _out(workdir: str, target: str) -> str:
  """`workdir/target/`, where a target's table and figure go."""
  out = os.path.join(workdir, target)
  os.makedirs(out, exist_ok=True)
  return out


def best_eval_score(records, summary: dict, run: int) -> float:
  """Run `run`'s best evaluation (NaN where it has none yet)."""
  del records
  value = common.per_run(summary.get("best_eval_return"), run + 1)[run]
  return float("nan") if value is None else float(value)


def table2(scale: str, workdir: str, mode=common.RUN) -> common.Result:
  """RTRRL's Table 2: RTRL, RFLO, PPO and linear TD(λ) on MemoryChain-4..64
  and the two partially observed CartPoles, ours beside the published
  median ± std of the best evaluation over 5 seeds."""
  results = _run(scale, workdir, TABLE2_METHODS, mode)
  if mode.planning:  # Nothing ran (--plan, a launcher's listing).
    return common.Result("rtrrl_table2", [], [])
  rows = []
  for result in results:
    task, method = result.curve.label.rsplit(" ", 1)
    ours, ours_std = median_std(best_evals(result))
    published, published_std = PUBLISHED[task][method]
    rows.append(
      {
        "task": task,
        "method": method,
        "ours": ours,
        "ours_std": ours_std,
        "published": published,
        "published_std": published_std,
        "within": bool(
          abs(ours - published) <= max(ours_std, published_std, 1e-9)
        )
        if np.isfinite(ours)
        else None,
        "step_cap": _step_cap(result),
        "env_steps_per_s": env_steps_per_second(result),
      }
    )
  out = _out(workdir, "rtrrl_table2")
  files = common.write_table(
    rows, os.path.join(out, "table"), "RTRRL Table 2: ours and published"
  )
  names = [task for task, _, _ in tasks()]
  files.append(
    plot_grid(
      results,
      names,
      os.path.join(out, "figure.png"),
      "RTRRL's methods: evaluation return (mean ± std over seeds)",
    )
  )
  return common.Result("rtrrl_table2", files, rows)


# The methods nobody has put in an online RL agent, beside exact RTRL,
# RFLO and the baselines; a sparse core keeps 10% of W_h.
SPARSE = dict(recurrent_density=0.1)
ESTIMATOR_METHODS = {
  "RTRL": dict(estimator="rtrl"),
  "RFLO": dict(estimator="rflo"),
  "1-OK": dict(estimator="ok", rank=1),
  "4-OK": dict(estimator="ok", rank=4),
  "16-OK": dict(estimator="ok", rank=16),
  "4-B-OK": dict(estimator="ok_biased", rank=4),
  "KF-RTRL": dict(estimator="kf"),
  "SnAp-1-sparse": dict(estimator="snap1", **SPARSE),
  "SnAp-2-sparse": dict(estimator="snap", order=2, **SPARSE),
  "4-SK-RTRL": dict(estimator="sk_rtrl", rank=4),
  "UORO": dict(estimator="uoro"),
  "TBPTT-16": dict(estimator="tbptt", truncation=16),
  "LRU-RTRL": dict(estimator="rtrl", cell="lru"),
  "PPO": dict(estimator="ppo", learning_rate=PPO_LEARNING_RATE),
  "linear": dict(estimator="linear"),
}


def estimator_rows(results) -> list[dict]:
  """Per method: the longest MemoryChain solved, each task's median best
  evaluation, and the cost per environment step."""
  by_method: dict[str, dict] = {}
  for result in results:
    task, method = result.curve.label.rsplit(" ", 1)
    row = by_method.setdefault(method, {"method": method})
    row[task] = median_std(best_evals(result))[0]
    speed = env_steps_per_second(result)
    if np.isfinite(speed) and task == "MemoryChain-4":
      row["us_per_env_step"] = 1e6 / speed
  for row in by_method.values():
    solved = [
      m
      for m in MEMORY_LENGTHS
      if np.isfinite(row.get(f"MemoryChain-{m}", np.nan))
      and row[f"MemoryChain-{m}"] >= SOLVED
    ]
    row["longest_solved"] = max(solved) if solved else 0
  return list(by_method.values())


def estimators_table(
  scale: str, workdir: str, mode=common.RUN
) -> common.Result:
  """The estimators nobody has run in an online RL agent (r-OK at ranks 1,
  4 and 16, r-B-OK, KF-RTRL, SnAp-1 and SnAp-2 on a sparse core, SK-RTRL,
  UORO, online TBPTT-16, the LRU's exact RTRL) beside exact RTRL, RFLO,
  PPO and the linear agent, on RTRRL's tasks and protocol."""
  results = _run(scale, workdir, ESTIMATOR_METHODS, mode)
  if mode.planning:  # Nothing ran (--plan, a launcher's listing).
    return common.Result("rtrrl_estimators", [], [])
  rows = estimator_rows(results)
  out = _out(workdir, "rtrrl_estimators")
  files = common.write_table(
    rows,
    os.path.join(out, "table"),
    "Online RL with every estimator: median best evaluation over seeds",
  )
  names = [task for task, _, _ in tasks()]
  files.append(
    plot_grid(
      results,
      names,
      os.path.join(out, "figure.png"),
      "Every estimator in RTRRL's agent: evaluation return",
    )
  )
  return common.Result("rtrrl_estimators", files, rows)


TARGETS = {"rtrrl_table2": table2, "rtrrl_estimators": estimators_table}

__all__ = ["PUBLISHED", "TARGETS", "estimators_table", "table2"]
