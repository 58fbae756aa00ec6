"""What a reproduction target costs, before it runs (`reproduce.py --plan`).

In plan mode (`common.planning()`, passed to the target as its `mode`) a
target runs as usual but trains nothing: every program
it would run (a curve: all its seeds and learning rates in one vmapped
program; or one gradient-cosine run) is measured instead, by a short run of
that very program in a child process: a few chunks at the target's own
sizes, timed after the first chunk (so compilation is excluded), the child's
peak resident memory read from the operating system. The plan row is the
program's run-steps (`num_steps` x runs), its time per step and the expected
time of the whole program on this machine. Nothing of the target's output is
kept: `scripts/reproduce.py --plan` runs it in a temporary workdir.

Not measured: the periodic evaluations (char-PTB's whole-split valid BPC
every `eval_every` steps, the classifiers' epoch-end test pass), which a
full run adds on top. A program whose short run runs out of memory (the
operating system kills it, or XLA refuses an allocation: exact RTRL at
n = 512, a 20-run program of batch 64 at n = 256, the RLS sweeps' 20 runs
of the mini-VGG or the LSTM) gets a row that says so, with the memory it
had reached, and the target's other programs are still measured; any
other error in the child is a bug and raises.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import os
import subprocess
import sys
import tempfile
from typing import Any

from experiments.loop import config_files
from experiments.loop import run_axes

# Chunks timed after the first (compiling) one, and their length.
MEASURED_CHUNKS = 2
MEASURE_CHUNK_STEPS = 20
# Training examples of the full datasets (a classifier's steps per epoch).
TRAIN_EXAMPLES = {"mnist": 60_000, "cifar10": 50_000, "imdb": 25_000}


@dataclasses.dataclass
class ProgramPlan:
  """One program of a target: what it runs and what it costs here."""

  label: str
  experiment: str
  runs: int
  num_steps: int
  seconds_per_step: float  # the whole program's step (all its runs);
  # nan where the short run was killed
  peak_memory_mib: float  # the measuring process's peak RSS
  note: str = ""  # why it was not measured, if it was not

  @property
  def measured(self) -> bool:
    return math.isfinite(self.seconds_per_step)

  @property
  def run_steps(self) -> int:
    return self.runs * self.num_steps

  @property
  def expected_seconds(self) -> float:
    return self.num_steps * self.seconds_per_step


def duration(seconds: float) -> str:
  """`seconds` as minutes, hours or days, whichever reads best."""
  if not math.isfinite(seconds):
    return "not measured"
  if seconds < 3600:
    return f"{seconds / 60:.1f} min"
  if seconds < 3 * 86400:
    return f"{seconds / 3600:.1f} h"
  return f"{seconds / 86400:.1f} d"


def _defaults(experiment: str):
  """`configs/<experiment>.py`'s config; empty for a program that has no
  config file and whose config is complete (`online.suite_runs`)."""
  try:
    return config_files.load_config(experiment)
  except FileNotFoundError:
    import ml_collections  # pylint: disable=g-import-not-at-top

    return ml_collections.ConfigDict()


def _short_config(experiment: str, config) -> tuple[Any, int, int]:
  """`(config for a few measured chunks, chunks it runs, steps per chunk)`."""
  short = _defaults(experiment)
  short.update(config.to_dict())
  if experiment in TRAIN_EXAMPLES:  # Epochs of a data subset.
    steps = 10
    short.train_limit = short.batch_size * steps
    # The epoch-end test pass is not measured (module docstring); over the
    # full test set it would make a mini-VGG's plan take most of an hour.
    short.test_limit = short.batch_size
    short.epochs = 1 + MEASURED_CHUNKS
    return short, short.epochs, steps
  # Short chunks keep a paper-scale measurement to minutes; TBPTT's chunk
  # must hold whole windows.
  chunk = MEASURE_CHUNK_STEPS
  if short.get("estimator") == "tbptt":
    chunk = short.truncation * max(1, MEASURE_CHUNK_STEPS // short.truncation)
  short.chunk_steps = chunk
  short.num_steps = chunk * (1 + MEASURED_CHUNKS)
  if "log_every" in short:
    short.log_every = chunk  # A record (its steps/s) per chunk.
  if "checkpoint_every" in short:
    # Only after the measured chunks: a real run checkpoints every
    # thousands of steps, so a save per short chunk would inflate its cost.
    short.checkpoint_every = short.num_steps
  if "eval_every" in short:
    short.eval_every = 10**9 // chunk * chunk  # Not within the short run.
  if "checkpoint_dir" in short:
    short.checkpoint_dir = ""  # A fresh network costs the same.
    if short.get("task") == "copy" and not short.sequence_length:
      # The checkpoint's curriculum length (0) needs the checkpoint; a
      # step's cost does not depend on it.
      short.sequence_length = 10
  return short, 1 + MEASURED_CHUNKS, chunk


def _full_steps(experiment: str, config) -> int:
  if experiment in TRAIN_EXAMPLES:
    examples = config.train_limit or TRAIN_EXAMPLES[experiment]
    return config.epochs * math.ceil(examples / config.batch_size)
  return config.num_steps


def _child_code(experiment: str, config_json: str, workdir: str) -> str:
  return (
    "import json, time, importlib, ml_collections\n"
    f"module = importlib.import_module('experiments.{experiment}')\n"
    f"config = ml_collections.ConfigDict(json.loads({config_json!r}))\n"
    "start = time.perf_counter()\n"
    f"module.train(config, {workdir!r})\n"
    "print('PLAN_WALL', time.perf_counter() - start)\n"
  )


class ChildKilled(RuntimeError):
  """The measuring child ran out of this machine's memory: the operating
  system killed it (signal 9 from the OOM killer), or XLA refused an
  allocation (RESOURCE_EXHAUSTED)."""

  def __init__(self, reason: str, peak_memory_mib: float):
    super().__init__(f"{reason} at {peak_memory_mib:,.0f} MiB")
    self.peak_memory_mib = peak_memory_mib


# What XLA prints when an allocation does not fit (a Python error in the
# child, but a limit of the machine, not a bug).
XLA_OUT_OF_MEMORY = "RESOURCE_EXHAUSTED: Out of memory"


def _run_child(
  experiment: str, config, workdir: str
) -> tuple[list, float, float]:
  """Runs `config` in a child; returns (records, wall seconds, peak MiB).

  Raises:
    ChildKilled: a signal ended the child (the kernel's OOM killer sends 9).
    RuntimeError: the child failed otherwise (its output's tail included).
  """
  code = _child_code(experiment, json.dumps(config.to_dict()), workdir)
  repo = config_files.REPO_ROOT
  env = {
    **os.environ,
    "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", ""),
  }
  process = subprocess.Popen(
    [sys.executable, "-c", code],
    cwd=repo,
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )
  output = process.stdout.read()
  _, status, usage = os.wait4(process.pid, 0)
  process.returncode = os.waitstatus_to_exitcode(status)
  if process.returncode < 0:
    raise ChildKilled(
      f"killed by signal {-process.returncode}", usage.ru_maxrss / 1024
    )
  if process.returncode and XLA_OUT_OF_MEMORY in output:
    needed = output.split(XLA_OUT_OF_MEMORY, 1)[1].split("\n", 1)[0]
    raise ChildKilled(
      f"XLA out of memory{needed.rstrip('.')}", usage.ru_maxrss / 1024
    )
  if process.returncode:
    raise RuntimeError(f"measuring {experiment} failed:\n{output[-3000:]}")
  wall = float(output.rsplit("PLAN_WALL", 1)[1].split()[0])
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  records = (
    workdir_lib.read_metrics(workdir)
    if os.path.exists(os.path.join(workdir, "metrics.jsonl"))
    else []
  )
  return records, wall, usage.ru_maxrss / 1024  # Linux reports KiB.


# Hyper-parameters that runs may sweep (the plural field holds the list).
SWEPT = ("learning_rate", "ratio", "gradient_scale")


def program_runs(config) -> int:
  """The runs one program trains at once: its seeds x swept values (the run
  loop's run axis), or a tool's `repetitions` (the gradient-cosine runs,
  which have no seed axis)."""
  if "num_seeds" not in config:
    return int(config_files.field_or(config, "repetitions", 1))
  swept = tuple(name for name in SWEPT if name in config)
  return len(run_axes.run_grid(config, swept))


def measure(label: str, experiment: str, config) -> ProgramPlan:
  """Times `config`'s program by a short run; returns its plan."""
  runs = program_runs(config)
  short, chunks, steps_per_chunk = _short_config(experiment, config)
  with tempfile.TemporaryDirectory() as workdir:
    try:
      records, wall, memory = _run_child(experiment, short, workdir)
    except ChildKilled as killed:
      plan = ProgramPlan(
        label,
        experiment,
        runs,
        _full_steps(experiment, config),
        math.nan,
        killed.peak_memory_mib,
        note=f"{killed} (out of memory here?)",
      )
      print(
        f"  planned {label}: {plan.runs} runs x {plan.num_steps:,} "
        f"steps, not measured: {plan.note}",
        flush=True,
      )
      return plan
  rates = [
    r["steps_per_second"]
    for r in records[1:]
    if isinstance(r.get("steps_per_second"), (int, float))
  ]
  if rates:
    seconds_per_step = 1 / (sum(rates) / len(rates))
  else:  # A tool without per-chunk records: whole wall, compile included.
    seconds_per_step = wall / (chunks * steps_per_chunk)
  plan = ProgramPlan(
    label,
    experiment,
    runs,
    _full_steps(experiment, config),
    seconds_per_step,
    memory,
  )
  print(
    f"  planned {label}: {plan.runs} runs x {plan.num_steps:,} steps, "
    f"{plan.seconds_per_step * 1e3:.1f} ms/step, "
    f"{duration(plan.expected_seconds)}, {plan.peak_memory_mib:.0f} MiB, "
    f"short run {wall:.0f} s wall (compile included)",
    flush=True,
  )
  return plan


def wall_time(
  seconds: list[float], reads: list[list[int]], devices: int
) -> float:
  """The wall time of programs taking `seconds` on `devices` devices, one
  program per device at a time, each after the programs it reads
  (`reads[i]`: indices) have ended, the longest ready program first (list
  scheduling, as the launchers start them)."""
  ended: dict[int, float] = {}
  free = [0.0] * max(1, devices)
  waiting = set(range(len(seconds)))
  while waiting:
    ready = [i for i in waiting if all(j in ended for j in reads[i])]
    if not ready:
      raise ValueError(f"programs {sorted(waiting)} read each other")
    i = max(ready, key=lambda k: (seconds[k], -k))
    device_free = heapq.heappop(free)
    start = max([device_free] + [ended[j] for j in reads[i]])
    ended[i] = start + seconds[i]
    heapq.heappush(free, ended[i])
    waiting.remove(i)
  return max(ended.values(), default=0.0)


def table(
  target: str,
  scale: str,
  plans: list[ProgramPlan],
  reads: list[list[int]] | None = None,
  devices: tuple[int, ...] = (),
  device: str = "device",
) -> str:
  """The plan as a Markdown table with a total row, then the target's wall
  time on one `device` (its programs one after another) and on N (one
  program per device, each after the programs it reads): N = one per
  program, and each of `devices`."""
  lines = [
    f"# Plan: {target} --scale {scale} (measured on this machine)",
    "",
    "| program | experiment | runs | steps | run-steps | ms/step "
    "(program) | peak memory MiB | expected time |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for p in plans:
    step = f"{p.seconds_per_step * 1e3:.1f}" if p.measured else "-"
    expected = (
      duration(p.expected_seconds) if p.measured else f"not measured: {p.note}"
    )
    lines.append(
      f"| {p.label} | {p.experiment} | {p.runs} | "
      f"{p.num_steps:,} | {p.run_steps:,} | {step} | "
      f"{p.peak_memory_mib:.0f} | {expected} |"
    )
  seconds = [p.expected_seconds if p.measured else 0.0 for p in plans]
  unmeasured = sum(not p.measured for p in plans)
  more = f" + {unmeasured} program(s) not measured" if unmeasured else ""
  lines.append(
    f"| total | | | | {sum(p.run_steps for p in plans):,} | | "
    f"{max((p.peak_memory_mib for p in plans), default=0):.0f} "
    f"| {duration(sum(seconds))}{more} |"
  )
  reads = reads if reads is not None else [[] for _ in plans]
  counts = sorted({min(n, len(plans)) for n in (len(plans), *devices)} - {0, 1})
  header = [f"wall time on one {device}"] + [
    f"on {n} {device}s" for n in counts
  ]
  times = [sum(seconds)] + [wall_time(seconds, reads, n) for n in counts]
  lines += [
    "",
    "| " + " | ".join(header) + " |",
    "|---" * len(header) + "|",
    "| " + " | ".join(duration(t) + more for t in times) + " |",
    "",
    f"On N {device}s: one program per {device}, each after the programs it "
    f"reads; {len(plans)} is one per program.",
  ]
  return "\n".join(lines)


def write(path_stem: str, text: str, plans: list[ProgramPlan], keys) -> None:
  """The plan as `<stem>.md` (the table) and `<stem>.json` (one object per
  program, by its key: what `--launcher slurm` reads to check that a job's
  time limit covers a checkpoint interval)."""
  with open(path_stem + ".md", "w") as f:
    f.write(text + "\n")
  rows = [
    {
      "key": key,
      **dataclasses.asdict(p),
      "expected_seconds": p.expected_seconds,
    }
    for key, p in zip(keys, plans)
  ]
  with open(path_stem + ".json", "w") as f:
    json.dump(rows, f, indent=1, allow_nan=True)


def read(path_stem: str) -> dict[str, dict]:
  """`write`'s JSON by program key; empty when no plan was written."""
  if not os.path.exists(path_stem + ".json"):
    return {}
  with open(path_stem + ".json") as f:
    return {row["key"]: row for row in json.load(f)}
