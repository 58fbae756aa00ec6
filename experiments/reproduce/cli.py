"""Reproduces one figure or table of the papers with one command.

  python -m experiments.reproduce --list
  python -m experiments.reproduce ok_fig1 --scale small --workdir runs/reproduce
  python -m experiments.reproduce ok_fig1 --scale paper --plan   # cost, no training
  python -m experiments.reproduce rls_fig2 --scale paper --only mnist   # MNIST's curves
  python -m experiments.reproduce ok_fig4 --scale paper --devices 0,1,2,3
  python -m experiments.reproduce ok_fig4 --scale paper --launcher slurm \\
      --partition gpu --timeout-min 240 --workdir /shared/runs
  python -m experiments.reproduce ok_fig4 --scale paper --status --workdir /shared/runs
  python -m experiments.reproduce ok_fig4 --scale paper --collect --workdir /shared/runs

`--scale paper` uses the paper's settings (sizes, batches, step counts, 5
seeds, the learning-rate grid with best-of selection); `--scale small` a
documented reduction that finishes in about 30 minutes on a 2-core CPU. A
target is a list of programs (`--plan` lists them: each curve trains all its
seeds and learning rates as one compiled program); a rerun resumes
unfinished programs and skips finished ones. Results:
`WORKDIR/TARGET/{figure.png, table.md, table.json}` and one workdir per
program. `--plan` trains nothing: it times a short run of each program at
its real sizes and prints (and writes to `WORKDIR/TARGET/plan_SCALE.md`)
their run-steps, memory, expected time and the target's wall time on one
device and on N (`experiments/reproduce/plan.py`).

Launchers: `local` (default) trains the programs one after another in this
process, or with `--devices` as parallel processes, one per device;
`slurm` submits them as SLURM jobs through submitit
(docs/howto/slurm_cluster.md). `--status` shows each program's job,
state, steps and ETA; `--collect` builds the figures from what exists.

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
from experiments.loop import errors
from experiments.reproduce import collect as collect_lib
from experiments.reproduce import launch_local
from experiments.reproduce import launch_slurm
from experiments.reproduce import plan
from experiments.reproduce import programs as programs_lib
from experiments.reproduce import slurm_checks
from experiments.reproduce import status


def _parse_value(text: str):
  """A Python literal where it parses (numbers, tuples, booleans), else the
  string."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


class _Help(argparse.RawDescriptionHelpFormatter):
  """The description as written; every option's default after its help."""

  def _get_help_string(self, action):
    text = action.help or ""
    if not action.option_strings or action.default is argparse.SUPPRESS:
      return text
    if action.nargs == 0:  # A flag.
      return text + " (default: off)"
    if action.default in (None, "", []):
      return text + " (default: none)"
    return text + " (default: %(default)s)"


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
    prog="scripts/reproduce.py", description=__doc__, formatter_class=_Help
  )
  add = parser.add_argument
  add("target", nargs="?", help="a target name (--list)")
  add(
    "--scale",
    choices=reproduce.common.SCALES,
    default="small",
    help="the paper's settings, or the documented reduction",
  )
  add(
    "--workdir",
    default="runs/reproduce",
    help="results go to WORKDIR/TARGET/ (made absolute)",
  )
  add("--list", action="store_true", help="print every target and exit")
  add(
    "--set",
    action="append",
    default=[],
    metavar="FIELD=VALUE",
    help="override a config field in every program that has it (e.g. "
    "--set num_steps=2000); repeatable",
  )
  add(
    "--only",
    action="append",
    default=[],
    metavar="TEXT",
    help="train only the programs whose label contains TEXT (e.g. --only "
    "mnist); the others are read as far as they ran; repeatable",
  )
  what = parser.add_argument_group("what to do (default: train and build)")
  what.add_argument(
    "--plan",
    action="store_true",
    help="measure each program's cost and the wall time on one and on N "
    "devices; train nothing",
  )
  what.add_argument(
    "--status",
    action="store_true",
    help="each program's job, state, steps reached and ETA; failed ones "
    "with their log and the command that reruns them alone",
  )
  what.add_argument(
    "--collect",
    action="store_true",
    help="build the figures and tables from what the programs wrote; "
    f"exit {collect_lib.INCOMPLETE_EXIT} if any is missing",
  )
  what.add_argument(
    "--program",
    default="",
    metavar="KEY",
    help="train only this program (KEY: its folder under --workdir, as "
    "--status lists it); what each job runs",
  )
  where = parser.add_argument_group("launchers")
  where.add_argument(
    "--launcher",
    choices=("local", "slurm"),
    default="local",
    help="local: this machine; slurm: SLURM jobs through submitit",
  )
  where.add_argument(
    "--devices",
    default="",
    metavar="IDS",
    help="local: run the programs as parallel processes, one per device "
    "(CUDA_VISIBLE_DEVICES), e.g. 0,1,2,3; empty: one after another in "
    "this process",
  )
  where.add_argument(
    "--wait",
    action="store_true",
    help="slurm: wait for the jobs and the figure, printing the status",
  )
  _slurm_options(
    parser.add_argument_group("slurm (as sbatch / submitit name them)")
  )
  return parser


