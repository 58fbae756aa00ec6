"""Reproduces one figure or table of the papers with one command.

  python -m experiments.reproduce --list
  python -m experiments.reproduce ok_fig1 --scale small --workdir runs/reproduce
  python -m experiments.reproduce ok_fig2_table2 --scale paper --workdir runs/paper
  python -m experiments.reproduce ok_fig1 --scale paper --plan   # cost, no training
  python -m experiments.reproduce rls_fig2 --scale paper --only mnist   # MNIST's curves

`--scale paper` uses the paper's settings (sizes, batches, step counts, 5
seeds, the learning-rate grid with best-of selection); `--scale small` a
documented reduction that finishes in about 30 minutes on a 2-core CPU. Each
curve trains all its seeds and learning rates as one compiled program; a
rerun resumes unfinished curves and skips finished ones. Results:
`WORKDIR/TARGET/{figure.png, table.md, table.json}` and one workdir per curve.
`--plan` trains nothing: it times a short run of each of the target's
programs at its real sizes and prints (and writes to
`WORKDIR/TARGET/plan_SCALE.md`) their run-steps, memory and expected time here
(`experiments/reproduce/plan.py`).

`python scripts/reproduce.py ...` (SPEC's command) launches this from any
directory.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import tempfile
import time

from experiments import reproduce
from experiments.loop import cli
from experiments.reproduce import plan


def _parse_value(text: str):
  """A Python literal where it parses (numbers, tuples, booleans), else the
  string."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("target", nargs="?", help="a target name (--list)")
  parser.add_argument(
    "--scale", choices=reproduce.common.SCALES, default="small"
  )
  parser.add_argument("--workdir", default="runs/reproduce")
  parser.add_argument(
    "--list", action="store_true", help="print every target and exit"
  )
  parser.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="FIELD=VALUE",
    help="override a config field in every curve that has "
    "it (e.g. --set num_steps=2000); repeatable",
  )
  parser.add_argument(
    "--plan",
    action="store_true",
    help="measure each program's cost; train nothing",
  )
  parser.add_argument(
    "--only",
    action="append",
    default=[],
    metavar="TEXT",
    help="train only the curves whose label contains TEXT (e.g. --only "
    "mnist); the others are read as far as they ran; repeatable",
  )
  args = parser.parse_args(argv)
  cli.quiet_backend_probe()
  overrides = {}
  for item in args.set:
    field, sep, value = item.partition("=")
    if not sep or not field:
      parser.error(f"--set expects FIELD=VALUE, got {item!r}")
    overrides[field] = _parse_value(value)
  targets = reproduce.targets()
  if args.list or not args.target:
    for name, (_, fn) in sorted(targets.items()):
      print(f"{name:16s} {reproduce.describe(fn)}")
    return 0 if args.list else 2
  if args.target not in targets:
    print(
      f"Unknown target {args.target!r}; known: {', '.join(sorted(targets))}",
      file=sys.stderr,
    )
    return 2
  _, fn = targets[args.target]
  if args.plan:
    return _plan(args.target, fn, args.scale, args.workdir, overrides)
  start = time.perf_counter()
  mode = reproduce.common.Mode(overrides, only=tuple(args.only))
  result = fn(args.scale, args.workdir, mode)
  minutes = (time.perf_counter() - start) / 60
  print(f"\n{args.target} ({args.scale}) done in {minutes:.1f} min. Files:")
  for path in result.files:
    print(f"  {path}")
  return 0


def _plan(target: str, fn, scale: str, workdir: str, overrides: dict) -> int:
  """Runs `fn` in plan mode in a scratch folder; prints and saves the plan."""
  mode = reproduce.common.planning(overrides)
  with tempfile.TemporaryDirectory() as scratch:
    fn(scale, scratch, mode)
  text = plan.table(target, scale, mode.plans)
  print("\n" + text)
  out = os.path.join(workdir, target)
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, f"plan_{scale}.md"), "w") as f:
    f.write(text + "\n")
  return 0
