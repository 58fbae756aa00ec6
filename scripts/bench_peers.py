"""Our online estimators against every peer implementation, side by side.

Issues 23 and 53. Four peers implement algorithms we implement; none is a
dependency of this project. Each lives in its own venv outside the
checkout, made from its fetched snapshot or the package registry by

  bash scripts/peers/setup_braintrace.sh     # braintrace 0.2.8 (PyPI)
  bash scripts/peers/setup_sketched_rtrl.sh  # sonaradarcn/sketched-rtrl
  bash scripts/peers/setup_jax_rtrl.sh       # FranzKnut/jax_rtrl
  bash scripts/peers/setup_snapjax.sh        # kevinlopezandrade/snapjax

(under /work/peers/<peer>/{venv,src}), and one command runs them all, each
in one child process of its own venv's Python with the checkout (and the
snapshot) on the path, and prints one table:

  .venv/bin/python -m scripts.bench_peers --peers all --json peers.json

The pairs (what coincides with ours, and how it is checked) are listed by
each peer's module, `scripts/benchlib/peers_<peer>.py`; docs/benchmarks/
peers.md has the table and what differs by definition. Per pair:

  1. same numbers first (float64, identical weights and inputs, the
     parameters held fixed): deterministic estimators agree per step to
     1e-10; random ones agree in distribution (their means over many
     draws against exact RTRL). A pair that fails is not timed.
  2. then time: the full online step (cell, tangent, readout, Adam; one
     update per step) on one-hot inputs over 50 symbols (char-PTB's size),
     linear readout, softmax cross-entropy, float32, at each --sizes n and
     --batches B. The float32 loss trajectories of the first chunk must
     agree (not for random estimators). Then --repeats rounds run every
     pair of one (n, B) in turn, ours then theirs (interleaved, so both see
     the same load); the table gives the median ms per step, theirs / ours
     by medians and by minima, and each side's tangent-state size.

Ours is timed only through the public API (`rtrl.estimators.make`,
`rtrl.online.make_online_trainer`): the code path a user gets.

  3. the peers' own public test cases, run against our implementation
     through a small adapter (`cases()` of the peer's module; their test
     files are imported from the snapshot, never copied): which passed.

Options: --peers (all or a comma list), --algorithms and --cells (comma
lists of the rows to run; all by default), --sizes, --batches, --steps
(per timed chunk), --exact_steps (exact RTRL's chunk), --repeats,
--max_seconds (skip a configuration whose predicted cost exceeds it),
--skip_checks, --skip_cases, --json, --peer_root, --report (print the
report of a saved --json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

# peer -> (its snapshot's folder under --peer_root, or None for a registry
# package; the module of our adapter).
PEERS = {
  "braintrace": (None, "scripts.benchlib.peers_braintrace_pairs"),
  "sketched_rtrl": ("src", "scripts.benchlib.peers_sketched_rtrl"),
  "jax_rtrl": ("src", "scripts.benchlib.peers_jax_rtrl"),
  "snapjax": ("src", "scripts.benchlib.peers_snapjax"),
}
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  listed = lambda s: [v for v in s.split(",") if v]
  numbers = lambda s: [int(v) for v in listed(s)]
  parser.add_argument(
    "--peers", type=listed, default=["all"], help="all, or a comma list"
  )
  parser.add_argument("--sizes", type=numbers, default=[32, 64, 128])
  parser.add_argument(
    "--algorithms",
    type=listed,
    default=[],
    help="only these rows' algorithms (exact, snap1, rflo, ...); all if empty",
  )
  parser.add_argument(
    "--cells", type=listed, default=[], help="only these cells; all if empty"
  )
  parser.add_argument("--batches", type=numbers, default=[1, 16])
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument(
    "--exact_steps",
    type=int,
    default=20,
    help="exact RTRL's chunk (steps per timed call)",
  )
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--vocab", type=int, default=50)
  parser.add_argument("--learning_rate", type=float, default=1e-3)
  parser.add_argument(
    "--max_seconds",
    type=float,
    default=120.0,
    help="skip a configuration whose predicted cost (both sides, all "
    "rounds) exceeds this",
  )
  parser.add_argument("--check_n", type=int, default=12)
  parser.add_argument(
    "--torch_threads",
    type=numbers,
    default=[1, 2],
    help="sketched-rtrl: torch thread counts, each timed, the faster kept",
  )
  parser.add_argument("--trajectory_tolerance", type=float, default=1e-3)
  parser.add_argument("--skip_checks", action="store_true")
  parser.add_argument(
    "--skip_cases",
    action="store_true",
    help="skip the peers' own test cases run against ours",
  )
  parser.add_argument("--json", default=None)
  parser.add_argument("--peer_root", default="/work/peers")
  parser.add_argument(
    "--report", default=None, help="only print the report of a saved --json"
  )
  args = parser.parse_args(argv)
  if args.peers == ["all"]:
    args.peers = list(PEERS)
  unknown = set(args.peers) - set(PEERS)
  if unknown:
    parser.error(f"--peers: unknown {sorted(unknown)}; known {list(PEERS)}")
  for flag in ("steps", "exact_steps", "repeats"):
    if getattr(args, flag) < 1:
      parser.error(f"--{flag} must be positive")
  if not args.sizes or not args.batches or min(args.sizes + args.batches) < 1:
    parser.error("--sizes and --batches: positive integers")
  return args


def run_one(peer: str, args) -> dict:
  """This process is the peer's venv: checks, then timing, for one peer."""
  # pylint: disable=g-import-not-at-top (the peer is only importable here)
  import jax

  from scripts.benchlib import peers_common

  module = importlib.import_module(PEERS[peer][1])
  pairs = selected(module.pairs(args), args)
  versions = {**module.versions(), "jax": jax.__version__}
  print(f"{peer}: {versions}; {peers_common.load_average()}", flush=True)
  checks = {} if args.skip_checks else peers_common.run_checks(pairs, args)
  results, skipped, history = [], {}, {}
  for n in sorted(args.sizes):
    for batch_size in sorted(args.batches):
      results += peers_common.measure(
        pairs, n, batch_size, args, checks, history, skipped
      )
  cases = []
  if not args.skip_cases and hasattr(module, "cases"):
    cases = module.cases()
    for case in cases:
      print(f"  case {case['case']}: {case['passed']} ({case['detail']})")
  return {
    "peer": peer,
    "versions": versions,
    "cases": cases,
    "pairs": [
      {
        "algorithm": p.algorithm,
        "ours": p.ours,
        "cell": p.cell,
        "theirs": p.theirs,
      }
      for p in pairs
    ],
    "checks": [dict(algorithm=a, cell=c, **r) for (a, c), r in checks.items()],
    "results": results,
    "skipped": [
      {"algorithm": a, "cell": c, "n": n, "batch": b, "why": w}
      for (a, c, n, b), w in skipped.items()
    ],
  }