def _slurm_options(group) -> None:
  default = launch_slurm.Options()
  add = group.add_argument
  add(
    "--partition",
    default=default.partition,
    help="partition ('' = the cluster's default)",
  )
  add(
    "--gpus-per-node",
    type=int,
    default=default.gpus_per_node,
    help="GPUs per job (one program per job)",
  )
  add(
    "--cpus-per-task",
    type=int,
    default=default.cpus_per_task,
    help="CPUs per job (0 = the cluster's default)",
  )
  add(
    "--mem-gb",
    type=float,
    default=default.mem_gb,
    help="memory per job in GB (0 = the partition's default)",
  )
  add(
    "--timeout-min",
    type=float,
    default=default.timeout_min,
    help="time limit per job in minutes; a longer program is requeued "
    "from its checkpoint",
  )
  add(
    "--array-parallelism",
    type=int,
    default=default.array_parallelism,
    help="jobs of one array running at once",
  )
  add(
    "--signal-delay-s",
    type=int,
    default=default.signal_delay_s,
    help="seconds before the time limit when the job is signalled to "
    "checkpoint and requeue",
  )
  add(
    "--max-num-timeout",
    type=int,
    default=default.max_num_timeout,
    help="requeues after reaching the time limit (preemptions: unlimited)",
  )
  add(
    "--sbatch",
    action="append",
    default=[],
    metavar="FLAG[=VALUE]",
    help="another sbatch flag for every job, e.g. --sbatch account=abc "
    "--sbatch constraint=h100; repeatable",
  )
  add(
    "--workdir-is-shared",
    action="store_true",
    help="skip the check that --workdir is on a shared filesystem",
  )


def main(argv=None) -> int:
  parser = _parser()
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
  target = programs_lib.Target(
    args.target,
    targets[args.target][1],
    args.scale,
    os.path.abspath(args.workdir),
    tuple(args.set),
    tuple(overrides.items()),
  )
  try:
    return _dispatch(args, target)
  except (slurm_checks.LaunchError, programs_lib.UnknownProgram) as error:
    print(f"Error: {error}", file=sys.stderr)
    return 2
  except errors.RunError as error:  # A program's run failed: its one line.
    print(f"Error: {error}", file=sys.stderr)
    return error.exit_code


