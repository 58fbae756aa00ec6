"""Cost per example and step of every RTRL estimator and of TBPTT (paper Table 1).

For each method (exact RTRL, TBPTT-T, UORO, KF-RTRL and every ranked
approximation at each rank) and hidden size n this measures, side by side in
one run:

* `full`: time per training step of the real trainer on Copy-task chunks (one
  online step = one parameter update; TBPTT: time per window / T);
* `core`: the estimator's tangent step alone (vmapped `estimator.step(params)`
  in a `lax.scan`), which drops the fixed per-step cost (readout, optimiser)
  that flattens the fit of `full` at small n. For TBPTT, `core` is
  `bptt.tbptt_gradients` (the windowed gradient without the update);
* `mem`: floats of the per-example tangent state (leaves of
  `eval_shape(estimator.init).tangent`, the PRNG key excluded). For TBPTT:
  T x S x n, the states kept per window (paper's count); JAX's actual saved
  residuals per window (leaves with a leading time axis of `jax.vjp`) are also
  stored in the JSON.

then fits the exponent of each against n (log-log least squares) next to
Table 1, and reports r-OK's overhead over r-KF-AVG with a breakdown of OK's
tangent step (H·A, `kronecker_sum_reduce` and its QRs, the cell's Jacobians).

Timing: every configuration of one size is compiled ahead of time and run once
(warm-up), then `--repeats` rounds time all of them in turn (interleaved, so
they see the same machine load); the table shows the minimum, the JSON also
the median. Configurations whose predicted time (from the previous size and
Table 1's exponent) exceeds `--max_seconds` are skipped and listed.

  nice -n 5 python scripts/bench_rtrl.py                       # defaults
  python scripts/bench_rtrl.py --sizes 16,32 --ranks 1,2 --steps 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.online_setup import init_params
from rtrl import bptt, cells, estimators, kronecker, online, tangents
from rtrl.tasks import copy_task

RANKED = ("kf_avg", "kf_approx", "ok", "ok_biased", "ktp")
UNRANKED = ("rtrl", "tbptt", "uoro", "kf")
# Paper Table 1: (time, memory) exponents of n per example and step. kf and
# kf_approx are 1-OK-like; ok_biased costs what ok does.
PAPER = {"rtrl": (4, 3), "ok": (3, 2), "ok_biased": (3, 2), "kf_avg": (3, 2),
         "kf": (3, 2), "kf_approx": (3, 2), "uoro": (2, 2), "ktp": (2, 1),
         "tbptt": (2, 1)}
PAPER_TEXT = {"rtrl": "n^4 / n^3", "ok": "r n^3 / r n^2",
              "ok_biased": "r n^3 / r n^2", "kf_avg": "r n^3 / r n^2",
              "kf": "n^3 / n^2", "kf_approx": "n^3 / n^2",
              "uoro": "n^2 / n^2", "ktp": "r n^2 / r n", "tbptt": "T n^2 / T n"}
VOCAB = copy_task.VOCAB_SIZE


def methods(names, ranks):
  """[(estimator, rank or None)] in the order they are printed."""
  out = []
  for name in names:
    out += [(name, r) for r in ranks] if name in RANKED else [(name, None)]
  return out


def label(method, truncation):
  name, rank = method
  return f"tbptt-{truncation}" if name == "tbptt" else (
      f"{rank}-{name}" if rank else name)


def count_floats(tree) -> int:
  return int(sum(np.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(tree)))


def tangent_floats(estimator, cell, cell_params) -> int:
  """Floats in one example's tangent state (the PRNG key is not counted)."""
  tstate = jax.eval_shape(estimator.init, cell_params, cell.initial_state(),
                          jax.random.PRNGKey(0))
  return count_floats(tstate.tangent)


def analytic_tangent_floats(name, rank, cell, input_size) -> int:
  """The tangent size each estimator's design promises (P = input + n + 1)."""
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
  raise ValueError(f"no analytic size for estimator {name!r}")