def selected(pairs: list, args) -> list:
  """The pairs of the asked --algorithms and --cells (all where empty)."""
  return [
    p
    for p in pairs
    if (not args.algorithms or p.algorithm in args.algorithms)
    and (not args.cells or p.cell in args.cells)
  ]


def peer_python(peer: str, args) -> str:
  return os.path.join(args.peer_root, peer, "venv", "bin", "python")


def run_child(peer: str, args, argv) -> dict:
  """The peer's venv runs `--peers PEER` in a child process; its JSON."""
  python = peer_python(peer, args)
  if not os.path.exists(python):
    return {
      "peer": peer,
      "error": f"no venv at {python}: run bash scripts/peers/setup_{peer}.sh",
    }
  path = [CHECKOUT]
  if PEERS[peer][0]:
    path.append(os.path.join(args.peer_root, peer, PEERS[peer][0]))
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, f"{peer}.json")
    command = [python, "-m", "scripts.bench_peers", *child_argv(argv)]
    command += ["--peers", peer, "--json", out]
    print(f"\n== {peer}: {' '.join(command)}", flush=True)
    code = subprocess.run(command, cwd=CHECKOUT, env=env, check=False)
    if code.returncode or not os.path.exists(out):
      return {"peer": peer, "error": f"exit status {code.returncode}"}
    with open(out) as f:
      return json.load(f)["reports"][0]


def child_argv(argv) -> list:
  """The parent's arguments less --peers and --json (set per child)."""
  kept, skip = [], False
  for arg in argv:
    if skip:
      skip = False
      continue
    if arg in ("--peers", "--json"):
      skip = True
      continue
    if arg.startswith(("--peers=", "--json=")):
      continue
    kept.append(arg)
  return kept


def print_report(reports: list, args, measured: dict | None = None) -> None:
  # pylint: disable=g-import-not-at-top
  from scripts.benchlib.peers_report import report_markdown

  print("\n" + report_markdown(reports, args, measured))


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  args = parse_args(argv)
  if args.report:
    with open(args.report) as f:
      saved = json.load(f)
    print_report(
      saved["reports"],
      argparse.Namespace(**saved["args"]),
      saved.get("measured"),
    )
    return 0
  start = time.perf_counter()
  own = [p for p in args.peers if importable(p)]
  if len(args.peers) == 1 and own:
    reports = [run_one(args.peers[0], args)]
  else:
    reports = [run_child(peer, args, argv) for peer in args.peers]
  # pylint: disable-next=g-import-not-at-top
  from scripts.benchlib.peers_report import measured_here

  measured = measured_here()
  print_report(reports, args, measured)
  print(f"\ntotal {time.perf_counter() - start:.0f}s")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(
        {"args": vars(args), "measured": measured, "reports": reports},
        f,
        indent=1,
        default=str,
      )
  return 0


def importable(peer: str) -> bool:
  """Whether this interpreter is the peer's own (its package imports)."""
  name = {"sketched_rtrl": "skrtrl"}.get(peer, peer)
  try:
    importlib.import_module(name)
  except Exception:
    return False
  return True


if __name__ == "__main__":
  if not __package__:  # `python scripts/bench_peers.py`: `scripts` unimportable
    sys.exit(
      "Error: run it as a module from the checkout: "
      f"cd {CHECKOUT} && .venv/bin/python -m scripts.bench_peers ..."
    )
  sys.exit(main())
