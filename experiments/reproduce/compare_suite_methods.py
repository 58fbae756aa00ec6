"""The `compare_suite` target's methods and settings, as data: every
method (`methods()`, in the table's order) and whether this tree has what
it needs (`available`), the settings per scale (`SETTINGS`,
`TASK_SETTINGS`), the methods a scale leaves out (`SKIPPED`) and the
outside reference (`SKETCHED_RTRL_COSINE`).
"""

from __future__ import annotations

from experiments.online import suite_runs
from experiments.online.suite_runs import Method
from rtrl import cells
from rtrl import estimators

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