def _dispatch(args, target: programs_lib.Target) -> int:
  devices = [d.strip() for d in args.devices.split(",") if d.strip()]
  if args.plan:
    parallel = len(devices) or (
      args.array_parallelism if args.launcher == "slurm" else 0
    )
    return _plan(target, parallel)
  if args.status:
    table = status.rows(target, target.programs())
    print(status.report(target, table))
    return 0
  if args.collect:
    return _collect(target)
  if args.program:
    return _program(target, args.program)
  if args.launcher == "slurm":
    return _slurm(args, target)
  if devices:
    programs = _selected(target, args.only)
    codes = launch_local.run(target, programs, devices)
    failed = sorted(k for k, code in codes.items() if code != 0)
    code = _collect(target)
    if failed:
      print(status.report(target, status.rows(target, target.programs())))
    return 1 if failed else code
  start = time.perf_counter()
  mode = reproduce.common.Mode(dict(target.overrides), only=tuple(args.only))
  result = target.fn(target.scale, target.workdir, mode)
  minutes = (time.perf_counter() - start) / 60
  print(f"\n{target.name} ({target.scale}) done in {minutes:.1f} min. Files:")
  for path in result.files:
    print(f"  {path}")
  return 0


def _selected(target, only) -> list:
  programs = target.programs()
  programs_lib.check_distinct(target, programs)
  if not only:
    return programs
  return [p for p in programs if any(part in p.label for part in only)]


def _program(target: programs_lib.Target, key: str) -> int:
  """Trains the one program `key` (what a job or device process runs)."""
  program = programs_lib.find(target, target.programs(), key)
  if program.done:
    print(f"{key}: finished in {program.path}")
    return 0
  print(f"{target.name}: training {key} -> {program.path}", flush=True)
  target.programs(train=program.path)
  if not programs_lib.find(target, target.programs(), key).done:
    print(f"Error: {key} ended without its output", file=sys.stderr)
    return 1
  return 0


def _collect(target: programs_lib.Target) -> int:
  result, missing = collect_lib.collect(target)
  if result is not None:
    print(f"\n{target.name} ({target.scale}). Files:")
    for path in result.files:
      print(f"  {path}")
  return collect_lib.INCOMPLETE_EXIT if missing else 0


def _slurm(args, target: programs_lib.Target) -> int:
  sbatch = []
  for item in args.sbatch:
    flag, sep, value = item.partition("=")
    sbatch.append((flag.lstrip("-"), value if sep else True))
  options = launch_slurm.Options(
    partition=args.partition,
    gpus_per_node=args.gpus_per_node,
    cpus_per_task=args.cpus_per_task,
    mem_gb=args.mem_gb,
    timeout_min=args.timeout_min,
    array_parallelism=args.array_parallelism,
    signal_delay_s=args.signal_delay_s,
    max_num_timeout=args.max_num_timeout,
    sbatch=tuple(sbatch),
    workdir_is_shared=args.workdir_is_shared,
  )
  programs = _selected(target, args.only)
  partition = launch_slurm.check(target, programs, options)
  submitted = launch_slurm.submit(target, programs, options, partition)
  print(f"Submitted {len(submitted) - 1} program(s) and the collect job:")
  for record in submitted:
    print(f"  {record['job_id']:>10s}  {record['key']}")
  where = f"{target.name} --scale {target.scale} --workdir {target.workdir}"
  print(f"Watch: python scripts/reproduce.py {where} --status")
  if not args.wait:
    return 0
  return 0 if launch_slurm.wait(target) else 1


def _plan(target: programs_lib.Target, parallel: int) -> int:
  """Runs the target in plan mode in a scratch folder; prints and saves the
  plan."""
  mode = reproduce.common.planning(dict(target.overrides))
  with tempfile.TemporaryDirectory() as scratch:
    target.fn(target.scale, scratch, mode)
    keys = [os.path.relpath(p.path, scratch) for p in mode.programs or []]
  reads = programs_lib.reads(mode.programs or [])  # One per plan (visit).
  text = plan.table(
    target.name,
    target.scale,
    mode.plans or [],
    reads,
    (parallel,) if parallel else (),
    _device_word(),
  )
  print("\n" + text)
  os.makedirs(target.folder, exist_ok=True)
  plan.write(
    os.path.join(target.folder, f"plan_{target.scale}"),
    text,
    mode.plans or [],
    keys,
  )
  return 0


def _device_word() -> str:
  """GPU, TPU or CPU: what the plan's times were measured on."""
  import jax  # pylint: disable=g-import-not-at-top

  return jax.default_backend().upper()
