"""Our online estimators against the peer library braintrace, side by side.

Issue 23 ("Performance: peers side by side"). braintrace (PyPI, 0.2.6) is a
JAX library of eligibility-trace online learning; it is never a dependency of
this project: it lives in its own venv, made by

  bash scripts/peers/setup_braintrace.sh      # /work/peers/braintrace

and this script runs under that venv's Python with the checkout on the path:

  /work/peers/braintrace/bin/python -m scripts.bench_peers \
      --sizes 64,128,256 --cells rnn,gru --json bench_peers.json

Options: --sizes, --cells, --algorithms (exact,snap1,uoro,rflo), --steps
(per timed chunk), --exact_steps (exact RTRL's chunk), --repeats,
--max_seconds (skip a configuration whose predicted cost exceeds it),
--batch_size, --vocab, --their_batching, --json, --skip_checks.

What is compared (one model on both sides, float32, batch 16, one-hot
inputs over a 50-symbol vocabulary (char-PTB's size), linear readout,
softmax cross-entropy, Adam, one update per step):

  algorithm | ours (rtrl.estimators)  | braintrace 0.2.6
  exact     | 'rtrl'                  | SnAp(n=2): saturated SnAp-n, i.e. full
            |                         | within-group RTRL (one dense group)
  snap1     | 'snap1'                 | OSTLRecurrent (= SnAp-1, 'coupled')
  uoro      | 'uoro' (per example)    | UORO, single-step, per example (vmap)
  rflo      | 'rflo' (RFLO's trace)   | D_RTRL ('diagonal': the recurrent
            |                         | mixing dropped, the direct path kept)

Cells: the tanh RNN is braintrace's own `nn.ValinaRNNCell(activation='tanh')`
(its `W` is our `W` without the bias row). braintrace's `nn.GRUCell` is a
different model from ours (Cho et al.'s reset before the recurrent product,
and `h' = (1 - z) h + z c`), so the GRU on their side is written here from
their ETP `nn.Linear` layers to be exactly ours (reset after the product,
PyTorch/Flax convention): four `Linear`s r, u (on [x, h]), a (on x) and b (on
h), `h' = (1 - σ(u)) tanh(a + σ(r) b) + σ(u) h`; our fused `W` maps onto them
block by block.

Readout: braintrace's single-step mode only traces the weights that reach a
hidden state, so the learner here wraps the cell alone and the readout is
applied outside it, its gradient taken by ordinary autodiff in the same
`brainstate.transform.grad` call (what our trainer does: the readout's exact
immediate gradient).

Checks before any timing (a pair whose check fails is not timed):

  1. per-step gradients, float64, from identical weights and inputs with the
     parameters held fixed: ours (`online.estimate_step`) against theirs
     (`brainstate.transform.grad` of the step loss), cell and readout, max
     relative difference over the steps. Deterministic pairs must agree to
     rounding. (Their first batching, vmap; check 3 covers both.)
  2. UORO is random: both sides are checked to be unbiased for the exact
     gradient. L identical copies of one sequence with different random keys
     form the batch, so the batch-mean gradient is the mean of L samples; G
     such groups give a standard error per entry, and the mean squared
     z-score of (mean - exact) over all entries is ~1 (a t-statistic with
     G - 1 degrees of freedom: (G-1)/(G-3)) for an unbiased estimator and
     large for a biased one (SnAp-1's is printed for contrast).
  3. at the timed size, float32: the per-step losses of the first timed
     chunk (identical initial weights and data, Adam updating both) agree,
     so the two timed programs train the same model the same way (not for
     UORO, whose random streams differ).

Batching on their side: `compile(vmap=True)` (one learner per example, as
ours) or braintrace's batched mode (the batch axis inside the compiled
graph). Exact RTRL and UORO run under vmap only (see VMAP_REASON); for
SnAp-1 and RFLO both compute our estimator, both are timed, and the faster
is reported (--their_batching picks one).

Timing: each side is one jitted `lax.scan` over a chunk of steps (ours:
`online.make_online_trainer(...).run`; theirs: `brainstate.transform.jit` of
`brainstate.transform.for_loop` over the same step), compiled and run before
timing (theirs twice: brainstate's jit compiles again on the second call);
then --repeats rounds run every configuration of one size in turn, ours then
theirs (interleaved, so both see the same machine load); the table shows the
median ms per step and theirs / ours.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

try:
  import brainstate
  import braintrace
except ImportError as err:  # the peer lives in its own venv, never ours
  sys.exit(
    f"bench_peers.py: braintrace is not importable ({err}). Create "
    "its venv with `bash scripts/peers/setup_braintrace.sh` and run "
    "this script with /work/peers/braintrace/bin/python (see the "
    "docstring)."
  )

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import estimators
from rtrl import online
from scripts.benchlib.peers_braintrace import ALGORITHMS
from scripts.benchlib.peers_braintrace import TheirLearner
from scripts.benchlib.peers_braintrace import their_trainer
from scripts.benchlib.peers_checks import data
from scripts.benchlib.peers_checks import max_relative
from scripts.benchlib.peers_checks import run_checks
from scripts.benchlib.peers_checks import summary
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import load_average
from scripts.benchlib.timing import run_timed

# Table 1's exponent of each algorithm's time in n (predicts the next size).
TIME_EXPONENT = {"exact": 4, "snap1": 2, "uoro": 2, "rflo": 2}
# Why only vmap (one learner per example, `compile(vmap=True)`) is timed;
# elsewhere both vmap and braintrace's batched mode (the batch axis inside
# the compiled graph) compute our estimator, and the faster one is reported.
VMAP_REASON = {
  "exact": "in batched mode braintrace's SnAp-n sees the batch axis as "
  "positions and widens the trace to B*n (B times the work)",
  "uoro": "in batched mode braintrace's UORO keeps one rank-1 pair for the "
  "whole batch (a different estimator from per-example UORO)",
}


# The model on their side: scripts/benchlib/peers_braintrace.py; the checks
# (gradients agree, UORO unbiased): scripts/benchlib/peers_checks.py.

# -- timing ------------------------------------------------------------------


def build_pair(algorithm, cell_name, n, args):
  """Ours and theirs (each batching) compiled and run at size n; returns the
  timers and the float32 loss-trajectory agreement (check 3)."""
  steps = args.exact_steps if algorithm == "exact" else args.steps
  cell = cells.make(cell_name, n)
  params = init_params(cell, jax.random.PRNGKey(0), args.vocab, args.vocab)
  inputs, targets = data(
    jax.random.PRNGKey(1), steps, args.batch_size, args.vocab, jnp.float32
  )
  chunk = online.StepBatch(
    inputs,
    targets,
    jnp.ones(targets.shape, jnp.float32),
    jnp.zeros(targets.shape, bool),
  )
  optimizer = optax.adam(args.learning_rate)
  trainer = online.make_online_trainer(
    cell, estimators.make(ALGORITHMS[algorithm][0], cell), optimizer
  )
  ours = compiled(
    trainer.run,
    trainer.init(params, jax.random.PRNGKey(2), args.batch_size),
    chunk,
  )
  start = time.perf_counter()
  our_losses = (
    np.asarray(jax.block_until_ready(ours[0](*ours[1]))[1].loss_sum)
    / args.batch_size
  )
  pair = {
    "ours": ours,
    "theirs": {},
    "steps": steps,
    "first_call_s": {"ours": time.perf_counter() - start + ours[2][0]},
    "loss_trajectory_max_rel": {},
  }
  for batching in args.batching[algorithm]:
    learner = TheirLearner(
      algorithm, cell_name, params, args.vocab, args.batch_size, batching
    )
    run = their_trainer(learner, optimizer)
    start = time.perf_counter()
    their_losses = np.asarray(jax.block_until_ready(run(inputs, targets)))
    first = time.perf_counter() - start
    # brainstate's jit compiles again on the second call (the states' avals
    # after the first call differ from the initial ones); not timed either.
    start = time.perf_counter()
    jax.block_until_ready(run(inputs, targets))
    pair["first_call_s"][batching] = [first, time.perf_counter() - start]
    pair["theirs"][batching] = functools.partial(run, inputs, targets)
    pair["loss_trajectory_max_rel"][batching] = (
      None if algorithm == "uoro" else max_relative(their_losses, our_losses)
    )
  return pair


def time_call(run) -> float:
  start = time.perf_counter()
  jax.block_until_ready(run())
  return time.perf_counter() - start


def predicted_seconds(algorithm, cell_name, n, args, history):
  """Predicted wall time of (first call + repeats) x both sides at n, from
  the last measured size and Table 1's exponent; None if unmeasured."""
  if (algorithm, cell_name) not in history:
    return None
  n0, per_step_both = history[(algorithm, cell_name)]
  steps = args.exact_steps if algorithm == "exact" else args.steps
  return (
    per_step_both
    * (n / n0) ** TIME_EXPONENT[algorithm]
    * steps
    * (args.repeats + 1)
  )


