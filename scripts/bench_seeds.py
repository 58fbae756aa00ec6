#!/usr/bin/env python
"""Throughput of one vmapped S-run program against the same S runs one by one.

Both sides are an experiment's own pieces (`make_experiment` of the module
that `experiments.EXPERIMENT` trains with: Copy, char-PTB, ...) compiled by
the run loop (`experiments/loop/programs.py`), so the vmapped side is
exactly what `--config.num_seeds=S` trains and the single side is the run
with `seed + j`, each run for its steps in turn. Same config, same chunk
length; each side's program is compiled ahead of time (compile time
reported apart), run once to warm up, then `--repeats` rounds time both
sides in turn (interleaved, so they see the same machine load), fetching
each chunk's metrics as the run loop does. Throughput counts run-steps (one
training step of one run) per second of wall time and of process CPU time
(CPU time is the honest cost where the process may be paused; on a GPU it
is the host's share); each side keeps its fastest round.

`--sequential_runs K` times only the first K single runs (the same program
each time; the seed is in the state, not the code), enough for the
single run's step time when S runs one after another would take long.
`--matmul_precision tensorfloat32` traces both programs under that GEMM
precision (GPU/TPU only; `rtrl.linalg`).

  taskset -c 1 .venv/bin/python -m scripts.bench_seeds --num_seeds 5 \
      --steps 1000 --repeats 2 --hidden_size 32 --rank 8 --estimator ok
  # The official settings of the OK paper's runs (Copy 16-OK RHN-128 b16;
  # char-PTB 8-OK RHN-256 b32), 20 runs as in its figures' programs:
  python -m scripts.bench_seeds --experiment copy_task --preset official \
      --num_seeds 20 --steps 300 --sequential_runs 3
  DATA_DIR=../shared/data python -m scripts.bench_seeds --experiment ptb \
      --preset official --num_seeds 20 --steps 300 --sequential_runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import jax

from experiments.loop import run_axes
from experiments.online import setup
from rtrl import linalg
from scripts.benchlib.costs import flop_floor
from scripts.benchlib.programs import compile_side
from scripts.benchlib.programs import experiment_module
from scripts.benchlib.programs import initial_state
from scripts.benchlib.programs import make_config
from scripts.benchlib.programs import run_chunks
from scripts.benchlib.timing import matmul_gflops

# Flags that set a config field of the same name when given.
FIELD_FLAGS = ("hidden_size", "rank", "estimator", "batch_size")


def timed(fn):
  wall, cpu = time.perf_counter(), time.process_time()
  result = fn()
  return result, time.perf_counter() - wall, time.process_time() - cpu


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
    "--experiment",
    default="copy_task",
    help="an experiments/ main on the shared run loop "
    "(copy_task, ptb, seq_cifar)",
  )
  parser.add_argument(
    "--preset", default="", help="the config file's preset (e.g. official)"
  )
  parser.add_argument("--num_seeds", type=int, default=5)
  parser.add_argument(
    "--steps",
    type=int,
    default=2000,
    help="timed training steps per run and round",
  )
  parser.add_argument("--chunk_steps", type=int, default=100)
  parser.add_argument("--hidden_size", type=int, default=None)
  parser.add_argument("--rank", type=int, default=None)
  parser.add_argument("--estimator", default=None)
  parser.add_argument("--batch_size", type=int, default=None)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument(
    "--sequential_runs",
    type=int,
    default=None,
    help="time only this many of the single runs (default: all num_seeds)",
  )
  parser.add_argument(
    "--matmul_precision", default=None, choices=sorted(linalg.MATMUL_PRECISIONS)
  )
  parser.add_argument("--data_dir", default=None)
  parser.add_argument("--json", default=None, help="write the results here")
  args = parser.parse_args(argv)
  if args.steps % args.chunk_steps:
    parser.error("--steps must be a multiple of --chunk_steps")
  if args.sequential_runs is not None and not (
    1 <= args.sequential_runs <= args.num_seeds
  ):
    parser.error("--sequential_runs must be in 1..--num_seeds")
  return args


def time_rounds(args, vmapped, singles) -> dict:
  """Each side's fastest `[wall, CPU]` seconds over `args.repeats` rounds of
  `args.steps` steps; `vmapped` is `(chunk, state)`, `singles` `(chunk,
  states)`, both warmed up."""
  (vmap_chunk, vmap_state), (single_chunk, seq_states) = vmapped, singles
  num_chunks = args.steps // args.chunk_steps
  inf = float("inf")
  best = {"vmapped": [inf, inf], "sequential": [inf, inf]}  # wall, CPU
  for round_ in range(args.repeats):
    vmap_state, wall, cpu = timed(
      lambda: run_chunks(vmap_chunk, vmap_state, num_chunks)
    )
    best["vmapped"] = [
      min(best["vmapped"][0], wall),
      min(best["vmapped"][1], cpu),
    ]
    line = f"round {round_}: vmapped {wall:.2f} s wall / {cpu:.2f} s CPU"
    seq_states, wall, cpu = timed(
      lambda: [run_chunks(single_chunk, s, num_chunks) for s in seq_states]
    )
    best["sequential"] = [
      min(best["sequential"][0], wall),
      min(best["sequential"][1], cpu),
    ]
    print(f"{line}; sequential {wall:.2f} s wall / {cpu:.2f} s CPU", flush=True)
  return best


def summarize(
  best: dict, num_runs: int, sequential_runs: int, steps: int
) -> dict:
  """Per-step times and throughputs of both sides (wall and CPU)."""
  (vw, vc), (sw, sc) = best["vmapped"], best["sequential"]
  return {
    "program_ms_per_step_vmapped": 1e3 * vw / steps,
    "ms_per_run_step_vmapped": 1e3 * vw / steps / num_runs,
    "ms_per_step_single": 1e3 * sw / steps / sequential_runs,
    "run_steps_per_s_vmapped": num_runs * steps / vw,
    "run_steps_per_s_vmapped_cpu": num_runs * steps / vc,
    "run_steps_per_s_sequential": sequential_runs * steps / sw,
    "run_steps_per_s_sequential_cpu": sequential_runs * steps / sc,
    "vmapped_over_sequential_wall": (sw / sequential_runs) / (vw / num_runs),
    "vmapped_over_sequential_cpu": (sc / sequential_runs) / (vc / num_runs),
  }


def print_table(
  summary: dict, num_runs: int, sequential_runs: int, steps: int
) -> None:
  s = summary
  print(
    "\n| side | ms per program step | ms per run-step | run-steps/s "
    "(wall) | run-steps/s (CPU) |\n|---|---|---|---|---|"
  )
  print(
    f"| vmapped ({num_runs} runs x {steps} steps) | "
    f"{s['program_ms_per_step_vmapped']:.3f} | "
    f"{s['ms_per_run_step_vmapped']:.4f} | "
    f"{s['run_steps_per_s_vmapped']:.1f} | "
    f"{s['run_steps_per_s_vmapped_cpu']:.1f} |"
  )
  print(
    f"| single ({sequential_runs} runs one after another x {steps} "
    f"steps) | {s['ms_per_step_single']:.3f} | "
    f"{s['ms_per_step_single']:.4f} | "
    f"{s['run_steps_per_s_sequential']:.1f} | "
    f"{s['run_steps_per_s_sequential_cpu']:.1f} |"
  )
  print(
    f"\nvmapped / sequential throughput: "
    f"{s['vmapped_over_sequential_wall']:.2f}x (wall), "
    f"{s['vmapped_over_sequential_cpu']:.2f}x (CPU)"
  )


def _cell_input_size(state, hidden_size: int) -> int | None:
  """The input size of the cell whose fused `W` (`(input + n + 1, K n)`)
  sits at `...['cell']['W']` in a run's state; None if there is none."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    keys = [getattr(k, "key", None) for k in path]
    if keys[-2:] == ["cell", "W"]:
      return int(leaf.shape[-2]) - hidden_size - 1
  return None


