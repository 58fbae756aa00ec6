"""The tables `bench_rtrl.py` prints from its measurements: time and memory
per estimator and size next to the paper's Table 1 exponents, FLOP-floor
ratios, and r-OK's overhead over r-KF-AVG."""

from __future__ import annotations

from rtrl import cells
from rtrl.tasks import copy_task
from scripts.benchlib.costs import GENERIC_PREFIX
from scripts.benchlib.costs import PAPER_TEXT
from scripts.benchlib.costs import base_name
from scripts.benchlib.costs import flop_floor
from scripts.benchlib.timing import fit_exponent
from scripts.benchlib.timing import fmt_count
from scripts.benchlib.timing import fmt_ms


def roofline_seconds(result, gflops, gbps) -> float:
  """The step's floor: its GEMM FLOPs at the large-matmul rate or its
  tangent's one read and one write at the streaming rate, the larger."""
  return max(
    result["floor_flops"] / (gflops * 1e9),
    result.get("floor_bytes", 0.0) / (gbps * 1e9),
  )


def report(all_results, names, sizes, skipped, gflops, gbps=None):
  """Prints the tables; `names` maps label -> estimator. Returns the fits."""
  tags = list(names)

  def cell(tag, n, getter, fmt):
    res = all_results.get((tag, n))
    return fmt(getter(res)) if res else "skip"

  width = max(len(t) for t in tags) + 2
  head = f"{'method':<{width}}" + "".join(f"{'n=' + str(n):>10}" for n in sizes)
  sections = [
    (
      "time per training step, ms (min over repeats; full trainer)",
      lambda r: r["full"]["min"],
      fmt_ms,
    ),
    (
      f"full step / FLOP floor (its GEMMs at {gflops:.0f} GFLOP/s; "
      "1 = at the matmul roofline)",
      lambda r: r["full"]["min"] * gflops * 1e9 / r["floor_flops"],
      lambda x: f"{x:.3g}",
    ),
  ]
  if gbps:
    sections.append(
      (
        f"full step / roofline floor (the larger of the FLOP floor and the "
        f"tangent read and written once at {gbps:.1f} GB/s)",
        lambda r: r["full"]["min"] / roofline_seconds(r, gflops, gbps),
        lambda x: f"{x:.3g}",
      )
    )
  if any("core" in r for r in all_results.values()):
    sections.append(
      (
        "estimator tangent step alone, ms per step (TBPTT: gradient only)",
        lambda r: r["core"]["min"],
        fmt_ms,
      )
    )
  sections += [
    (
      "first call of the full run (compile + run), s wall",
      lambda r: r["first_call_s"],
      lambda x: f"{x:.3g}",
    ),
    (
      "per-example tangent memory, floats (TBPTT: T*S*n; '!' = not the "
      "analytic size)",
      lambda r: r,
      lambda r: (
        fmt_count(r["mem"])
        + ("!" if r["analytic"] not in (None, r["mem"]) else "")
      ),
    ),
  ]
  for title, getter, fmt in sections:
    print(f"\n{title}\n{head}")
    for tag in tags:
      print(
        f"{tag:<{width}}"
        + "".join(f"{cell(tag, n, getter, fmt):>10}" for n in sizes)
      )
  print("\nfitted exponents in n (log-log least squares over measured sizes)")
  print(f"{'method':<{width}}{'full':>7}{'mem':>7}   paper time/mem")
  fits = {}
  for tag in tags:
    rows = [all_results[(tag, n)] for n in sizes if (tag, n) in all_results]
    ns = [r["n"] for r in rows]
    fit = {
      k: fit_exponent(ns, [g(r) for r in rows])
      for k, g in (
        ("full", lambda r: r["full"]["min"]),
        ("mem", lambda r: r["mem"]),
      )
    }
    fits[tag] = fit
    print(
      f"{tag:<{width}}"
      + "".join(f"{fit[k]:>7.2f}" for k in fit)
      + f"   {PAPER_TEXT[base_name(names[tag])]}"
    )
  if skipped:
    print("\nskipped (and every larger size):")
    for tag, (n, why) in skipped.items():
      print(f"  {tag} at n={n}: {why}")
  return fits


def report_generic(all_results, tags, sizes):
  """Prints each generic (autodiff) method's full step over its analytic
  twin's on the same cell, from the same interleaved run."""
  pairs = [
    (t, t[len(GENERIC_PREFIX) :])
    for t in tags
    if t.startswith(GENERIC_PREFIX) and t[len(GENERIC_PREFIX) :] in tags
  ]
  if not pairs:
    return
  print("\ngeneric (CustomCell, autodiff) / analytic full step, same cell")
  width = max(len(t) for t, _ in pairs) + 2
  print(f"{'method':<{width}}" + "".join(f"{'n=' + str(n):>10}" for n in sizes))
  for generic, analytic in pairs:
    row = []
    for n in sizes:
      a, g = all_results.get((analytic, n)), all_results.get((generic, n))
      row.append(
        f"{g['full']['min'] / a['full']['min']:.2f}x" if a and g else "skip"
      )
    print(f"{generic:<{width}}" + "".join(f"{r:>10}" for r in row))


def report_overhead(all_results, sizes, args, gflops):
  """r-OK vs r-KF-AVG and the breakdown of OK's tangent step."""
  overhead = []
  for n in sizes:
    rows = [
      (r, all_results.get((f"{r}-ok", n)), all_results.get((f"{r}-kf_avg", n)))
      for r in args.ranks
    ]
    rows = [row for row in rows if row[1]]
    if not rows:
      continue
    print(f"\nOK at n={n} (target: r-OK / r-KF-AVG <= 1.3), ms per step")
    print(f"{'rank':>5}{'ok full':>10}{'kfavg':>10}{'ratio':>7}")
    for rank, ok_res, kf_res in rows:
      kf_ms = kf_res["full"]["min"] if kf_res else None
      full = ok_res["full"]["min"] / kf_ms if kf_ms else float("nan")
      overhead.append({"n": n, "rank": rank, "full_ratio": full})
      print(
        f"{rank:>5}{fmt_ms(ok_res['full']['min']):>10}"
        f"{fmt_ms(kf_ms):>10}{full:>7.2f}"
      )
    pieces = ["H·A", "reduce", "linearize"]
    if not any("H·A" in r[1] for r in rows):
      continue
    print(
      f"OK step broken down, ms per step (batch {args.batch_size}); "
      "H·A GFLOP/s and its % of the large matmul"
    )
    print(
      f"{'rank':>5}{'full':>9}"
      + "".join(f"{p:>11}" for p in pieces)
      + f"{'rest':>9}{'H·A GF/s':>10}{'%mm':>6}"
    )
    for rank, ok_res, _ in rows:
      if "H·A" not in ok_res:
        continue
      t = {p: ok_res[p]["min"] for p in pieces}
      full = ok_res["full"]["min"]
      cell = cells.make(args.cell, n)
      ha_flops = flop_floor(
        "kf_avg", rank, cell, copy_task.VOCAB_SIZE, args.batch_size
      )
      ha_gflops = ha_flops / t["H·A"] / 1e9
      rest = full - sum(t.values())
      print(
        f"{rank:>5}{fmt_ms(full):>9}"
        + "".join(f"{fmt_ms(t[p]):>11}" for p in pieces)
        + f"{fmt_ms(rest):>9}{ha_gflops:>10.0f}{100 * ha_gflops / gflops:>5.0f}%"
      )
      ok_res["H·A_gflops"] = ha_gflops
  return overhead