def measure_size(cell_name, n, args, checks, history, skipped):
  """Builds every admitted pair at one size, then times them interleaved."""
  pairs = {}
  for algorithm in args.algorithms:
    check = checks.get((algorithm, cell_name))
    if check is not None and not check["ok"]:
      why = (
        "could not be checked" if "error" in check else "the gradients disagree"
      )
      skipped[(algorithm, cell_name, n)] = (
        f"not timed: {why} ({summary(check)})"
      )
      continue
    predicted = predicted_seconds(algorithm, cell_name, n, args, history)
    if predicted is not None and predicted > args.max_seconds:
      skipped[(algorithm, cell_name, n)] = (
        f"predicted {predicted:.0f}s > --max_seconds {args.max_seconds:.0f}"
      )
      continue
    try:
      pairs[algorithm] = build_pair(algorithm, cell_name, n, args)
    except Exception as err:  # pylint: disable=broad-except
      skipped[(algorithm, cell_name, n)] = (
        f"failed to build: {type(err).__name__}: {str(err)[:300]}"
      )
      continue
    worst = max(
      [
        t
        for t in pairs[algorithm]["loss_trajectory_max_rel"].values()
        if t is not None
      ],
      default=None,
    )
    if worst is not None and worst > args.trajectory_tolerance:
      skipped[(algorithm, cell_name, n)] = (
        f"not timed: float32 loss trajectories differ by {worst:.1e} > "
        f"{args.trajectory_tolerance:g}"
      )
      del pairs[algorithm]
  samples = {
    a: {side: [] for side in ["ours", *pair["theirs"]]}
    for a, pair in pairs.items()
  }
  for _ in range(args.repeats):
    for algorithm, pair in pairs.items():
      samples[algorithm]["ours"].append(run_timed(pair["ours"]) / pair["steps"])
      for batching, run in pair["theirs"].items():
        samples[algorithm][batching].append(time_call(run) / pair["steps"])
  results = []
  for algorithm, pair in pairs.items():
    medians = {
      side: statistics.median(v) for side, v in samples[algorithm].items()
    }
    ours = medians.pop("ours")
    batching = min(medians, key=medians.get)  # their faster batching
    theirs = medians[batching]
    history[(algorithm, cell_name)] = (n, ours + sum(medians.values()))
    trajectory = pair["loss_trajectory_max_rel"][batching]
    results.append(
      {
        "algorithm": algorithm,
        "cell": cell_name,
        "n": n,
        "steps_per_call": pair["steps"],
        "ours_ms": ours * 1e3,
        "theirs_ms": theirs * 1e3,
        "ratio": theirs / ours,
        "their_batching": batching,
        "theirs_ms_by_batching": {b: m * 1e3 for b, m in medians.items()},
        "samples_ms": {
          k: [x * 1e3 for x in v] for k, v in samples[algorithm].items()
        },
        "first_call_s": pair["first_call_s"],
        "loss_trajectory_max_rel": pair["loss_trajectory_max_rel"],
      }
    )
    others = ", ".join(f"{b} {m * 1e3:.3g}" for b, m in medians.items())
    print(
      f"  {algorithm:5s} {cell_name} n={n}: ours {ours * 1e3:.3g} ms, "
      f"braintrace {theirs * 1e3:.3g} ms ({others}), ratio "
      f"{theirs / ours:.2f}; loss trajectories {fmt_rel(trajectory)}; "
      f"{load_average()}",
      flush=True,
    )
  return results