def floor_report(config, state, num_runs: int, ms_per_step: float):
  """The program step's FLOP floor (`bench_rtrl.py`'s count: the
  estimator's unavoidable GEMMs, times the runs) against a large float32
  matmul's rate at `'highest'`, measured now; None where the experiment
  has no single Lemma-1 cell or the estimator no floor."""
  cell = setup.make_cell(config)
  input_size = _cell_input_size(state, cell.hidden_size)
  if input_size is None:
    return None
  try:
    per_run = flop_floor(
      config.estimator, config.rank, cell, input_size, config.batch_size
    )
  except ValueError:
    return None
  gflops = matmul_gflops()
  floor_ms = 1e3 * per_run * num_runs / (gflops * 1e9)
  return {
    "floor_gflop_per_step": per_run * num_runs / 1e9,
    "matmul_gflops_highest": gflops,
    "floor_ms_per_step": floor_ms,
    "over_floor": ms_per_step / floor_ms,
  }


def main(argv=None) -> int:
  args = parse_args(argv)
  config = make_config(
    args.experiment,
    args.preset,
    {f: getattr(args, f) for f in FIELD_FLAGS if getattr(args, f) is not None},
    args.chunk_steps,
    args.num_seeds,
    args.data_dir,
  )
  experiment = experiment_module(args.experiment).make_experiment(config)
  grid = run_axes.run_grid(config, experiment.swept_hparams)
  sequential_runs = args.sequential_runs or len(grid)
  device = jax.devices()[0]
  print(
    f"{experiment.name} | {len(grid)} runs | chunk {args.chunk_steps} "
    f"steps | {args.steps} timed steps per run x {args.repeats} rounds | "
    f"{sequential_runs} single runs timed | matmul precision "
    f"{args.matmul_precision or 'highest'} | {device.platform} "
    f"({device.device_kind}) | {os.cpu_count()} visible CPUs, affinity "
    f"{sorted(os.sched_getaffinity(0))}",
    flush=True,
  )
  precision = (
    jax.default_matmul_precision(args.matmul_precision)
    if args.matmul_precision
    else contextlib.nullcontext()
  )
  with precision:
    vmap_compile, vmap_program = compile_side(experiment, grid)
    single_compile, single_program = compile_side(experiment, grid[:1])
    print(
      f"first call (compilation and one chunk): vmapped "
      f"{vmap_compile:.2f} s, single {single_compile:.2f} s (excluded "
      "from the timings)",
      flush=True,
    )
    vmap_chunk, single_chunk = (
      vmap_program.train_chunk,
      single_program.train_chunk,
    )
    vmap_state = run_chunks(  # Warm-up.
      vmap_chunk, initial_state(experiment, vmap_program, grid), 1
    )
    seq_states = [
      run_chunks(
        single_chunk, initial_state(experiment, single_program, [run]), 1
      )
      for run in grid[:sequential_runs]
    ]
    best = time_rounds(
      args, (vmap_chunk, vmap_state), (single_chunk, seq_states)
    )
  summary = summarize(best, len(grid), sequential_runs, args.steps)
  print_table(summary, len(grid), sequential_runs, args.steps)
  floor = floor_report(
    config, vmap_state, len(grid), summary["program_ms_per_step_vmapped"]
  )
  if floor:
    summary.update(floor)
    print(
      f"FLOP floor of the {len(grid)}-run program: "
      f"{floor['floor_gflop_per_step']:.2f} GFLOP per step; large float32 "
      f"matmul {floor['matmul_gflops_highest']:.0f} GFLOP/s ('highest') -> "
      f"{floor['floor_ms_per_step']:.3f} ms; this program "
      f"{summary['program_ms_per_step_vmapped']:.3f} ms/step = "
      f"{floor['over_floor']:.2f}x its floor",
      flush=True,
    )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(
        {
          "experiment": experiment.name,
          "runs": len(grid),
          "sequential_runs": sequential_runs,
          "steps": args.steps,
          "chunk_steps": args.chunk_steps,
          "matmul_precision": args.matmul_precision or "highest",
          "device": device.device_kind,
          "compile_s": {"vmapped": vmap_compile, "single": single_compile},
          **summary,
        },
        f,
        indent=1,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
