#!/usr/bin/env python
"""Online recurrent RL: environment steps per second, ours beside RTRRL's
public code, and every estimator of the RL experiment.

Issue 50, item 7. Three parts (`--parts`, default all):

* `side_by_side`: RTRRL's agent (CT-RNN 32 units, batch 1) with RFLO
  (feedback alignment) and with exact RTRL, on CartPole-v1 and
  MemoryChain-bsuite (memory_length 4): ours (the RL experiment's own
  program, `python -m experiments.rl`'s, which calls
  `rtrl.rl.online_actor_critic`; one run, and 5 seeds vmapped) beside their
  `rtrrl.py` (Lemmel & Grosu, AAAI 2025; FranzKnut/RTRRL-AAAI25) run with
  its defaults in its own venv. Without that venv, their published figure
  (7.49 ms per step for RFLO at batch 1 on an RTX 2070) stands in, and the
  tables say so.
* `estimators`: every method of `rtrrl_estimators` (exact RTRL, RFLO,
  r-OK ranks 1/4/16, r-B-OK 4, KF-RTRL, SnAp-1 and SnAp-2 on a 10%-dense
  recurrence, SK-RTRL 4, UORO, online TBPTT-16, the LRU with its exact
  RTRL, the linear agent) at CT-RNN-32 batch 1, one run and 5 seeds
  vmapped.

Their side: `bash scripts/peers/setup_rtrrl.sh` copies their code to
/work/peers/rtrrl/src and builds its venv (and a popjym import stand-in,
see there). This file then runs under their venv as the driver
(`--peer_driver`): it executes their unmodified `rtrrl.py` as `__main__`
with `tqdm.trange` replaced by a timer, so that their own training loop
(each iteration one `lax.scan` over `--steps` environment steps, then its
host-side logging) runs blocks of iterations when this process asks and
reports their wall and CPU time. Their flags: `--env_name`,
`--env_kwargs` (MemoryChain's memory_length), `--gradient_mode`,
`--seed 1`, `--eval_every 0` (no evaluation pass), everything else their
default (32 units, batch 1, 1000 steps per iteration).

Timing: each program is compiled and run once untimed; then `--repeats`
rounds run, in turn, ours single, ours vmapped and theirs (interleaved, so
that all see the same load: the machine is shared); each timed call
advances about `--target_seconds` of work (whole chunks of 1000 steps on
both sides). Reported: min and median over rounds of wall time per
environment step and environment steps per second (wall and process CPU),
and ours / theirs.

  bash scripts/peers/setup_rtrrl.sh                      # their venv, once
  .venv/bin/python -m scripts.bench_rl   # 20 min at load ~15 (6 min CPU)
  .venv/bin/python -m scripts.bench_rl --parts side_by_side --repeats 7
  .venv/bin/python -m scripts.bench_rl --parts estimators \
      --methods RTRL,RFLO,4-OK --json /tmp/bench_rl.json
"""

# This file also runs under RTRRL's venv as the peer driver, where the
# project is not importable: the project's imports sit in the functions.
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import sys
import time

PUBLISHED_MS_PER_STEP = 7.49  # RTRRL appendix, "Timing comparison"
PUBLISHED_SETUP = (
  "RTRRL-RFLO, CT-RNN 32 units, batch 1, 5000 steps, RTX 2070 (their appendix)"
)
PEER_ROOT = "/work/peers/rtrrl"
THEIR_STEPS = 1000  # their default `steps` per loop iteration
OUR_CHUNK = 1000  # our program's chunk, the same number of steps
REPORT = "@@BENCH_RL "  # the driver's report lines on stdout

# Tasks: our experiment's fields and their `--config_path` YAML (their
# parser takes no dict on the command line; MemoryChain's memory_length is
# an `env_kwargs` entry).
TASKS = {
  "CartPole-v1": (
    dict(env="CartPole-v1"),
    'env_params:\n  env_name: "CartPole-v1"\n',
  ),
  "MemoryChain-4": (
    dict(env="MemoryChain-bsuite", memory_length=4),
    'env_params:\n  env_name: "MemoryChain-bsuite"\n  env_kwargs:\n'
    "    memory_length: 4\n",
  ),
}
# Their gradient modes and our estimators (RFLO with feedback alignment on
# both sides: ours by the experiment's 'auto', theirs by default).
MODES = {
  "rflo": (dict(estimator="rflo"), ["--gradient_mode", "rflo"]),
  "rtrl": (dict(estimator="rtrl"), ["--gradient_mode", "rtrl"]),
}
# Their loop ends when this driver says so; no evaluation pass.
THEIR_FIXED_FLAGS = [
  "--seed",
  "1",
  "--eval_every",
  "0",
  "--episodes",
  "10000000",
]


