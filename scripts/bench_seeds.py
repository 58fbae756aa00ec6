#!/usr/bin/env python
"""Throughput of one vmapped S-seed Copy run against S sequential single runs.

Both sides are the Copy experiment's own pieces
(`experiments/online/copy_experiment.py` `make_experiment`, its `init` and
`train_chunk`) wrapped by the run loop's run axis
(`experiments/loop/run_axes.Runs`): the vmapped side is exactly what
`--config.num_seeds=S` trains, the sequential side is the single run with
`seed + j`, run for each j in turn. Same config, same chunk length; each
side's program is compiled ahead of time (compile time reported apart), run
once to warm up, then `--repeats` rounds time both sides in turn
(interleaved, so they see the same machine load). Throughput counts run-steps
(one training step of one seed) per second of wall time and of process CPU
time (CPU time is the honest cost where the process may be paused); the
table keeps each side's fastest round (wall and CPU separately).

  taskset -c 1 .venv/bin/python scripts/bench_seeds.py --num_seeds 5 \
      --steps 1000 --repeats 2 --hidden_size 32 --rank 8 --estimator ok
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # noqa: E402

from experiments.loop import config_files  # noqa: E402
from experiments.loop import run_axes  # noqa: E402
from experiments.online import copy_experiment  # noqa: E402


def init_state(experiment, grid):
  """The run loop's initial state for the runs in `grid` (stacked when there
  are several) and its `Runs`."""
  runs = run_axes.Runs(experiment, grid)
  return runs, jax.jit(runs.init)(runs.keys, runs.hparams)


def compile_chunk(runs, state):
  """`(compile seconds, compiled train_chunk)`, ahead of time."""
  start = time.perf_counter()
  chunk = jax.jit(runs.train_chunk, donate_argnums=0).lower(state).compile()
  return time.perf_counter() - start, chunk


def run_chunks(chunk, state, num_chunks):
  """Advances `state` by `num_chunks` chunks, fetching metrics each chunk as
  the run loop does."""
  for _ in range(num_chunks):
    state, metrics = chunk(state)
    jax.device_get(metrics)
  return jax.block_until_ready(state)


def timed(fn):
  wall, cpu = time.perf_counter(), time.process_time()
  result = fn()
  return result, time.perf_counter() - wall, time.process_time() - cpu


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--num_seeds", type=int, default=5)
  parser.add_argument("--steps", type=int, default=2000,
                      help="timed training steps per seed and round")
  parser.add_argument("--chunk_steps", type=int, default=100)
  parser.add_argument("--hidden_size", type=int, default=32)
  parser.add_argument("--rank", type=int, default=8)
  parser.add_argument("--estimator", default="ok")
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args(argv)
  if args.steps % args.chunk_steps:
    parser.error("--steps must be a multiple of --chunk_steps")
  return args


def make_experiment(args):
  """The Copy experiment of the flags' config, and its run grid (a seed
  each)."""
  config = config_files.load_config("copy_task")
  config.update(dict(estimator=args.estimator, rank=args.rank,
                     hidden_size=args.hidden_size, batch_size=args.batch_size,
                     chunk_steps=args.chunk_steps, num_seeds=args.num_seeds,
                     log_every=args.chunk_steps))
  experiment = copy_experiment.make_experiment(config)
  return experiment, run_axes.run_grid(config, experiment.swept_hparams)


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
        lambda: run_chunks(vmap_chunk, vmap_state, num_chunks))
    best["vmapped"] = [min(best["vmapped"][0], wall),
                       min(best["vmapped"][1], cpu)]
    line = f"round {round_}: vmapped {wall:.2f} s wall / {cpu:.2f} s CPU"
    seq_states, wall, cpu = timed(
        lambda: [run_chunks(single_chunk, s, num_chunks) for s in seq_states])
    best["sequential"] = [min(best["sequential"][0], wall),
                          min(best["sequential"][1], cpu)]
    print(f"{line}; sequential {wall:.2f} s wall / {cpu:.2f} s CPU",
          flush=True)
  return best


def print_table(best: dict, num_seeds: int, steps: int) -> None:
  run_steps = num_seeds * steps
  print("\n| side | run-steps/s (wall) | run-steps/s (CPU) |\n|---|---|---|")
  for side, (wall, cpu) in best.items():
    print(f"| {side} ({num_seeds} seeds x {steps} steps) | "
          f"{run_steps / wall:.1f} | {run_steps / cpu:.1f} |")
  (vw, vc), (sw, sc) = best["vmapped"], best["sequential"]
  print(f"\nvmapped / sequential throughput: {sw / vw:.2f}x (wall), "
        f"{sc / vc:.2f}x (CPU)")


def main(argv=None) -> int:
  args = parse_args(argv)
  experiment, grid = make_experiment(args)
  print(f"{experiment.name} | {len(grid)} seeds | chunk {args.chunk_steps} "
        f"steps | {args.steps} timed steps per seed x {args.repeats} rounds | "
        f"{jax.devices()[0].platform} | {os.cpu_count()} visible CPUs, "
        f"affinity {sorted(os.sched_getaffinity(0))}", flush=True)

  vmap_runs, vmap_state = init_state(experiment, grid)
  vmap_compile, vmap_chunk = compile_chunk(vmap_runs, vmap_state)
  singles = [init_state(experiment, [run]) for run in grid]
  seq_states = [state for _, state in singles]
  # One program serves every seed: the seed is in the state, not the code.
  single_compile, single_chunk = compile_chunk(singles[0][0], seq_states[0])
  print(f"compile: vmapped {vmap_compile:.2f} s, single {single_compile:.2f} s"
        " (excluded from the timings)", flush=True)
  vmap_state = run_chunks(vmap_chunk, vmap_state, 1)  # Warm-up.
  seq_states = [run_chunks(single_chunk, s, 1) for s in seq_states]
  best = time_rounds(args, (vmap_chunk, vmap_state),
                     (single_chunk, seq_states))
  print_table(best, len(grid), args.steps)
  return 0


if __name__ == "__main__":
  sys.exit(main())
