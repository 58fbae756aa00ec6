"""An experiment's run-loop programs for the benchmarks (no RTRL code here).

`bench_seeds.py` and `profile_step.py` time and trace exactly what the run
loop runs: the experiment's own `make_experiment` (the module that
`experiments.NAME` trains with), its runs (`run_axes.Runs`, vmapped when
several) compiled by `experiments/loop/programs.py`, one chunk per call with
its metrics fetched to the host as the run loop does.
"""

from __future__ import annotations

import importlib
import time

import jax

from experiments.loop import config_files
from experiments.loop import programs
from experiments.loop import run_axes


def experiment_module(name: str):
  """The module whose `make_experiment` `experiments.NAME` trains with."""
  main = importlib.import_module(f"experiments.{name}")
  return importlib.import_module(main.train.__module__)


def make_config(
  experiment: str,
  preset: str,
  overrides: dict,
  chunk_steps: int,
  num_seeds: int,
  data_dir: str | None,
):
  """`configs/EXPERIMENT.py:PRESET` with `overrides`, `chunk_steps` (a
  record per chunk) and `num_seeds`; `data_dir` where the config reads
  data."""
  config = config_files.load_config(experiment, preset)
  config.update(overrides)
  config.update(
    dict(chunk_steps=chunk_steps, num_seeds=num_seeds, log_every=chunk_steps)
  )
  if data_dir and "data_dir" in config:
    config.data_dir = data_dir
  return config


def run_chunks(chunk, state, num_chunks):
  """Advances `state` by `num_chunks` chunks, fetching metrics each chunk as
  the run loop does."""
  for _ in range(num_chunks):
    state, metrics = chunk(state)
    jax.device_get(metrics)
  return jax.block_until_ready(state)


def initial_state(experiment, program, grid):
  runs = run_axes.Runs(experiment, grid)
  return program.init(runs.keys, runs.hparams)


def compile_side(experiment, grid):
  """`(first-call seconds, program)` of the runs in `grid` (one vmapped
  program when there are several); the first call (compilation and one
  chunk) is made on a throw-away state."""
  program = programs.compile_program(
    experiment, run_axes.Runs(experiment, grid), mesh=None
  )
  start = time.perf_counter()
  run_chunks(program.train_chunk, initial_state(experiment, program, grid), 1)
  return time.perf_counter() - start, program