# -- their side: the driver (runs under their venv) ---------------------------


class _TimedRange:
  """Stands in for `tqdm.trange` in their loop: iterations `0..warmup-1`
  run at once (compilation), then blocks of `k` iterations each when a
  line `k` arrives on stdin (`stop` ends their loop), each block's wall
  and process CPU time reported on stdout.

  Two warm-up iterations: on MemoryChain their second `lax.scan` call
  traces and compiles again (the carry's types after the first iteration
  differ from the initial ones; CartPole's do not)."""

  warmup = 2

  def __init__(self, *args, **kwargs):
    del args, kwargs

  def __iter__(self):
    walls = [time.perf_counter()]
    for i in range(self.warmup):
      yield i
      walls.append(time.perf_counter())
    _report(
      "ready",
      warmup_wall_s=[b - a for a, b in zip(walls, walls[1:])],
    )
    i = self.warmup
    for line in sys.stdin:
      if line.strip() == "stop":
        return
      iterations = int(line)
      wall, cpu = time.perf_counter(), time.process_time()
      for _ in range(iterations):
        yield i
        i += 1
      _report(
        "block",
        iterations=iterations,
        wall_s=time.perf_counter() - wall,
        cpu_s=time.process_time() - cpu,
      )

  def set_description(self, *args, **kwargs):
    del args, kwargs

  def write(self, *args, **kwargs):
    del args, kwargs


def _report(kind: str, **fields) -> None:
  print(REPORT + json.dumps({"kind": kind, **fields}), flush=True)


def peer_driver(their_args: list[str]) -> int:
  """Runs their `rtrrl.py` (cwd: their src) with `their_args`, its loop
  timed by `_TimedRange`."""
  import runpy  # pylint: disable=import-outside-toplevel

  import jax  # pylint: disable=import-outside-toplevel
  import tqdm  # pylint: disable=import-outside-toplevel

  _report("versions", jax=jax.__version__, python=platform.python_version())
  tqdm.trange = _TimedRange
  sys.argv = ["rtrrl.py", *their_args]
  runpy.run_path("rtrrl.py", run_name="__main__")
  _report("done")
  return 0


class TheirRun:
  """Their `rtrrl.py` in a subprocess of their venv, driven by blocks."""

  def __init__(self, peer_root: str, flags: list[str], log_path: str):
    env = dict(os.environ)
    env.update(
      JAX_PLATFORMS="cpu",
      PYTHONPATH=f"{peer_root}/src:{peer_root}/shim",
    )
    self.log = open(log_path, "w")  # noqa: SIM115 (closed by close())
    self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
      [
        f"{peer_root}/venv/bin/python",
        os.path.abspath(__file__),
        "--peer_driver",
        "--",
        *flags,
      ],
      cwd=f"{peer_root}/src",
      env=env,
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=self.log,
      text=True,
    )
    self.log_path = log_path
    self.versions: dict = {}
    self.first: dict = {}

  def _next(self, kind: str) -> dict:
    assert self.proc.stdout is not None
    for line in self.proc.stdout:
      if not line.startswith(REPORT):
        self.log.write(line)
        continue
      fields = json.loads(line[len(REPORT) :])
      if fields["kind"] == "versions":
        self.versions = fields
      elif fields["kind"] == kind:
        return fields
    self.log.flush()
    with open(self.log_path) as f:
      tail = f.read()[-3000:]
    raise RuntimeError(f"their rtrrl.py ended before '{kind}':\n{tail}")

  def wait_ready(self) -> dict:
    self.first = self._next("ready")
    return self.first

  def block(self, iterations: int) -> tuple[float, float]:
    """`(wall, CPU)` seconds of `iterations` loop iterations."""
    assert self.proc.stdin is not None
    self.proc.stdin.write(f"{iterations}\n")
    self.proc.stdin.flush()
    fields = self._next("block")
    return fields["wall_s"], fields["cpu_s"]

  def close(self) -> None:
    if self.proc.poll() is None:
      assert self.proc.stdin is not None
      self.proc.stdin.write("stop\n")
      self.proc.stdin.close()
      try:
        self.proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    self.log.close()


