"""The RTRL benchmark's cost model: methods, labels, paper Table 1
exponents, analytic tangent sizes and FLOP floors (pure Python, no timing)."""

from __future__ import annotations

from rtrl import estimators
from rtrl.estimators.sk_rtrl import append_width

RANKED = tuple(
  name
  for name in estimators.names()
  if "rank" in estimators.hyperparameters(name)
)
# Those taking another hyper-parameter (SnAp-n's `order`) are measured by
# `bench_rtrl --snap_orders`, not in the ranked/unranked table.
UNRANKED = ("tbptt",) + tuple(
  name for name in estimators.names() if not estimators.hyperparameters(name)
)
# Paper Table 1: (time, memory) exponents of n per example and step. kf and
# kf_approx are 1-OK-like; ok_biased costs what ok does.
PAPER = {
  "rtrl": (4, 3),
  "ok": (3, 2),
  "ok_biased": (3, 2),
  "kf_avg": (3, 2),
  "kf": (3, 2),
  "kf_approx": (3, 2),
  "uoro": (2, 2),
  "ktp": (2, 1),
  "tbptt": (2, 1),
  "snap1": (2, 2),
  "rflo": (2, 2),
  # Not in Table 1 (SK-RTRL's paper): the (S n)^3 SVD of each step's new
  # residual, n^2 r^2 for the sketch; memory (S + r) K n^2.
  "sk_rtrl": (3, 2),
}
PAPER_TEXT = {
  "rtrl": "n^4 / n^3",
  "ok": "r n^3 / r n^2",
  "ok_biased": "r n^3 / r n^2",
  "kf_avg": "r n^3 / r n^2",
  "kf": "n^3 / n^2",
  "kf_approx": "n^3 / n^2",
  "uoro": "n^2 / n^2",
  "ktp": "r n^2 / r n",
  "tbptt": "T n^2 / T n",
  "snap1": "n^2 / n^2",
  "rflo": "n^2 / n^2",
  "sk_rtrl": "n^3 + r^2 n^2 / r n^2",
}


# The estimators that serve any `CustomCell` by autodiff; `--generic` times
# them on the built-in cell seen only through its step (`cells.as_custom`).
GENERIC = ("rtrl", "uoro", "snap1")
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
  """The tangent size each estimator's design promises (P = input + n + 1).
  The generic SnAp-1 stores its one-step pattern, which for the LSTM is
  smaller than the unit pattern (marked '!' in the report)."""
  name = base_name(name)
  n, k, s = cell.hidden_size, cell.num_gates, cell.num_state_rows
  p = input_size + n + 1
  if name == "rtrl":
    return p * k * n * s * n
  if name == "uoro":
    return s * n + p * k * n
  if name in ("kf", "kf_approx"):
    return p + k * n * s * n
  if name in ("kf_avg", "ok", "ok_biased"):
    return rank * (p + k * n * s * n)
  if name == "ktp":
    return rank * (p + s * n + k * n)
  if name in ("snap1", "rflo"):
    return s * p * k * n
  if name == "sk_rtrl":  # SnAp-1's blocks, L, R, V_c and the certificate
    width = append_width(cell, rank, None)
    return s * p * k * n + (p * k * n + s * n) * rank + s * n * width + 1
  raise ValueError(f"no analytic size for estimator {name!r}")


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
  GEMMs: `H A` on every stored `(S n)`-row (`2 rows (S n)^2`), plus for OK
  and B-OK the reduction's Gram matrix and combination (`2 (2r+1) (r+1) M`,
  `M = K S n^2`). Elementwise work, the cell and the optimiser are left out,
  so `time / floor` is how far a step is from the matmul roofline. A
  generic method is held to its analytic twin's floor."""
  name = base_name(name)
  n, k, s = cell.hidden_size, cell.num_gates, cell.num_state_rows
  p = input_size + n + 1
  square = 2 * (s * n) ** 2
  if name == "rtrl":
    flops = p * k * n * square
  elif name in ("kf", "kf_approx"):
    flops = k * n * square
  elif name in ("kf_avg", "ok", "ok_biased"):
    flops = rank * k * n * square
    if name != "kf_avg":
      flops += 2 * (2 * rank + 1) * (rank + 1) * k * s * n * n
  elif name == "ktp":
    flops = rank * square
  elif name == "uoro":
    flops = 2 * n * k * n + 2 * p * k * n
  elif name in ("snap1", "rflo"):
    # No GEMM: the step's own `[x, h, 1] @ W` (a GEMV) and the elementwise
    # propagation `A_j J_j + hhat ⊗ D_j`, memory-bound, so the ratio to a
    # GEMM roofline overstates how far it is from its own floor.
    flops = 2 * p * k * n + 2 * (s * s + s) * p * k * n
  elif name == "sk_rtrl":
    # H L, and R's recompression by the truncation's right vectors (the QR
    # and the SVDs are LAPACK, left out); c: the default pre-projection.
    c = min(s * n, max(4, -(-rank // 4)))
    flops = rank * square + 2 * p * k * n * (rank + c) * rank
  elif name == "tbptt":
    flops = 3 * 2 * p * k * n  # forward + two backward products per step
  else:
    raise ValueError(f"no FLOP floor for {name!r}")
  return float(flops * batch)