def fmt_rel(x):
  return "n/a (random)" if x is None else f"{x:.1e}"


def print_tables(results, checks, skipped, args):
  print("\n### Gradient agreement\n")
  print("| algorithm | cell | check | result |")
  print("|---|---|---|---|")
  for (algorithm, cell_name), check in checks.items():
    print(
      f"| {algorithm} | {cell_name} | {check.get('check', '-')} | "
      f"{summary(check)} |"
    )
  print(
    f"\n### Full online step, ms (median of {args.repeats}, batch "
    f"{args.batch_size}, float32)\n"
  )
  print(
    "| algorithm | cell | n | ours ms | braintrace ms (batching) | "
    "braintrace / ours | loss trajectories (max rel) |"
  )
  print("|---|---|---|---|---|---|---|")
  for r in results:
    trajectory = r["loss_trajectory_max_rel"][r["their_batching"]]
    print(
      f"| {r['algorithm']} | {r['cell']} | {r['n']} | "
      f"{r['ours_ms']:.3g} | {r['theirs_ms']:.3g} ({r['their_batching']})"
      f" | {r['ratio']:.2f} | {fmt_rel(trajectory)} |"
    )
  for (algorithm, cell_name, n), why in skipped.items():
    print(f"| {algorithm} | {cell_name} | {n} | - | - | - | {why} |")


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  listed = lambda s: [v for v in s.split(",") if v]
  parser.add_argument(
    "--sizes",
    type=lambda s: [int(v) for v in listed(s)],
    default=[64, 128, 256],
  )
  parser.add_argument("--cells", type=listed, default=["rnn", "gru"])
  parser.add_argument("--algorithms", type=listed, default=list(ALGORITHMS))
  parser.add_argument(
    "--steps",
    type=int,
    default=50,
    help="steps per timed chunk (one jitted scan)",
  )
  parser.add_argument(
    "--exact_steps",
    type=int,
    default=10,
    help="steps per timed chunk for exact RTRL (n^4)",
  )
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument(
    "--vocab",
    type=int,
    default=50,
    help="one-hot input and output size (char-PTB: 50)",
  )
  parser.add_argument("--learning_rate", type=float, default=1e-3)
  parser.add_argument(
    "--max_seconds",
    type=float,
    default=300.0,
    help="skip a configuration whose predicted cost "
    "(first call + repeats, both sides) exceeds this",
  )
  parser.add_argument(
    "--their_batching",
    default="both",
    choices=("both", "vmap", "batched"),
    help="braintrace's batching(s) timed for snap1 and "
    "rflo; both: the faster is reported (exact and uoro: "
    "vmap only, see VMAP_REASON)",
  )
  parser.add_argument(
    "--check_n",
    type=int,
    default=12,
    help="hidden size of the float64 gradient checks",
  )
  parser.add_argument(
    "--trajectory_tolerance",
    type=float,
    default=1e-3,
    help="max relative difference of the float32 loss "
    "trajectories for a pair to be timed",
  )
  parser.add_argument(
    "--skip_checks",
    action="store_true",
    help="time without the float64 checks (the float32 "
    "loss-trajectory check still runs)",
  )
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)
  unknown = set(args.algorithms) - set(ALGORITHMS)
  if unknown:
    parser.error(
      f"--algorithms: unknown {sorted(unknown)}; known {list(ALGORITHMS)}"
    )
  if set(args.cells) - {"rnn", "gru"}:
    parser.error("--cells: rnn and gru have a braintrace twin")
  for flag in ("steps", "exact_steps", "repeats", "batch_size"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag} must be positive")
  args.batching = {
    a: (
      ALGORITHMS[a][3]
      if args.their_batching == "both" or a in VMAP_REASON
      else (args.their_batching,)
    )
    for a in ALGORITHMS
  }
  return args