def peer_ready(peer_root: str) -> bool:
  return os.path.isfile(f"{peer_root}/venv/bin/python") and os.path.isfile(
    f"{peer_root}/src/rtrrl.py"
  )


# -- our side -------------------------------------------------------------------


class OurRun:
  """The RL experiment's compiled program (`experiments.rl`'s, one run or
  `num_seeds` vmapped) and its state, advanced chunk by chunk with the
  metrics fetched as the run loop does."""

  def __init__(self, fields: dict, num_seeds: int):
    from experiments.loop import run_axes  # pylint: disable=import-outside-toplevel
    from scripts.benchlib import programs  # pylint: disable=import-outside-toplevel

    config = programs.make_config("rl", "", fields, OUR_CHUNK, num_seeds, None)
    experiment = programs.experiment_module("rl").make_experiment(config)
    grid = run_axes.run_grid(config, experiment.swept_hparams)
    self.name = experiment.name
    self.runs = len(grid)
    self.first_s, self.program = programs.compile_side(experiment, grid)
    self.state = programs.initial_state(experiment, self.program, grid)
    self._run_chunks = programs.run_chunks

  def block(self, chunks: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    self.state = self._run_chunks(self.program.train_chunk, self.state, chunks)
    return time.perf_counter() - wall, time.process_time() - cpu


# -- timing ---------------------------------------------------------------------


def calibrate(side, target_s: float) -> int:
  """Warm-up call of one chunk (untimed), then the chunks per timed call
  that take about `target_s`."""
  wall, _ = side.block(1)
  return max(1, min(200, round(target_s / max(wall, 1e-6))))


def time_interleaved(sides: dict, repeats: int, target_s: float) -> dict:
  """`sides`: name -> (runner, environment steps per chunk). Returns name
  -> list of `(wall, CPU)` seconds per environment step, one per round."""
  chunks = {
    name: calibrate(runner, target_s) for name, (runner, _) in sides.items()
  }
  samples: dict[str, list] = {name: [] for name in sides}
  for _ in range(repeats):
    for name, (runner, steps_per_chunk) in sides.items():
      wall, cpu = runner.block(chunks[name])
      steps = chunks[name] * steps_per_chunk
      samples[name].append((wall / steps, cpu / steps))
  return samples


def stats(samples: list) -> dict:
  walls = [w for w, _ in samples]
  cpus = [c for _, c in samples]
  return {
    "us_per_step_min": 1e6 * min(walls),
    "us_per_step_median": 1e6 * statistics.median(walls),
    "steps_per_s_min_time": 1.0 / min(walls),
    "steps_per_s_median": 1.0 / statistics.median(walls),
    "steps_per_s_cpu_median": 1.0 / statistics.median(cpus),
    "rounds": len(samples),
  }


def load() -> str:
  try:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
  except OSError:
    return "load average n/a"


# -- the parts ------------------------------------------------------------------


class Bench:
  """Builds each of our programs once (parts share them) and times."""

  def __init__(self, args):
    self.args = args
    self.ours: dict = {}
    self.failed: dict = {}
    self.their_versions: dict = {}

  def build(self, specs: list[tuple[dict, int]]) -> None:
    """Compiles our programs for `(fields, num_seeds)` not built yet,
    `--build_threads` at a time (XLA compiles outside the GIL); a failure
    is kept in `self.failed`."""
    todo = [s for s in specs if _key(*s) not in self.ours]

    def one(spec):
      try:
        return spec, OurRun(*spec)
      except Exception as err:  # pylint: disable=broad-except
        return spec, f"{type(err).__name__}: {err}"

    with concurrent.futures.ThreadPoolExecutor(self.args.build_threads) as ex:
      for spec, run in ex.map(one, todo):
        if isinstance(run, str):
          self.failed[_key(*spec)] = run
        else:
          self.ours[_key(*spec)] = run

  def our_run(self, fields: dict, num_seeds: int) -> OurRun:
    self.build([(fields, num_seeds)])
    key = _key(fields, num_seeds)
    if key in self.failed:
      raise RuntimeError(self.failed[key])
    return self.ours[key]

  def side_by_side(self) -> list[dict]:
    args, rows = self.args, []
    theirs_here = peer_ready(args.peer_root)
    if not theirs_here:
      print(
        f"their venv is not at {args.peer_root} (bash "
        "scripts/peers/setup_rtrrl.sh): comparing with their PUBLISHED "
        f"{PUBLISHED_MS_PER_STEP} ms/step ({PUBLISHED_SETUP}), not a "
        "measurement on this machine",
        flush=True,
      )
    for task in args.tasks:
      for mode in args.modes:
        rows.append(self._pair(task, mode, theirs_here))
    return rows

  def _start_theirs(self, task: str, mode: str) -> TheirRun:
    args = self.args
    config_path = f"{args.log_dir}/rtrrl_{task}.yml"
    with open(config_path, "w") as f:
      f.write(TASKS[task][1])
    flags = [
      "--config_path",
      config_path,
      *MODES[mode][1],
      *THEIR_FIXED_FLAGS,
      "--steps",
      str(THEIR_STEPS),
    ]
    return TheirRun(
      args.peer_root, flags, f"{args.log_dir}/rtrrl_{task}_{mode}.log"
    )

  def _pair(self, task: str, mode: str, theirs_here: bool) -> dict:
    args = self.args
    fields = {**TASKS[task][0], **MODES[mode][0]}
    # Theirs starts first: it compiles while ours compiles.
    theirs = self._start_theirs(task, mode) if theirs_here else None
    try:
      self.build([(fields, 1), (fields, args.num_seeds)])
      sides = {
        "ours": (self.our_run(fields, 1), OUR_CHUNK),
        "ours_vmapped": (
          self.our_run(fields, args.num_seeds),
          OUR_CHUNK * args.num_seeds,
        ),
      }
      if theirs is not None:
        theirs.wait_ready()
        sides["theirs"] = (theirs, THEIR_STEPS)
      samples = time_interleaved(sides, args.repeats, args.target_seconds)
    finally:
      if theirs is not None:
        theirs.close()
        self.their_versions = theirs.versions
    row = {
      "task": task,
      "method": mode,
      "ours_first_call_s": sides["ours"][0].first_s,
      **{side: stats(s) for side, s in samples.items()},
    }
    if theirs is not None:
      row["theirs_warmup_iterations_s"] = theirs.first["warmup_wall_s"]
    print_pair(row)
    return row

  def estimators(self) -> list[dict]:
    from experiments.reproduce.rtrrl_paper import ESTIMATOR_METHODS  # pylint: disable=import-outside-toplevel

    args, rows, sides = self.args, [], {}
    task_fields = TASKS[args.estimators_task][0]
    specs = {
      label: {**task_fields, **ESTIMATOR_METHODS[label]}
      for label in args.methods
    }
    start = time.perf_counter()
    self.build(
      [(f, seeds) for f in specs.values() for seeds in (1, args.num_seeds)]
    )
    print(
      f"  built {2 * len(specs)} programs in "
      f"{time.perf_counter() - start:.0f} s; {load()}",
      flush=True,
    )
    for label, fields in specs.items():
      try:
        sides[label] = (self.our_run(fields, 1), OUR_CHUNK)
        sides[label + "/vmapped"] = (
          self.our_run(fields, args.num_seeds),
          OUR_CHUNK * args.num_seeds,
        )
      except RuntimeError as err:
        rows.append({"method": label, "error": str(err)})
        print(f"  {label}: failed to build: {str(err)[:300]}")
        sides.pop(label, None)
    samples = time_interleaved(sides, args.repeats, args.target_seconds)
    for label in args.methods:
      if label not in sides:
        continue
      rows.append(
        {
          "method": label,
          "fields": ESTIMATOR_METHODS[label],
          "single": stats(samples[label]),
          "vmapped": stats(samples[label + "/vmapped"]),
          "first_call_s": sides[label][0].first_s,
          "first_call_s_vmapped": sides[label + "/vmapped"][0].first_s,
        }
      )
    print_estimators(rows, args)
    return rows


def _key(fields: dict, num_seeds: int) -> tuple[str, int]:
  return json.dumps(fields, sort_keys=True), num_seeds


# -- reports --------------------------------------------------------------------


def print_pair(row: dict) -> None:
  ours, vm = row["ours"], row["ours_vmapped"]
  line = (
    f"  {row['task']} {row['method']}: ours {ours['us_per_step_min']:.1f} / "
    f"{ours['us_per_step_median']:.1f} us/step (min/median), vmapped "
    f"{vm['steps_per_s_median']:.0f} env steps/s"
  )
  if "theirs" in row:
    th = row["theirs"]
    line += (
      f"; theirs {th['us_per_step_min']:.1f} / {th['us_per_step_median']:.1f}"
      f" us/step; ours/theirs {ratio(row, 'min'):.2f} (min) "
      f"{ratio(row, 'median'):.2f} (median)"
    )
  print(line + f"; {load()}", flush=True)


def ratio(row: dict, which: str) -> float:
  """Our steps/s over theirs (> 1: ours faster), by min or median time."""
  return (
    row["theirs"][f"us_per_step_{which}"] / row["ours"][f"us_per_step_{which}"]
  )


def projected_run_ms(
  first_s: float, first_steps: int, us_per_step: float, steps: int = 5000
) -> float:
  """ms per step of a `steps`-step run: its first `first_steps` steps (with
  the compilation) took `first_s`, the rest `us_per_step` each; their
  appendix's protocol for 7.49 ms is a 5000-step run."""
  return 1e3 * (first_s + (steps - first_steps) * us_per_step * 1e-6) / steps


def print_side_by_side(rows: list[dict], args) -> None:
  measured = any("theirs" in r for r in rows)
  print(
    "\n### Ours beside RTRRL's code: CT-RNN-32, batch 1, environment "
    f"steps/s: median of {args.repeats} interleaved rounds (the fastest "
    "round in brackets; CPU: by process CPU time)\n"
  )
  print(
    "| task | method | ours, 1 run | ours, µs/step | ours, CPU | ours, "
    f"{args.num_seeds} runs vmapped | theirs, 1 run | theirs, µs/step | "
    "theirs, CPU | ours / theirs | ours / theirs, CPU | 7.49 ms / ours |"
  )
  print("|---|---|---|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    o, v = r["ours"], r["ours_vmapped"]
    th = r.get("theirs")
    their_cells = (
      f"{rate(th)} | {th['us_per_step_median']:.1f} | "
      f"{th['steps_per_s_cpu_median']:,.0f} | {ratio(r, 'median'):.2f} "
      f"({ratio(r, 'min'):.2f}) | "
      f"{o['steps_per_s_cpu_median'] / th['steps_per_s_cpu_median']:.2f}"
      if th
      else "- | - | - | - | -"
    )
    print(
      f"| {r['task']} | {r['method']} | {rate(o)} | "
      f"{o['us_per_step_median']:.1f} | {o['steps_per_s_cpu_median']:,.0f} | "
      f"{rate(v)} | {their_cells} | "
      f"{1e3 * PUBLISHED_MS_PER_STEP / o['us_per_step_median']:,.0f}x |"
    )
  if not measured:
    print(
      f"\ntheirs: NOT measured here; the published {PUBLISHED_MS_PER_STEP} "
      f"ms/step ({PUBLISHED_SETUP}) is the only reference."
    )
    return
  print(
    "\nA 5000-step run from the training loop's start, compilation "
    "included (the appendix's protocol for 7.49 ms/step), ms per step:"
  )
  for r in rows:
    if "theirs" not in r:
      continue
    ours = projected_run_ms(
      r["ours_first_call_s"], OUR_CHUNK, r["ours"]["us_per_step_median"]
    )
    warmup = r["theirs_warmup_iterations_s"]
    theirs = projected_run_ms(
      sum(warmup), len(warmup) * THEIR_STEPS, r["theirs"]["us_per_step_median"]
    )
    print(
      f"  {r['task']} {r['method']}: ours {ours:.2f} (first call "
      f"{r['ours_first_call_s']:.1f} s), theirs {theirs:.2f} (first "
      f"iterations {', '.join(f'{w:.1f}' for w in warmup)} s)"
    )


def rate(side: dict) -> str:
  """Median steps/s, the fastest round's in brackets."""
  return (
    f"{side['steps_per_s_median']:,.0f} ({side['steps_per_s_min_time']:,.0f})"
  )


def print_estimators(rows: list[dict], args) -> None:
  print(
    f"\n### Every estimator, CT-RNN-32 (LRU-32 for LRU-RTRL), batch 1, "
    f"{args.estimators_task}: median of {args.repeats} interleaved rounds "
    "(min time in brackets)\n"
  )
  print(
    "| method | 1 run: env steps/s | µs/step | CPU µs/step | "
    f"{args.num_seeds} runs vmapped: env steps/s | µs per vmapped step | "
    "CPU µs per vmapped step | vmapped / single throughput | first call s "
    "(1 / vmapped) |"
  )
  print("|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    if "error" in r:
      print(f"| {r['method']} | failed: {r['error'][:120]} | | | | | | | |")
      continue
    s, v = r["single"], r["vmapped"]
    per_vmapped_step = v["us_per_step_median"] * args.num_seeds
    print(
      f"| {r['method']} | {rate(s)} | {s['us_per_step_median']:.1f} | "
      f"{1e6 / s['steps_per_s_cpu_median']:.1f} | {rate(v)} | "
      f"{per_vmapped_step:.1f} | "
      f"{1e6 * args.num_seeds / v['steps_per_s_cpu_median']:.1f} | "
      f"{v['steps_per_s_median'] / s['steps_per_s_median']:.2f}x | "
      f"{r['first_call_s']:.0f} / {r['first_call_s_vmapped']:.0f} |"
    )


def host_info(args) -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  import jaxlib  # pylint: disable=import-outside-toplevel

  def command(*argv):
    try:
      return subprocess.run(argv, capture_output=True, text=True).stdout
    except OSError:
      return ""

  model = [
    line.split(":", 1)[1].strip()
    for line in command("lscpu").splitlines()
    if line.startswith("Model name")
  ]
  their_commit = ""
  if os.path.isfile(f"{args.peer_root}/src/COMMIT"):
    with open(f"{args.peer_root}/src/COMMIT") as f:
      their_commit = f.read().strip()
  return {
    "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    "cpu": model[0] if model else platform.processor(),
    "cpus": os.cpu_count(),
    "uptime": command("uptime").strip(),
    "python": platform.python_version(),
    "jax": jax.__version__,
    "jaxlib": jaxlib.__version__,
    "ours_commit": command("git", "rev-parse", "--short", "HEAD").strip(),
    "their_commit": their_commit,
  }


# -- main -----------------------------------------------------------------------

PARTS = ("side_by_side", "estimators")


def parse_args(argv):
  from experiments.reproduce.rtrrl_paper import ESTIMATOR_METHODS  # pylint: disable=import-outside-toplevel

  methods = [m for m in ESTIMATOR_METHODS if m != "PPO"]
  listed = lambda s: [v for v in s.split(",") if v]
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--parts", type=listed, default=list(PARTS))
  parser.add_argument("--tasks", type=listed, default=list(TASKS))
  parser.add_argument("--modes", type=listed, default=list(MODES))
  parser.add_argument(
    "--methods",
    type=listed,
    default=methods,
    help=f"estimators part, labels of rtrrl_estimators: {','.join(methods)}",
  )
  parser.add_argument("--estimators_task", default="MemoryChain-4")
  parser.add_argument("--num_seeds", type=int, default=5)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument(
    "--target_seconds",
    type=float,
    default=0.3,
    help="wall time of one timed call (whole chunks of 1000 steps)",
  )
  parser.add_argument(
    "--build_threads",
    type=int,
    default=2,
    help="our programs compiled at once (before any timing)",
  )
  parser.add_argument("--peer_root", default=PEER_ROOT)
  parser.add_argument("--log_dir", default="/tmp", help="their runs' logs")
  parser.add_argument("--json", default=None, help="write the results here")
  args = parser.parse_args(argv)
  for name, value, known in (
    ("--parts", args.parts, PARTS),
    ("--tasks", args.tasks, TASKS),
    ("--modes", args.modes, MODES),
    ("--methods", args.methods, methods),
  ):
    unknown = [v for v in value if v not in known]
    if unknown:
      parser.error(f"{name}: unknown {unknown}; known: {','.join(known)}")
  return args


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  if argv[:1] == ["--peer_driver"]:
    return peer_driver(argv[2:] if argv[1:2] == ["--"] else argv[1:])
  args = parse_args(argv)
  start = time.perf_counter()
  info = host_info(args)
  print(
    f"{info['date']} | {info['cpu']} ({info['cpus']} CPUs, shared) | "
    f"{info['uptime']} | jax {info['jax']} | ours {info['ours_commit']} | "
    f"RTRRL-AAAI25 {info['their_commit'] or 'not set up'}",
    flush=True,
  )
  bench = Bench(args)
  results: dict = {"host": info}
  if "side_by_side" in args.parts:
    results["side_by_side"] = bench.side_by_side()
    print_side_by_side(results["side_by_side"], args)
  if "estimators" in args.parts:
    results["estimators"] = bench.estimators()
  info["their_versions"] = bench.their_versions
  info["uptime_end"] = subprocess.run(
    ["uptime"], capture_output=True, text=True
  ).stdout.strip()
  print(
    f"\ntotal {time.perf_counter() - start:.0f} s; at the end: "
    f"{info['uptime_end']}; theirs ran jax "
    f"{bench.their_versions.get('jax', '-')}"
  )
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