def tbptt_residual_floats(cell, cell_params, truncation) -> int:
  """Per-example floats JAX saves for the backward pass of one window."""
  xs = jnp.zeros((truncation, cell.input_size(cell_params)))

  def window(p):
    step = lambda h, x: (cell.step(p, h, x),) * 2
    return jax.lax.scan(step, cell.initial_state(), xs)[1]

  residuals = jax.eval_shape(lambda p: jax.vjp(window, p)[1], cell_params)
  return count_floats([r for r in jax.tree_util.tree_leaves(residuals)
                       if r.ndim and r.shape[0] == truncation])


def fit_exponent(ns, values) -> float:
  """Slope of log(value) against log(n), least squares; nan if < 2 points."""
  pairs = [(n, v) for n, v in zip(ns, values) if v and v > 0]
  if len(pairs) < 2:
    return float("nan")
  x, y = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
  return float(np.polyfit(x, y, 1)[0])


def scan_steps(body, carry, steps):
  """`body` applied `steps` times in one `lax.scan` (for jit-then-time)."""
  return jax.lax.scan(lambda c, _: (body(c), None), carry, None,
                      length=steps)[0]


def compiled(fn, *args):
  """AOT-compiles `fn` on `args`; returns (callable, args, compile seconds).

  The seconds are process CPU time, which unlike wall time does not grow with
  other users' load (it is what a quiet machine would spend, roughly).
  """
  start = time.process_time()
  exe = jax.jit(fn).lower(*args).compile()
  return exe, args, time.process_time() - start


def build(method, cell, params, chunk, chunk_t, args):
  """The compiled `full` and `core` runs of one method, and its memory."""
  name, rank = method
  batch, steps = args.batch_size, args.steps
  optimizer = optax.adam(1e-3)
  key = jax.random.PRNGKey(1)
  if name == "tbptt":
    trainer = bptt.make_tbptt_trainer(cell, optimizer, args.truncation)
    state = trainer.init(params, key, batch)
    core = lambda p, s, c: bptt.tbptt_gradients(cell, p, s, c, args.truncation)
    full = compiled(trainer.run, state, chunk_t)
    core = compiled(core, params, state.cell_state, chunk_t)
    n = cell.hidden_size
    mem = {"mem": args.truncation * cell.num_state_rows * n,
           "residual_floats": tbptt_residual_floats(cell, params["cell"],
                                                    args.truncation)}
    return {"full": full, "core": core, "per_call": chunk_t.targets.shape[0],
            **mem}
  estimator = estimators.make(name, cell, **({"rank": rank} if rank else {}))
  trainer = online.make_online_trainer(cell, estimator, optimizer)
  state = trainer.init(params, key, batch)   # traces init: rank errors here

  def core(cell_params, tstate, cell_state, inputs):
    step = jax.vmap(estimator.step(cell_params))
    carry, _ = jax.lax.scan(lambda c, x: (step(*c, x), None),
                            (tstate, cell_state), inputs)
    return carry

  return {"full": compiled(trainer.run, state, chunk),
          "core": compiled(core, params["cell"], state.tstate,
                           state.cell_state, chunk.inputs),
          "per_call": steps,
          "mem": tangent_floats(estimator, cell, params["cell"]),
          "analytic": analytic_tangent_floats(name, rank, cell, VOCAB)}


