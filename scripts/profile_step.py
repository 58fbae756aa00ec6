#!/usr/bin/env python
"""Where a training step's time goes on the device, from a `jax.profiler` trace.

Builds a program exactly as the run loop does (`scripts/benchlib/programs.py`: the
experiment's own pieces, its runs vmapped when several), warms it up, then
traces `--chunks` chunks, each a call of the jitted `lax.scan` over
`--chunk_steps` steps with its metrics fetched to the host (as the run loop
does), and reads the trace back (`jax.profiler.ProfileData`). It reports:

* host-device traffic per chunk: the memory copies device-to-host and
  host-to-device on the device's streams. A host synchronisation inside the
  step (a `lax.cond` whose predicate the host reads, a while-loop condition
  copied back each iteration, a callback) shows as copies that grow with
  the chunk's length; so the trace is taken at two chunk lengths, and the
  difference of copies per chunk, divided by the difference of steps, is
  the copies per step (0: no host sync per step);
* kernels launched per step and the device's busy time per step, against
  the wall time per step;
* the device time by kind (GEMM, cuSOLVER's small dense linear algebra,
  XLA's fusions, copies) and the kernels that take the most.

On a CPU (no device plane in the trace) it reports the executable launches
per chunk and the busiest thunks of XLA:CPU's executor instead.

  python -m scripts.profile_step --experiment copy_task --preset official
  DATA_DIR=../shared/data python -m scripts.profile_step --experiment ptb \
      --preset official --num_seeds 20
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import glob
import json
import re
import sys
import tempfile
import time

import jax
from jax.profiler import ProfileData

from experiments.loop import run_axes
from rtrl import linalg
from scripts.benchlib.programs import compile_side
from scripts.benchlib.programs import experiment_module
from scripts.benchlib.programs import initial_state
from scripts.benchlib.programs import make_config
from scripts.benchlib.programs import run_chunks

# Kernel kinds by name (case-insensitive), first match wins.
KINDS = (
  # CUPTI names them MemcpyD2H / MemcpyH2D / MemcpyD2D.
  ("memcpy DtoH", re.compile(r"memcpy.*(d2h|dtoh|device\s*to\s*host)", re.I)),
  ("memcpy HtoD", re.compile(r"memcpy.*(h2d|htod|host\s*to\s*device)", re.I)),
  ("memcpy/memset on the device", re.compile(r"memcpy|memset", re.I)),
  (
    "cuSOLVER (small SVD, eigh, QR)",
    re.compile(
      r"gesvd|syevj|syevd|jacobi|potrf|geqrf|orgqr|trsm|svd|"
      r"cusolver|eig",
      re.I,
    ),
  ),
  ("GEMM", re.compile(r"gemm|cutlass|xmma|cublas|matmul|dot|gemv", re.I)),
  (
    "XLA fusion",
    re.compile(
      r"fusion|loop_|input_|reduce|transpose|"
      r"convert|copy|select|scatter|gather|"
      r"dynamic|concatenate|broadcast|slice",
      re.I,
    ),
  ),
)


def kind_of(name: str) -> str:
  return next(
    (kind for kind, pattern in KINDS if pattern.search(name)), "other kernel"
  )


def trace_chunks(chunk, state, num_chunks: int, trace_dir: str):
  """Traces `num_chunks` chunks; returns the state and the trace's path."""
  options = jax.profiler.ProfileOptions()
  options.python_tracer_level = 0  # Python's own calls would swamp the
  # host timeline and slow the loop down many times over.
  with jax.profiler.trace(trace_dir, profiler_options=options):
    state = run_chunks(chunk, state, num_chunks)
  paths = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
  if not paths:
    raise RuntimeError(f"jax.profiler wrote no trace under {trace_dir}")
  return state, max(paths)


def device_events(profile) -> list:
  """`(name, start_ns, duration_ns)` of every event on the device planes."""
  events = []
  for plane in profile.planes:
    if not plane.name.startswith("/device:"):
      continue
    for line in plane.lines:
      events.extend((e.name, e.start_ns, e.duration_ns) for e in line.events)
  return events


def host_events(profile) -> list:
  events = []
  for plane in profile.planes:
    if plane.name.startswith("/host:CPU"):
      for line in plane.lines:
        events.extend((line.name, e.name, e.duration_ns) for e in line.events)
  return events


