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
tangent step (H·A, the Kronecker-sum reduction, the cell's Jacobians).

Against the machine: the large-matmul float32 GFLOP/s is measured in the same
run, each step's FLOP floor (its `H·A` GEMMs, plus OK's reduction GEMMs, at
that throughput) is printed with the ratio full / floor, and the breakdown
shows the H·A GEMM's own GFLOP/s as a percentage of the large matmul's.
`--core` also times the tangent step alone (vmapped `estimator.step`).
`--snap_orders 1,2,3` instead measures SnAp-n at those orders against exact
RTRL on a sparse cell (`--density`, `--mask_seed`): kept pairs, edges,
tangent floats and step times, each over exact RTRL's
(`scripts/benchlib/snap_orders.py`).
`--generic` adds, beside exact RTRL, UORO and SnAp-1, their generic autodiff
twins (`generic-*`: the same cell wrapped by `cells.as_custom`, so served by
`rtrl.estimators.autodiff_rtrl` and its twins) and prints each twin's full step over the
analytic one's.

Timing: every configuration of one size is compiled ahead of time and run once
(warm-up), then `--repeats` rounds time all of them in turn (interleaved, so
they see the same machine load); the table shows the minimum, the JSON also
the median. Configurations whose predicted time (from the previous size and
Table 1's exponent) exceeds `--max_seconds` are skipped and listed.

  python -m scripts.bench_rtrl                                 # defaults
  python -m scripts.bench_rtrl --sizes 128 --estimators ok,kf_avg --ranks 16
  python -m scripts.bench_rtrl --sizes 256 --batch_size 32 --estimators ok \
      --ranks 8 --breakdown_sizes 256                          # PTB setting
  python -m scripts.bench_rtrl --cell lstm --estimators uoro,snap1,rflo,rtrl \
      --generic --breakdown_sizes none                        # issue 20
  python -m scripts.bench_rtrl --snap_orders 1,2,3 --cell gru \
      --density 0.1 --sizes 64,128 --batch_size 8 --steps 10  # issue 36
  python -m scripts.bench_rtrl --sizes 128 --steps 100 --repeats 1 \
      --breakdown_sizes none                                   # compile times
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import optax

from experiments.online.setup import init_params
from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import linalg
from rtrl import online
from rtrl.tasks import copy_task
from scripts.benchlib.costs import GENERIC_PREFIX
from scripts.benchlib.costs import PAPER
from scripts.benchlib.costs import RANKED
from scripts.benchlib.costs import UNRANKED
from scripts.benchlib.costs import analytic_tangent_floats
from scripts.benchlib.costs import base_name
from scripts.benchlib.costs import flop_floor
from scripts.benchlib.costs import label
from scripts.benchlib.costs import memory_floor_bytes
from scripts.benchlib.costs import methods
from scripts.benchlib.ok_pieces import ok_pieces
from scripts.benchlib.report import report
from scripts.benchlib.report import report_generic
from scripts.benchlib.report import report_overhead
from scripts.benchlib.snap_orders import measure as measure_snap_orders
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import count_floats
from scripts.benchlib.timing import load_average
from scripts.benchlib.timing import matmul_gflops
from scripts.benchlib.timing import memory_gbps
from scripts.benchlib.timing import run_timed

VOCAB = copy_task.VOCAB_SIZE


def tangent_floats(estimator, cell, cell_params) -> int:
  """Floats in one example's tangent state (the PRNG key is not counted)."""
  tstate = jax.eval_shape(
    estimator.init, cell_params, cell.initial_state(), jax.random.PRNGKey(0)
  )
  return count_floats(tstate.tangent)


def tbptt_residual_floats(cell, cell_params, truncation) -> int:
  """Per-example floats JAX saves for the backward pass of one window."""
  xs = jnp.zeros((truncation, cell.input_size(cell_params)))

  def window(p):
    step = lambda h, x: (cell.step(p, h, x),) * 2
    return jax.lax.scan(step, cell.initial_state(), xs)[1]

  residuals = jax.eval_shape(lambda p: jax.vjp(window, p)[1], cell_params)
  return count_floats(
    [
      r
      for r in jax.tree_util.tree_leaves(residuals)
      if r.ndim and r.shape[0] == truncation
    ]
  )


def build(method, cell, params, chunk, chunk_t, args):
  """The compiled `full` (and `core`) runs of one method, and its memory."""
  name, rank = method
  batch, steps = args.batch_size, args.steps
  optimizer = optax.adam(1e-3)
  key = jax.random.PRNGKey(1)
  if name == "tbptt":
    trainer = bptt.make_tbptt_trainer(cell, optimizer, args.truncation)
    state = trainer.init(params, key, batch)
    entry = {
      "full": compiled(trainer.run, state, chunk_t),
      "per_call": chunk_t.targets.shape[0],
      "mem": args.truncation * cell.num_state_rows * cell.hidden_size,
      "residual_floats": tbptt_residual_floats(
        cell, params["cell"], args.truncation
      ),
    }
    if args.core:
      core = lambda p, s, c: bptt.tbptt_gradients(
        cell, p, s, c, args.truncation
      )
      entry["core"] = compiled(core, params, state.cell_state, chunk_t)
    return entry
  # A generic method sees the same cell through its step function only.
  served = cells.as_custom(cell) if name.startswith(GENERIC_PREFIX) else cell
  estimator = estimators.make(
    base_name(name), served, **({"rank": rank} if rank else {})
  )
  trainer = online.make_online_trainer(served, estimator, optimizer)
  state = trainer.init(params, key, batch)  # traces init: rank errors here
  entry = {
    "full": compiled(trainer.run, state, chunk),
    "per_call": steps,
    "mem": tangent_floats(estimator, served, params["cell"]),
    "analytic": analytic_tangent_floats(name, rank, cell, VOCAB),
  }
  if args.core:

    def core(cell_params, tstate, cell_state, inputs):
      step = jax.vmap(estimator.step(cell_params))
      carry, _ = jax.lax.scan(
        lambda c, x: (step(*c, x), None), (tstate, cell_state), inputs
      )
      return carry

    entry["core"] = compiled(
      core, params["cell"], state.tstate, state.cell_state, chunk.inputs
    )
  return entry


def predicted_too_slow(method, tag, n, args, history) -> str | None:
  """Why `method` (labelled `tag`) is skipped at size n (Table 1's law from
  the previous size predicts more than `--max_seconds`), or None."""
  if tag not in history:
    return None
  n0, seconds = history[tag]
  predicted = seconds * (n / n0) ** PAPER[base_name(method[0])][0]
  if predicted > args.max_seconds:
    return f"predicted {predicted:.0f}s > --max_seconds"
  return None


def warm_result(method, n, entry, cell, args, parts) -> dict:
  """Runs each compiled part once and returns the method's result record
  (timings to be appended to its `parts` lists)."""
  start = time.perf_counter()
  run_timed(entry["full"])  # the first call (after compilation)
  first_call = time.perf_counter() - start
  for part in parts[1:]:
    run_timed(entry[part])
  return {
    "method": method[0],
    "rank": method[1],
    "n": n,
    "mem": entry["mem"],
    "analytic": entry.get("analytic"),
    "residual_floats": entry.get("residual_floats"),
    "compile_wall_s": entry["full"][2][0],
    "compile_cpu_s": entry["full"][2][1],
    "first_call_s": entry["full"][2][0] + first_call,
    "floor_flops": flop_floor(
      method[0], method[1], cell, VOCAB, args.batch_size
    ),
    "floor_bytes": memory_floor_bytes(
      method[0], method[1], cell, VOCAB, args.batch_size
    ),
    "per_call": entry["per_call"],
    **{p: [] for p in parts},
  }


def add_ok_breakdown(cell, params, chunk, args, timers, results) -> None:
  """Adds the timers of OK's step pieces for every measured rank."""
  for rank in args.ranks:
    if f"{rank}-ok" not in results:
      continue
    pieces = ok_pieces(
      cell, params["cell"], chunk, rank, args.batch_size, args.steps
    )
    for piece, entry in pieces.items():
      run_timed(entry)
      timers[(f"{rank}-ok", piece)] = entry
      results[f"{rank}-ok"][piece] = []


def time_interleaved(timers, results, n, args, history) -> None:
  """`--repeats` rounds, every timer once per round; each part's list of
  seconds per step becomes its min and median; `history` gets each
  method's cost at n for the next size's prediction."""
  for _ in range(args.repeats):
    for (tag, part), entry in timers.items():
      results[tag][part].append(run_timed(entry) / results[tag]["per_call"])
  for tag, res in results.items():
    for part in [p for p in res if isinstance(res[p], list)]:
      res[part] = {
        "min": min(res[part]),
        "median": statistics.median(res[part]),
      }
    core = res["core"]["min"] if "core" in res else 0.0
    history[tag] = (
      n,
      (args.repeats + 1) * res["per_call"] * (res["full"]["min"] + core),
    )


def measure_size(n, cell_name, todo, args, history, skipped):
  """Builds, warms and times (interleaved) every method at hidden size n."""
  cell = cells.make(cell_name, n)
  params = init_params(cell, jax.random.PRNGKey(0), VOCAB, VOCAB)
  stream = copy_task.stream_init(jax.random.PRNGKey(3), args.batch_size, 16)
  chunk = copy_task.generate(stream, 10, args.steps)[1]
  windows = -(-args.steps // args.truncation)
  chunk_t = copy_task.generate(stream, 10, windows * args.truncation)[1]
  timers, results = {}, {}
  parts = ("full", "core") if args.core else ("full",)
  for method in todo:
    tag = label(method, args.truncation)
    why = skipped.get(tag) or predicted_too_slow(method, tag, n, args, history)
    if why:
      skipped.setdefault(tag, (n, why))
      continue
    try:
      entry = build(method, cell, params, chunk, chunk_t, args)
    except ValueError as err:  # e.g. a rank larger than n allows
      skipped[tag] = (n, f"invalid: {err}")
      continue
    results[tag] = warm_result(method, n, entry, cell, args, parts)
    timers.update({(tag, part): entry[part] for part in parts})
  if n in args.breakdown_sizes and "ok" in args.names:
    add_ok_breakdown(cell, params, chunk, args, timers, results)
  time_interleaved(timers, results, n, args, history)
  return results


def parse_args(argv):
  """The flags, checked; `args.names` is the list of methods to measure."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ints = lambda s: [] if s == "none" else [int(v) for v in s.split(",") if v]
  parser.add_argument("--sizes", type=ints, default=[32, 64, 128])
  parser.add_argument("--ranks", type=ints, default=[1, 2, 8, 16])
  parser.add_argument(
    "--estimators",
    default="all",
    help="'all' or a comma list of estimator names and 'tbptt'",
  )
  parser.add_argument("--cell", default="rhn", choices=sorted(cells.CELLS))
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--truncation", type=int, default=20)
  parser.add_argument(
    "--max_seconds",
    type=float,
    default=60.0,
    help="skip a configuration whose predicted timing cost "
    "(warm-up + repeats) exceeds this",
  )
  parser.add_argument(
    "--breakdown_sizes",
    type=ints,
    default=[128],
    help="sizes for OK's step breakdown ('none': skip)",
  )
  parser.add_argument(
    "--core",
    action="store_true",
    help="also time the estimator's tangent step alone",
  )
  parser.add_argument(
    "--generic",
    action="store_true",
    help="also time the generic autodiff path (rtrl, uoro, "
    "snap1 on the cell wrapped by cells.as_custom) beside "
    "each analytic one",
  )
  parser.add_argument(
    "--snap_orders",
    type=ints,
    default=[],
    help="SnAp-n orders to measure against exact RTRL on a sparse cell "
    "(instead of the estimator table)",
  )
  parser.add_argument(
    "--density",
    type=float,
    default=0.1,
    help="--snap_orders: the cell's recurrent_density",
  )
  parser.add_argument(
    "--mask_seed",
    type=int,
    default=0,
    help="--snap_orders: the seed of the cell's sparsity pattern",
  )
  parser.add_argument("--json", default=None, help="write all results here")
  parser.add_argument(
    "--cache_dir",
    default=None,
    help="persistent XLA compilation cache: a rerun skips "
    "most of the compile time (first-call times then "
    "measure the cache, not the compiler)",
  )
  parser.add_argument(
    "--matmul_precision",
    default="highest",
    choices=sorted(linalg.MATMUL_PRECISIONS),
    help="the GEMM precision the estimators are traced "
    "under (jax.default_matmul_precision, see rtrl.linalg; "
    "GPU/TPU only)",
  )
  args = parser.parse_args(argv)
  known = set(UNRANKED) | set(RANKED)
  args.names = (
    list(UNRANKED) + list(RANKED)
    if args.estimators == "all"
    else args.estimators.split(",")
  )
  unknown = set(args.names) - known
  if unknown:
    parser.error(
      f"--estimators: unknown {sorted(unknown)}; known {sorted(known)}"
    )
  for flag in ("batch_size", "steps", "repeats", "truncation"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag} must be positive")
  if any(order < 1 for order in args.snap_orders):
    parser.error("--snap_orders must be ints >= 1")
  if not 0.0 < args.density <= 1.0:
    parser.error("--density must be in (0, 1]")
  return args


def measure_sizes(sizes, todo, args, skipped) -> dict:
  """`{(tag, n): result}` for every size, smallest first (each size's
  timings predict the next one's cost)."""
  all_results, history = {}, {}
  for n in sizes:
    t0 = time.perf_counter()
    results = measure_size(n, args.cell, todo, args, history, skipped)
    all_results.update({(tag, n): res for tag, res in results.items()})
    print(
      f"  n={n}: {len(results)} configurations in "
      f"{time.perf_counter() - t0:.0f}s wall (compiling took "
      f"{sum(r['compile_cpu_s'] for r in results.values()):.0f}s CPU)",
      flush=True,
    )
  return all_results


def write_json(path, args, gflops, all_results, fits, overhead, skipped):
  with open(path, "w") as f:
    json.dump(
      {
        "args": {k: v for k, v in vars(args).items()},
        "matmul_gflops": gflops,
        "results": [dict(label=t, **r) for (t, _), r in all_results.items()],
        "fits": fits,
        "ok_overhead": overhead,
        "skipped": {t: {"n": n, "why": w} for t, (n, w) in skipped.items()},
      },
      f,
      indent=1,
      default=str,
    )


def main(argv=None):
  args = parse_args(argv)
  if args.cache_dir:
    jax.config.update("jax_compilation_cache_dir", args.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  if args.snap_orders:
    results = measure_snap_orders(args)
    if args.json:
      with open(args.json, "w") as f:
        json.dump({"args": vars(args), "snap_orders": results}, f, indent=1)
    return
  sizes = sorted(args.sizes)
  todo = methods(args.names, args.ranks, args.generic)
  tags = [label(m, args.truncation) for m in todo]
  gflops = matmul_gflops()
  gbps = memory_gbps()
  print(
    f"cell={args.cell} batch={args.batch_size} steps={args.steps} "
    f"matmul_precision={args.matmul_precision} "
    f"repeats={args.repeats} T={args.truncation} "
    f"device={jax.devices()[0].device_kind}"
  )
  print(
    f"large matmul (2048^3 float32): {gflops:.0f} GFLOP/s; streaming "
    f"{gbps:.1f} GB/s; {load_average()}",
    flush=True,
  )
  skipped = {}
  start = time.perf_counter()
  with jax.default_matmul_precision(args.matmul_precision):
    all_results = measure_sizes(sizes, todo, args, skipped)
  fits = report(
    all_results,
    dict(zip(tags, [m[0] for m in todo])),
    sizes,
    skipped,
    gflops,
    gbps,
  )
  if args.generic:
    report_generic(all_results, tags, sizes)
  overhead = report_overhead(all_results, sizes, args, gflops)
  print(f"\ntotal {time.perf_counter() - start:.0f}s; {load_average()}")
  if args.json:
    write_json(args.json, args, gflops, all_results, fits, overhead, skipped)


if __name__ == "__main__":
  main()
