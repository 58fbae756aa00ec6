"""The markdown report of `scripts/bench_peers.py` (no peer imports: the
parent process, in any venv, writes it from the children's JSON)."""

from __future__ import annotations

import datetime
import os
import platform
import statistics


def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown CPU"


def fastest_theirs(results: list) -> list:
  """One row per (algorithm, cell, n, batch): where a peer has several
  ways to run a pair (braintrace's vmap and batched modes, torch's thread
  counts), its fastest; our side (the same program, timed beside each
  way) pools its samples over the ways."""
  groups: dict = {}
  for r in results:
    groups.setdefault(
      (r["algorithm"], r["cell"], r["n"], r["batch"]), []
    ).append(r)
  rows = []
  for group in groups.values():
    best = dict(min(group, key=lambda r: r["theirs_ms"]))
    ours = [x for r in group for x in r.get("samples_ms", {}).get("ours", [])]
    if ours:
      best["ours_ms"] = statistics.median(ours)
      best["ours_min_ms"] = min(ours)
      best["ratio_median"] = best["theirs_ms"] / best["ours_ms"]
      best["ratio_min"] = best["theirs_min_ms"] / best["ours_min_ms"]
    rows.append(best)
  return rows


def fmt(x, spec=".3g") -> str:
  return "-" if x is None else format(x, spec)


def checks_table(report: dict) -> list:
  lines = ["| algorithm | cell | check | result |", "|---|---|---|---|"]
  for c in report.get("checks", []):
    if "error" in c:
      result = f"FAILED to run: {c['error'][:200]}"
    elif "summary" in c:
      result = ("agree: " if c["ok"] else "DISAGREE: ") + c["summary"]
    else:
      result = (
        ("agree" if c["ok"] else "DISAGREE")
        + f": cell {c['cell_max_rel']:.1e}, readout "
        f"{c['readout_max_rel']:.1e} (max rel)"
      )
    lines.append(
      f"| {c['algorithm']} | {c['cell']} | {c.get('check', '-')} | {result} |"
    )
  return lines


def timing_table(report: dict) -> list:
  lines = [
    "| algorithm | cell | n | B | ours ms | theirs ms (their way) | "
    "theirs / ours, median (min) | tangent state MiB, ours / theirs | "
    "loss trajectories |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  rows = sorted(
    fastest_theirs(report.get("results", [])),
    key=lambda r: (r["algorithm"], r["cell"], r["n"], r["batch"]),
  )
  for r in rows:
    ratio = r["ratio_median"]
    bold = "**" if ratio >= 1 else ""
    lines.append(
      f"| {r['algorithm']} | {r['cell']} | {r['n']} | {r['batch']} | "
      f"{fmt(r['ours_ms'])} | {fmt(r['theirs_ms'])} ({r['theirs']}) | "
      f"{bold}{ratio:.2f}{bold} ({r['ratio_min']:.2f}) | "
      f"{fmt(r['ours_state_mib'])} / {fmt(r['theirs_state_mib'])} | "
      f"{fmt(r['loss_trajectory_max_rel'], '.1e')} |"
    )
  for s in report.get("skipped", []):
    lines.append(
      f"| {s['algorithm']} | {s['cell']} | {s['n']} | {s['batch']} | - | - "
      f"| - | - | {s['why'][:160]} |"
    )
  return lines


def summary_table(reports: list) -> list:
  """One row per peer, algorithm and cell: theirs / ours (median) per
  batch and size, `n = a / b / c`; below 1 in italics (theirs faster)."""
  rows: dict = {}
  sizes: set = set()
  batches: set = set()
  for report in reports:
    for r in fastest_theirs(report.get("results", [])):
      key = (report["peer"], r["algorithm"], r["cell"])
      rows.setdefault(key, {})[(r["batch"], r["n"])] = r["ratio_median"]
      sizes.add(r["n"])
      batches.add(r["batch"])
  sizes_s, batches_s = sorted(sizes), sorted(batches)
  n_label = " / ".join(str(n) for n in sizes_s)
  lines = [
    "| peer | algorithm | cell | "
    + " | ".join(f"B = {b}, n = {n_label}" for b in batches_s)
    + " |",
    "|---|---|---|" + "---|" * len(batches_s),
  ]
  for (peer, algorithm, cell), ratios in rows.items():
    cells = []
    for b in batches_s:
      values = []
      for n in sizes_s:
        ratio = ratios.get((b, n))
        if ratio is None:
          values.append("-")
        elif ratio < 1:
          values.append(f"*{ratio:.2f}*")
        else:
          values.append(f"{ratio:.2f}")
      cells.append(" / ".join(values))
    lines.append(
      f"| {peer} | {algorithm} | {cell} | " + " | ".join(cells) + " |"
    )
  return lines


def measured_here() -> dict:
  """Where and when a run is: today's date, this CPU, the load now (saved
  with the run's JSON, so that `--report` says the run's, not its own)."""
  load = os.getloadavg() if hasattr(os, "getloadavg") else (0, 0, 0)
  return {
    "date": datetime.date.today().isoformat(),
    "cpu": cpu_model(),
    "cpus": os.cpu_count(),
    "load_at_end": " ".join(f"{x:.1f}" for x in load),
  }


def _row_loads(reports: list) -> str:
  """The 1-minute load averages logged with the timed rows, as a range."""
  loads = [
    float(row["load"].split()[2])
    for report in reports
    for row in report.get("results", ())
    if str(row.get("load", "")).startswith("load average ")
  ]
  return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "not recorded"


def report_markdown(reports: list, args, measured: dict | None = None) -> str:
  """Date, machine, versions, then per peer its checks and its timings;
  `measured` (`measured_here()` of the run) None: not recorded."""
  m = measured or {}
  lines = [
    f"Measured {m.get('date', '(date not recorded)')} on "
    f"{m.get('cpu', '(CPU not recorded)')} ({m.get('cpus', '?')} CPUs; "
    f"load average over the timed rows {_row_loads(reports)}); float32, one-hot inputs "
    f"over {args.vocab} symbols, linear readout, cross-entropy, Adam, one "
    f"update per step; median of {args.repeats} interleaved rounds.",
    "",
    "Theirs / ours, median ms per step (above 1: ours faster):",
    "",
    *summary_table(reports),
  ]
  for report in reports:
    lines += ["", f"### {report['peer']}", ""]
    if "error" in report:
      lines.append(f"Not run: {report['error']}")
      continue
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    lines += [f"Versions: {versions}.", "", *checks_table(report), ""]
    lines += timing_table(report)
    if report.get("cases"):
      lines += ["", "| their test case, run against ours | passed | detail |"]
      lines.append("|---|---|---|")
      for c in report["cases"]:
        lines.append(
          f"| {c['case']} | {'yes' if c['passed'] else 'NO'} | {c['detail']} |"
        )
  return "\n".join(lines)
