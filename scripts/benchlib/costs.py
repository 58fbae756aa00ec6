"""The RTRL benchmark's cost model: methods, labels, paper Table 1
exponents, analytic tangent sizes and FLOP floors (pure Python, no timing).

Every estimator's formulas are its `rtrl.estimators.spec(name).cost`,
declared beside its factory; only TBPTT's (not an estimator) are here.
"""

from __future__ import annotations

from rtrl import estimators

RANKED = tuple(
  name
  for name in estimators.names()
  if "rank" in estimators.hyperparameters(name)
)
# Those taking another required hyper-parameter (SnAp-n's `order`) are
# measured by `bench_rtrl --snap_orders`, not in the ranked/unranked table.
UNRANKED = ("tbptt",) + tuple(
  name
  for name in estimators.names()
  if not any(h.required for h in estimators.spec(name).hyperparameters)
)
# TBPTT-T per example and step: time T n^2, memory T n.
_TBPTT_EXPONENTS = (2, 1)
# The estimators of the ranked/unranked table.
_TABLED = [s for s in estimators.SPECS if s.name in RANKED + UNRANKED]
# Paper Table 1 (and its like for the later estimators): (time, memory)
# exponents of n per example and step, and their formulas as text.
PAPER = {
  "tbptt": _TBPTT_EXPONENTS,
  **{s.name: s.cost.exponents for s in _TABLED},
}
PAPER_TEXT = {
  "tbptt": "T n^2 / T n",
  **{s.name: f"{s.cost.time} / {s.cost.memory}" for s in _TABLED},
}


def _rank_only(name: str, rank) -> dict:
  """The hyper-parameters the benchmark gives `name`: `rank` where it
  takes one."""
  return {"rank": rank} if "rank" in estimators.hyperparameters(name) else {}


# The estimators that serve any `CustomCell` by autodiff; `--generic` times
# them on the built-in cell seen only through its step (`cells.as_custom`).
GENERIC = tuple(s.name for s in estimators.SPECS if s.custom is not None)
GENERIC_PREFIX = "generic-"


def base_name(name: str) -> str:
  """The estimator behind a method name (`generic-snap1` -> `snap1`)."""
  return (
    name[len(GENERIC_PREFIX) :] if name.startswith(GENERIC_PREFIX) else (name)
  )


def methods(names, ranks, generic=False):
  """[(estimator, rank or None)] in the order they are printed; with
  `generic`, each of `GENERIC` among `names` is followed by its generic
  twin."""
  out = []
  for name in names:
    out += [(name, r) for r in ranks] if name in RANKED else [(name, None)]
    if generic and name in GENERIC:
      out.append((GENERIC_PREFIX + name, None))
  return out


def label(method, truncation):
  name, rank = method
  return (
    f"tbptt-{truncation}"
    if name == "tbptt"
    else (f"{rank}-{name}" if rank else name)
  )


def analytic_tangent_floats(name, rank, cell, input_size) -> int:
  """The tangent size each estimator's design promises (P = input + n + 1),
  `estimators.spec(name).cost.tangent_floats`. The generic SnAp-1 stores
  its one-step pattern, which for the LSTM is smaller than the unit
  pattern (marked '!' in the report)."""
  name = base_name(name)
  if name not in estimators.names():
    raise ValueError(f"no analytic size for estimator {name!r}")
  cost = estimators.spec(name).cost
  return cost.tangent_floats(cell, input_size, **_rank_only(name, rank))


def memory_floor_bytes(name, rank, cell, input_size, batch) -> float:
  """Bytes an online step must move at least: every example's tangent
  read once and written once, float32 (`analytic_tangent_floats`). The
  estimators whose work is element-wise (UORO, SnAp-1, RFLO, KTP, KF's
  sign trick) are bound by this, not by FLOPs. TBPTT carries no tangent:
  0 (its floor is its FLOPs)."""
  if base_name(name) == "tbptt":
    return 0.0
  floats = analytic_tangent_floats(name, rank, cell, input_size)
  return float(2 * 4 * floats * batch)


def flop_floor(name, rank, cell, input_size, batch) -> float:
  """FLOPs per online step (whole batch) of the estimator's unavoidable
  GEMMs (`estimators.spec(name).cost.gemm_flops`: e.g. `H A` on every
  stored `(S n)`-row, `2 rows (S n)^2`, plus for OK and B-OK the
  reduction's Gram matrix and combination). Elementwise work, the cell and
  the optimiser are left out, so `time / floor` is how far a step is from
  the matmul roofline. A generic method is held to its analytic twin's
  floor."""
  name = base_name(name)
  if name == "tbptt":
    n, k = cell.hidden_size, cell.num_gates
    p = input_size + n + 1
    return float(3 * 2 * p * k * n * batch)  # forward + two backward
  if name not in estimators.names():
    raise ValueError(f"no FLOP floor for {name!r}")
  cost = estimators.spec(name).cost
  flops = cost.gemm_flops(cell, input_size, **_rank_only(name, rank))
  return float(flops * batch)