def ok_pieces(cell, cell_params, chunk, rank, batch, steps):
  """Compiled pieces of r-OK's tangent step on real shapes (batch vmapped).

  Each carries its output into the next iteration so XLA cannot hoist it out
  of the scan: H·A propagation, `kronecker_sum_reduce` (plus the concat that
  appends `hhat ⊗ D`, as in the estimator), its two QRs alone, and the cell's
  `linearized_step` with `dense_D`.
  """
  estimator = estimators.make("ok", cell, rank=rank)
  keys = jax.random.split(jax.random.PRNGKey(2), batch)
  state0 = online.broadcast_state(cell.initial_state(), batch)
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
      cell_params, cell.initial_state(), keys)
  # A few real OK steps give realistic factors and Jacobians.
  step = jax.jit(jax.vmap(estimator.step(cell_params)))
  for x in chunk.inputs[:5]:
    tstate, state0 = step(tstate, state0, x)
  linearize = jax.vmap(cell.linearized_step, in_axes=(None, 0, 0))
  _, jac = linearize(cell_params, state0, chunk.inputs[5])
  u, factor = tstate.tangent
  hidden_row = cell.hidden_row

  def propagate(jac, factor):
    apply = jax.vmap(tangents.apply_recurrent_jacobian, in_axes=(0, None, 0))
    return scan_steps(lambda f: apply(jac, hidden_row, f), factor, steps)

  def summands(jac, u, factor):
    d = jax.vmap(tangents.dense_D)(jac).reshape(batch, 1, -1)
    return (jnp.concatenate([u, jac.hhat[:, None]], 1),
            jnp.concatenate([factor.reshape(batch, rank, -1), d], 1))

  def reduce(jac, u, factor, keys):
    def body(carry):
      u, flat, keys = carry
      keys, sub = jax.vmap(jax.random.split, out_axes=1)(keys)
      us, flats = summands(jac, u, flat)
      u, flat = jax.vmap(kronecker.kronecker_sum_reduce)(us, flats, sub)
      return u, flat, keys
    return scan_steps(body, (u, factor.reshape(batch, rank, -1), keys), steps)

  def qr_only(flats):
    def body(flats):
      q, _ = jnp.linalg.qr(jnp.swapaxes(flats, 1, 2))
      return flats + 1e-30 * jnp.swapaxes(q, 1, 2)   # keeps q alive
    return scan_steps(body, flats, steps)

  def linearized(inputs, state):
    def body(carry, x):
      state, acc = carry
      state, jac = linearize(cell_params, state, x)
      return (state, acc + jax.vmap(tangents.dense_D)(jac)), None
    d0 = jnp.zeros((batch,) + tangents.dense_D(jax.tree_util.tree_map(
        lambda a: a[0], jac)).shape)
    return jax.lax.scan(body, (state, d0), inputs)[0]

  flats = summands(jac, u, factor)[1]
  return {"H·A": compiled(propagate, jac, factor),
          "reduce": compiled(reduce, jac, u, factor, keys),
          "QR in reduce": compiled(qr_only, flats),
          "linearize": compiled(linearized, chunk.inputs, state0)}


def run_timed(entry):
  exe, args, _ = entry
  start = time.perf_counter()
  jax.block_until_ready(exe(*args))
  return time.perf_counter() - start