def main(argv=None):
  args = parse_args(argv)
  print(
    f"braintrace {braintrace.__version__}, brainstate "
    f"{brainstate.__version__}, jax {jax.__version__}, "
    f"{jax.devices()[0].device_kind}, {os.cpu_count()} CPUs; "
    f"{load_average()}"
  )
  for algorithm in args.algorithms:
    print(
      f"  {algorithm}: ours '{ALGORITHMS[algorithm][0]}' vs "
      f"{ALGORITHMS[algorithm][4]}, their batching "
      f"{' and '.join(args.batching[algorithm])}"
      + (f" ({VMAP_REASON[algorithm]})" if algorithm in VMAP_REASON else "")
    )
  start = time.perf_counter()
  checks = {} if args.skip_checks else run_checks(args)
  results, skipped, history = [], {}, {}
  for n in sorted(args.sizes):
    for cell_name in args.cells:
      results += measure_size(cell_name, n, args, checks, history, skipped)
  print_tables(results, checks, skipped, args)
  print(f"\ntotal {time.perf_counter() - start:.0f}s; {load_average()}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(
        {
          "args": {k: v for k, v in vars(args).items()},
          "versions": {
            "braintrace": braintrace.__version__,
            "brainstate": brainstate.__version__,
            "jax": jax.__version__,
          },
          "checks": [
            dict(algorithm=a, cell=c, **r) for (a, c), r in checks.items()
          ],
          "results": results,
          "skipped": [
            {"algorithm": a, "cell": c, "n": n, "why": w}
            for (a, c, n), w in skipped.items()
          ],
        },
        f,
        indent=1,
        default=str,
      )


if __name__ == "__main__":
  main()
