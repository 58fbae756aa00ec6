#!/usr/bin/env python
"""Our 16-OK Copy step against the official TF1 code's, side by side.

The official OK code (Benzing et al.'s repository,
marcelomatheusgauy/optimal_kronecker_approximation, GPL-3.0) is never part
of this project: you fetch it yourself and point `--official_script` at its
`OK/OK_rank_r_unbiased.py` (16-OK, RHN-128, batch 16, the Copy task, as its
runs were logged), and give a Python with TensorFlow (`--tf_python`: any TF
2.x with `tensorflow.compat.v1`, in its own venv, e.g. `python -m venv
/work/peers/tf1 && /work/peers/tf1/bin/pip install tensorflow-cpu scipy`).

The official script runs in a child process of that Python, as written,
with four things changed at load time (nothing is copied or stored):
`tensorflow` is `tensorflow.compat.v1` with v2 behaviour off; the one
`tf.contrib` function it calls (`kfac.utils.kronecker_product`, gone from
TF2) is provided by the launcher here; its loop stops after `--steps`
steps; and it prints its elapsed time every `--every` steps instead of
1000. Its per-step time is the mean over the printed intervals after the
first (which holds graph building and warm-up).

Ours runs the same setting through the run loop's own compiled chunk
(`configs/copy_task.py:official`, a single run, `--every`-step chunks), in
this process, right after the official child finishes, for the same number
of steps. `--rounds` alternates the two (official, ours, official, ours,
...; ours compiled once), so both see the same machine load. Printed: ms
per step of each per round, the ratio per round, min and median, the CPU
model and the load average.

  bash scripts/peers/setup_official_ok.sh   # /work/peers/official_ok
  python -m scripts.bench_official \\
      --official_script /work/peers/official_ok/src/OK/OK_rank_r_unbiased.py \\
      --tf_python /work/peers/official_ok/venv/bin/python --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The launcher run by the TF Python: our own small shim around the official
# script (read from its path at run time).
LAUNCHER = r'''
import sys, types
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()


def kronecker_product(a, b):
  """The Kronecker product of two matrices (what tf.contrib.kfac.utils
  provided in TF1)."""
  rows_a, cols_a = a.shape.as_list()
  rows_b, cols_b = b.shape.as_list()
  outer = a[:, None, :, None] * b[None, :, None, :]
  return tf.reshape(outer, [rows_a * rows_b, cols_a * cols_b])


tf.contrib = types.SimpleNamespace(kfac=types.SimpleNamespace(
    utils=types.SimpleNamespace(kronecker_product=kronecker_product)))
sys.modules["tensorflow"] = tf
path, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
source = open(path).read()
for old, new in (("while steps < 2000000:", f"while steps < {steps}:"),
                 ("if steps % 1000 == 999:",
                  f"if steps % {every} == {every - 1}:")):
  if old not in source:
    raise SystemExit(f"{path}: expected the line {old!r} (is this "
                     "OK/OK_rank_r_unbiased.py?)")
  source = source.replace(old, new)
print("OFFICIAL_START", flush=True)
exec(compile(source, path, "exec"), {"__name__": "__main__"})
'''


def official_intervals(output: str) -> list[float]:
  """The elapsed seconds the official script printed, one per interval:
  it prints a lone number after each block's status line."""
  seconds = []
  for line in output.splitlines():
    try:
      seconds.append(float(line.strip()))
    except ValueError:
      continue
  return seconds


def run_official(args) -> float:
  """ms per official step (mean of the printed intervals after the
  first)."""
  if not os.path.isfile(args.official_script):
    raise SystemExit(
      f"--official_script {args.official_script}: no such "
      "file (fetch the official repository and point at its "
      "OK/OK_rank_r_unbiased.py)"
    )
  with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(LAUNCHER)
  env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
  process = subprocess.run(
    [
      args.tf_python,
      f.name,
      args.official_script,
      str(args.steps),
      str(args.every),
    ],
    capture_output=True,
    text=True,
    env=env,
    check=False,
  )
  os.unlink(f.name)
  if process.returncode:
    raise SystemExit(
      f"the official script failed:\n"
      f"{(process.stdout + process.stderr)[-3000:]}"
    )
  intervals = official_intervals(process.stdout)
  if len(intervals) < 2:
    raise SystemExit(
      "the official script printed fewer than two timed "
      f"intervals; raise --steps:\n{process.stdout[-2000:]}"
    )
  return 1e3 * statistics.mean(intervals[1:]) / args.every


def our_program(args):
  """Our official Copy preset compiled and warmed up: `(train_chunk,
  state)` (single run, `--every`-step chunks)."""
  # pylint: disable=g-import-not-at-top
  from experiments.loop import run_axes
  from scripts.benchlib.programs import compile_side
  from scripts.benchlib.programs import experiment_module
  from scripts.benchlib.programs import initial_state
  from scripts.benchlib.programs import make_config
  from scripts.benchlib.programs import run_chunks

  config = make_config("copy_task", "official", {}, args.every, 1, None)
  experiment = experiment_module("copy_task").make_experiment(config)
  grid = run_axes.run_grid(config, experiment.swept_hparams)
  _, program = compile_side(experiment, grid)
  state = run_chunks(
    program.train_chunk, initial_state(experiment, program, grid), 1
  )
  return program.train_chunk, state


def run_ours(args, program) -> tuple[float, tuple]:
  """ms per step of our preset over `--steps` less one warm-up chunk,
  metrics fetched as the run loop does; and the program with its new
  state (a chunk donates its input state)."""
  # pylint: disable=g-import-not-at-top
  from scripts.benchlib.programs import run_chunks

  train_chunk, state = program
  num_chunks = max(1, args.steps // args.every - 1)
  start = time.perf_counter()
  state = run_chunks(train_chunk, state, num_chunks)
  seconds = time.perf_counter() - start
  return 1e3 * seconds / (num_chunks * args.every), (train_chunk, state)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--official_script", required=True)
  parser.add_argument(
    "--tf_python", required=True, help="a Python with TensorFlow (its own venv)"
  )
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--every", type=int, default=100)
  parser.add_argument(
    "--rounds", type=int, default=3, help="official, ours, ... alternated"
  )
  args = parser.parse_args(argv)
  if args.steps < 2 * args.every:
    parser.error(
      "--steps must be at least twice --every (the first interval is warm-up)"
    )
  # pylint: disable=g-import-not-at-top
  from scripts.benchlib.peers_report import cpu_model
  from scripts.benchlib.timing import load_average

  print(
    f"official TF1 code: 16-OK, RHN-128, batch 16, Copy; {args.steps} "
    f"steps, timed every {args.every}, {args.rounds} rounds alternated "
    f"with ours; {cpu_model()}; {load_average()} (this may take minutes)",
    flush=True,
  )
  program = our_program(args)
  ratios = []
  for i in range(args.rounds):
    official = run_official(args)
    ours, program = run_ours(args, program)
    ratios.append(official / ours)
    print(
      f"round {i + 1}: official {official:.1f} ms/step, ours "
      f"(configs/copy_task.py:official) {ours:.2f} ms/step, "
      f"{official / ours:.1f}x; {load_average()}",
      flush=True,
    )
  print(
    f"\nours is {min(ratios):.1f}-{max(ratios):.1f}x (median "
    f"{statistics.median(ratios):.1f}x) the official code's speed on "
    f"{cpu_model()}, alternated in one run"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