def measure_size(n, cell_name, todo, args, history, skipped):
  """Builds, warms and times (interleaved) every method at hidden size n."""
  cell = cells.make(cell_name, n)
  params = init_params(cell, jax.random.PRNGKey(0), VOCAB, VOCAB)
  stream = copy_task.stream_init(jax.random.PRNGKey(3), args.batch_size, 16)
  chunk = copy_task.generate(stream, 10, args.steps)[1]
  windows = -(-args.steps // args.truncation)
  chunk_t = copy_task.generate(stream, 10, windows * args.truncation)[1]
  timers, results = {}, {}
  for method in todo:
    tag = label(method, args.truncation)
    if tag in skipped:
      continue
    if tag in history:   # predict from the previous size with Table 1's law
      n0, seconds = history[tag]
      predicted = seconds * (n / n0) ** PAPER[method[0]][0]
      if predicted > args.max_seconds:
        skipped[tag] = (n, f"predicted {predicted:.0f}s > --max_seconds")
        continue
    try:
      entry = build(method, cell, params, chunk, chunk_t, args)
    except ValueError as err:   # e.g. a rank larger than n allows
      skipped[tag] = (n, f"invalid: {err}")
      continue
    for part in ("full", "core"):
      run_timed(entry[part])      # warm-up run after compilation
      timers[(tag, part)] = entry[part]
    results[tag] = {"method": method[0], "rank": method[1], "n": n,
                    "mem": entry["mem"], "analytic": entry.get("analytic"),
                    "residual_floats": entry.get("residual_floats"),
                    "compile_s": entry["full"][2] + entry["core"][2],
                    "per_call": entry["per_call"], "full": [], "core": []}
  if n in args.breakdown_sizes and "ok" in args.names:
    for rank in args.ranks:
      if f"{rank}-ok" not in results:
        continue
      pieces = ok_pieces(cell, params["cell"], chunk, rank, args.batch_size,
                         args.steps)
      for piece, entry in pieces.items():
        run_timed(entry)
        timers[(f"{rank}-ok", piece)] = entry
        results[f"{rank}-ok"][piece] = []
  for _ in range(args.repeats):   # interleaved: every timer once per round
    for (tag, part), entry in timers.items():
      results[tag][part].append(run_timed(entry) / results[tag]["per_call"])
  for tag, res in results.items():
    for part in [p for p in res if isinstance(res[p], list)]:
      res[part] = {"min": min(res[part]), "median": statistics.median(res[part])}
    history[tag] = (n, (args.repeats + 1) * res["per_call"] * (
        res["full"]["min"] + res["core"]["min"]))
  return results


def fmt_ms(seconds):
  return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def fmt_count(x):
  if x is None:
    return "-"
  for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
    if x >= size:
      return f"{x / size:.3g}{unit}"
  return str(x)


def report(all_results, names, sizes, skipped):
  """Prints the tables; `names` maps label -> estimator. Returns the fits."""
  tags = list(names)
  def cell(tag, n, getter, fmt):
    res = all_results.get((tag, n))
    return fmt(getter(res)) if res else "skip"

  width = max(len(t) for t in tags) + 2
  head = f"{'method':<{width}}" + "".join(f"{'n=' + str(n):>10}" for n in sizes)
  sections = [
      ("time per training step, ms (min over repeats; full trainer)",
       lambda r: r["full"]["min"], fmt_ms),
      ("estimator tangent step alone, ms per step (TBPTT: gradient only)",
       lambda r: r["core"]["min"], fmt_ms),
      ("per-example tangent memory, floats (TBPTT: T*S*n; '!' = not the "
       "analytic size)", lambda r: r, lambda r: fmt_count(r["mem"]) + (
           "!" if r["analytic"] not in (None, r["mem"]) else ""))]
  for title, getter, fmt in sections:
    print(f"\n{title}\n{head}")
    for tag in tags:
      print(f"{tag:<{width}}" + "".join(
          f"{cell(tag, n, getter, fmt):>10}" for n in sizes))
  print("\nfitted exponents in n (log-log least squares over measured sizes)")
  print(f"{'method':<{width}}{'full':>7}{'core':>7}{'mem':>7}   paper time/mem")
  fits = {}
  for tag in tags:
    rows = [all_results[(tag, n)] for n in sizes if (tag, n) in all_results]
    ns = [r["n"] for r in rows]
    fit = {k: fit_exponent(ns, [g(r) for r in rows]) for k, g in (
        ("full", lambda r: r["full"]["min"]), ("core", lambda r: r["core"]["min"]),
        ("mem", lambda r: r["mem"]))}
    fits[tag] = fit
    print(f"{tag:<{width}}" + "".join(f"{fit[k]:>7.2f}" for k in fit) +
          f"   {PAPER_TEXT[names[tag]]}")
  if skipped:
    print("\nskipped (and every larger size):")
    for tag, (n, why) in skipped.items():
      print(f"  {tag} at n={n}: {why}")
  return fits


def report_overhead(all_results, sizes, args):
  """r-OK vs r-KF-AVG and the breakdown of OK's tangent step."""
  overhead = []
  for n in sizes:
    rows = [(r, all_results.get((f"{r}-ok", n)), all_results.get(
        (f"{r}-kf_avg", n))) for r in args.ranks]
    rows = [row for row in rows if row[1] and row[2]]
    if n not in args.breakdown_sizes or not rows:
      continue
    print(f"\nOK overhead at n={n} (target: r-OK / r-KF-AVG <= 1.5)")
    print(f"{'rank':>5}{'ok full':>10}{'kfavg':>10}{'ratio':>7}"
          f"{'ok core':>10}{'kfavg':>10}{'ratio':>7}")
    for rank, ok_res, kf_res in rows:
      full = ok_res["full"]["min"] / kf_res["full"]["min"]
      core = ok_res["core"]["min"] / kf_res["core"]["min"]
      overhead.append({"n": n, "rank": rank, "full_ratio": full,
                       "core_ratio": core})
      print(f"{rank:>5}{fmt_ms(ok_res['full']['min']):>10}"
            f"{fmt_ms(kf_res['full']['min']):>10}{full:>7.2f}"
            f"{fmt_ms(ok_res['core']['min']):>10}"
            f"{fmt_ms(kf_res['core']['min']):>10}{core:>7.2f}")
    pieces = ["H·A", "reduce", "QR in reduce", "linearize"]
    print(f"OK tangent step broken down, ms per step (batch {args.batch_size};"
          " rest = core - H·A - reduce - linearize)")
    print(f"{'rank':>5}{'core':>9}" + "".join(f"{p:>13}" for p in pieces)
          + f"{'rest':>9}{'reduce%':>9}")
    for rank, ok_res, _ in rows:
      if "H·A" not in ok_res:
        continue
      t = {p: ok_res[p]["min"] for p in pieces}
      core = ok_res["core"]["min"]
      rest = core - t["H·A"] - t["reduce"] - t["linearize"]
      print(f"{rank:>5}{fmt_ms(core):>9}" + "".join(
          f"{fmt_ms(t[p]):>13}" for p in pieces) +
          f"{fmt_ms(rest):>9}{100 * t['reduce'] / core:>8.0f}%")
  return overhead


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ints = lambda s: [int(v) for v in s.split(",") if v]
  parser.add_argument("--sizes", type=ints, default=[16, 32, 64, 128])
  parser.add_argument("--ranks", type=ints, default=[1, 2, 8, 16])
  parser.add_argument("--estimators", default="all",
                      help="'all' or a comma list of estimator names and "
                      "'tbptt'")
  parser.add_argument("--cell", default="rhn", choices=sorted(cells.CELLS))
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--truncation", type=int, default=20)
  parser.add_argument("--max_seconds", type=float, default=60.0,
                      help="skip a configuration whose predicted timing cost "
                      "(warm-up + repeats, full + core) exceeds this")
  parser.add_argument("--breakdown_sizes", type=ints, default=[64, 128],
                      help="sizes for the OK-overhead section")
  parser.add_argument("--json", default=None, help="write all results here")
  parser.add_argument("--cache_dir", default=None,
                      help="persistent XLA compilation cache: a rerun skips "
                      "most of the compile time, which dominates at small n")
  args = parser.parse_args(argv)
  if args.cache_dir:
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  known = set(UNRANKED) | set(RANKED)
  args.names = (list(UNRANKED) + list(RANKED) if args.estimators == "all"
                else args.estimators.split(","))
  unknown = set(args.names) - known
  if unknown:
    parser.error(f"--estimators: unknown {sorted(unknown)}; known "
                 f"{sorted(known)}")
  for flag in ("batch_size", "steps", "repeats", "truncation"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag} must be positive")
  sizes = sorted(args.sizes)
  todo = methods(args.names, args.ranks)
  tags = [label(m, args.truncation) for m in todo]
  print(f"cell={args.cell} batch={args.batch_size} steps={args.steps} "
        f"repeats={args.repeats} T={args.truncation} "
        f"device={jax.devices()[0].device_kind}")
  all_results, history, skipped = {}, {}, {}
  start = time.perf_counter()
  for n in sizes:
    t0 = time.perf_counter()
    results = measure_size(n, args.cell, todo, args, history, skipped)
    all_results.update({(tag, n): res for tag, res in results.items()})
    print(f"  n={n}: {len(results)} configurations in "
          f"{time.perf_counter() - t0:.0f}s wall (compiling took "
          f"{sum(r['compile_s'] for r in results.values()):.0f}s CPU)",
          flush=True)
  fits = report(all_results, dict(zip(tags, [m[0] for m in todo])), sizes,
                skipped)
  overhead = report_overhead(all_results, sizes, args)
  print(f"\ntotal {time.perf_counter() - start:.0f}s")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"args": {k: v for k, v in vars(args).items()},
                 "results": [dict(label=t, **r) for (t, _), r in
                             all_results.items()],
                 "fits": fits, "ok_overhead": overhead,
                 "skipped": {t: {"n": n, "why": w}
                             for t, (n, w) in skipped.items()}}, f, indent=1,
                default=str)


if __name__ == "__main__":
  main()