def summarize_device(events: list, num_chunks: int, steps: int) -> dict:
  """Copies, kernels, busy time and the top kernels, per chunk and step."""
  by_kind = collections.defaultdict(lambda: [0, 0.0])  # count, ns
  by_name = collections.defaultdict(lambda: [0, 0.0])
  for name, _, duration in events:
    kind = kind_of(name)
    by_kind[kind][0] += 1
    by_kind[kind][1] += duration
    by_name[name[:90]][0] += 1
    by_name[name[:90]][1] += duration
  busy = sum(duration for _, _, duration in events)
  span = (
    max(s + d for _, s, d in events) - min(s for _, s, _ in events)
    if events
    else 0
  )
  kernels = sum(
    count
    for kind, (count, _) in by_kind.items()
    if not kind.startswith("memcpy")
  )
  total_steps = num_chunks * steps
  return {
    "chunks": num_chunks,
    "steps_per_chunk": steps,
    "copies_dtoh_per_chunk": by_kind["memcpy DtoH"][0] / num_chunks,
    "copies_htod_per_chunk": by_kind["memcpy HtoD"][0] / num_chunks,
    "kernels_per_step": kernels / total_steps,
    "device_busy_ms_per_step": busy / 1e6 / total_steps,
    "device_span_ms_per_step": span / 1e6 / total_steps,
    "by_kind_ms_per_step": {
      k: v[1] / 1e6 / total_steps
      for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1][1])
    },
    "by_kind_count_per_step": {
      k: v[0] / total_steps for k, v in by_kind.items()
    },
    "top_kernels": [
      {
        "name": name,
        "per_step": count / total_steps,
        "ms_per_step": ns / 1e6 / total_steps,
      }
      for name, (count, ns) in sorted(
        by_name.items(), key=lambda kv: -kv[1][1]
      )[:15]
    ],
  }


def launches_and_fetches(events: list, num_chunks: int) -> dict:
  """Per chunk, from the host timeline: executables launched (1 = the
  chunk's `lax.scan` runs as one program) and arrays fetched to the host."""
  count = lambda pattern: sum(
    1 for _, name, _ in events if re.search(pattern, name)
  )
  return {
    "executable_launches_per_chunk": count(r"ExecuteHelper") / num_chunks,
    "host_fetches_per_chunk": count(r"copy_to_host_async") / num_chunks,
  }


def summarize_host(events: list, num_chunks: int, steps: int) -> dict:
  """On a CPU backend: the busiest thunks of XLA:CPU's executor."""
  thunks = collections.defaultdict(lambda: [0, 0.0])
  for line, name, duration in events:
    if (
      ("XLA" in line or "Eigen" in line)
      and not name.startswith("end:")
      and not re.match(r"ThreadpoolListener|ThunkExecutor", name)
    ):
      thunks[name[:90]][0] += 1
      thunks[name[:90]][1] += duration
  total_steps = num_chunks * steps
  return {
    "chunks": num_chunks,
    "steps_per_chunk": steps,
    "top_thunks": [
      {
        "name": name,
        "per_step": count / total_steps,
        "ms_per_step": ns / 1e6 / total_steps,
      }
      for name, (count, ns) in sorted(thunks.items(), key=lambda kv: -kv[1][1])[
        :15
      ]
    ],
  }


def profile_at(args, chunk_steps: int) -> dict:
  """The trace summary of `args.chunks` chunks of `chunk_steps` steps."""
  config = make_config(
    args.experiment,
    args.preset,
    dict(args.set),
    chunk_steps,
    args.num_seeds,
    args.data_dir,
  )
  experiment = experiment_module(args.experiment).make_experiment(config)
  grid = run_axes.run_grid(config, experiment.swept_hparams)
  first_call, program = compile_side(experiment, grid)
  state = run_chunks(
    program.train_chunk, initial_state(experiment, program, grid), 1
  )
  with tempfile.TemporaryDirectory() as trace_dir:
    start = time.perf_counter()
    state, path = trace_chunks(
      program.train_chunk, state, args.chunks, trace_dir
    )
    wall = time.perf_counter() - start
    profile = ProfileData.from_file(path)
    events, on_host = device_events(profile), host_events(profile)
    if events:
      summary = summarize_device(events, args.chunks, chunk_steps)
    else:
      summary = summarize_host(on_host, args.chunks, chunk_steps)
    summary.update(launches_and_fetches(on_host, args.chunks))
  summary.update(
    experiment=experiment.name,
    runs=len(grid),
    first_call_s=first_call,
    traced_wall_ms_per_step=1e3 * wall / (args.chunks * chunk_steps),
    device=jax.devices()[0].device_kind,
  )
  return summary


def print_summary(summary: dict) -> None:
  steps = summary["steps_per_chunk"]
  print(
    f"\n{summary['experiment']} | {summary['runs']} runs | chunks of "
    f"{steps} steps | {summary['device']}"
  )
  print(
    f"  wall under the tracer: {summary['traced_wall_ms_per_step']:.3f} ms/step"
  )
  print(
    f"  per chunk: {summary['executable_launches_per_chunk']:.1f} "
    f"executable launch(es), {summary['host_fetches_per_chunk']:.1f} "
    "arrays fetched to the host (the metrics)"
  )
  if "kernels_per_step" in summary:
    print(
      f"  copies per chunk: device-to-host "
      f"{summary['copies_dtoh_per_chunk']:.1f}, host-to-device "
      f"{summary['copies_htod_per_chunk']:.1f}"
    )
    print(
      f"  kernels per step {summary['kernels_per_step']:.1f}; device "
      f"busy {summary['device_busy_ms_per_step']:.3f} ms/step over a "
      f"span of {summary['device_span_ms_per_step']:.3f}"
    )
    print("  device time by kind, ms/step (launches/step):")
    for kind, ms in summary["by_kind_ms_per_step"].items():
      print(
        f"    {kind:34s} {ms:8.4f}  "
        f"({summary['by_kind_count_per_step'][kind]:.1f})"
      )
    top = summary["top_kernels"]
  else:
    top = summary["top_thunks"]
  print("  top kernels/thunks, ms/step (calls/step):")
  for entry in top[:12]:
    print(
      f"    {entry['ms_per_step']:8.4f} ({entry['per_step']:5.1f})  "
      f"{entry['name']}"
    )


def parse_args(argv):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--experiment", default="copy_task")
  parser.add_argument("--preset", default="")
  parser.add_argument("--num_seeds", type=int, default=1)
  parser.add_argument(
    "--chunk_steps",
    type=int,
    default=50,
    help="traced at this chunk length and at twice it",
  )
  parser.add_argument("--chunks", type=int, default=2)
  parser.add_argument(
    "--set",
    nargs="*",
    default=[],
    type=lambda kv: (kv.split("=", 1)[0], _literal(kv.split("=", 1)[1])),
    help="config overrides FIELD=VALUE",
  )
  parser.add_argument(
    "--matmul_precision", default=None, choices=sorted(linalg.MATMUL_PRECISIONS)
  )
  parser.add_argument("--data_dir", default=None)
  parser.add_argument("--json", default=None)
  return parser.parse_args(argv)


def _literal(text: str):
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def main(argv=None) -> int:
  args = parse_args(argv)
  precision = (
    jax.default_matmul_precision(args.matmul_precision)
    if args.matmul_precision
    else contextlib.nullcontext()
  )
  with precision:
    short, long = (
      profile_at(args, steps)
      for steps in (args.chunk_steps, 2 * args.chunk_steps)
    )
  for summary in (short, long):
    print_summary(summary)
  growth = lambda field: (
    (long[field] - short[field]) / args.chunk_steps
    if field in short
    else float("nan")
  )
  extra = {
    "launches": growth("executable_launches_per_chunk"),
    "fetches": growth("host_fetches_per_chunk"),
    "dtoh": growth("copies_dtoh_per_chunk"),
    "htod": growth("copies_htod_per_chunk"),
  }
  print(
    "\nper step, from the two chunk lengths (0 = nothing per step, no "
    f"host synchronisation inside the chunk): executable launches "
    f"{extra['launches']:.3f}, host fetches {extra['fetches']:.3f}, "
    f"device-to-host copies {extra['dtoh']:.3f}, host-to-device copies "
    f"{extra['htod']:.3f} (nan: no device timeline, as on a CPU)"
  )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(
        {"short": short, "long": long, "per_step_growth": extra}, f, indent=1
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
