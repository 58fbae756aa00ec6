"""The run loop, written once for every experiment.

An experiment (Copy task, PTB, MNIST, CIFAR-10, IMDB) supplies only pure
single-run pieces in an `Experiment`: `init(key) -> state`, a jittable
`train_chunk(state) -> (state, metrics)` that advances `chunk_steps` training
steps, an optional jittable `evaluate(state) -> (state, metrics)`, and host
functions that turn metrics into JSON records. `run` does the rest:

* one writer: the workdir's lock (`lock.py`) is taken first, refused if a
  live process holds it, and released however the run ends;
* `config.json`, compared with the saved one on a rerun before anything is
  written (`workdir.check_config`), and saved only once the checkpoint has
  loaded;
* resume from the newest valid checkpoint that fits this config and the log
  (`resume.py`), with `metrics.jsonl` cut to it and the partial logging
  window restored, so that a resumed run logs exactly what an uninterrupted
  one does, whatever the moment of the interruption;
* one jitted chunk per host round trip; progress lines with an ETA;
* SIGTERM / SIGINT: finish the chunk in flight, checkpoint, say how to
  resume, exit non-zero (`signals.Preempted`);
* a failed run (NaN/Inf, too many skipped updates, a diverged loss) stops
  with `TrainingFailedError`, keeping the last good checkpoint
  (`health.py`: the policy and its config values);
* a full or read-only disk ends the run with `WorkdirWriteError`, every
  earlier file still valid (`writes.py`, `metrics_log.py`);
* `summary.json` from `Experiment.finish`.

Runs as an array axis (`run_axes.py`): `config.num_seeds` and
the lists of swept hyper-parameters (`config.learning_rates`) train as ONE
vmapped program; `config.json` records the run grid under `runs`, and every
metric becomes a list over runs. A run that fails is reported and the
others go on.

Devices (`sharding.py`): the batch is split over a `data` mesh
axis and stacked runs over a `runs` axis; with `config.distributed` the same
command runs on every host of a cluster, and only process 0 writes (and
holds the lock).

Config fields read here (every experiment's config lists them): `seed`,
`num_steps`, `log_every`, `checkpoint_every`, `num_seeds`, the sweep lists
(`learning_rates`, ...), `keep_checkpoints`, `allow_config_change`,
`skip_nonfinite_updates`, `num_devices`, `mesh_shape`, `distributed`,
`coordinator_address`, `num_processes`, `process_id`, `matmul_precision`;
and, where a config lists them (else `health.DEFAULTS`),
`max_consecutive_skips` and `divergence_factor`. How often to evaluate is
the experiment's (`Experiment.eval_every`).

The jitted programs and the mesh and matmul precision they run under:
`programs.py`; checkpoints: `checkpoints.py`; the other run-directory files:
`workdir.py`; every error that ends a run early: `errors.py`.
"""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import json
import signal
import time
from typing import Any, NamedTuple

import jax

from experiments.loop import checkpoints
from experiments.loop import checks
from experiments.loop import experiment as experiment_lib
from experiments.loop import health
from experiments.loop import lock as lock_lib
from experiments.loop import metrics_log
from experiments.loop import programs
from experiments.loop import resume
from experiments.loop import run_axes
from experiments.loop import sharding
from experiments.loop import signals as signals_lib
from experiments.loop import workdir as workdir_lib
from experiments.loop.errors import RunError
from experiments.loop.errors import TrainingFailedError
from experiments.loop.errors import WorkdirLockedError
from experiments.loop.errors import WorkdirWriteError

Pytree = Any

# The name this error had before the failure policy grew (`health.py`).
NonFiniteError = TrainingFailedError
# What an experiment gives the loop, defined beside the loop's other records.
Experiment = experiment_lib.Experiment


class Setting(NamedTuple):
  """What stays fixed while a run trains.

  Attributes:
    config, workdir, experiment: as given to `run`.
    runs: the run axis (`run_axes.Runs`).
    program: the jitted pieces (`programs.compile_program`).
    writes: whether this process writes files (process 0).
    log: prints on the writing process only.
    saved_config: this run's config as saved (JSON types, with the run
      grid), also stored in each checkpoint.
    lock: the workdir's lock (the writing process), else None.
  """

  config: Any
  workdir: str
  experiment: Experiment
  runs: run_axes.Runs
  program: programs.Program
  writes: bool
  log: Callable[[str], None]
  saved_config: dict
  lock: lock_lib.WorkdirLock | None = None


def write_checkpoint(
  setting: Setting,
  step: int,
  state: Pytree,
  window: list[Pytree],
  last_record: int,
  watch: health.Health,
) -> None:
  """Gathers the state (a collective: every process calls this); process 0
  flushes the log, then writes the state with the logging window, the
  config, the last record's step and the skip counts at it, keeping
  `config.keep_checkpoints`."""
  host_state = sharding.to_host(state)
  if not setting.writes:
    return
  if setting.lock is not None:
    setting.lock.refresh()
  metrics_log.MetricsLog(setting.workdir).sync()
  target = {
    "step": step,
    "state": host_state,
    "window": {str(i): m for i, m in enumerate(window)},
    "config": json.dumps(setting.saved_config, sort_keys=True),
    "last_record": last_record,
    "skips_at_record": watch.skips_at_record,
  }
  checkpoints.save_checkpoint(
    setting.workdir, step, target, keep=setting.config.keep_checkpoints
  )


def evaluate(setting: Setting, state: Pytree) -> tuple[Pytree, dict]:
  """`(state, record fields)` of one evaluation."""
  state, eval_metrics = setting.program.evaluate(state)
  eval_metrics = sharding.to_host(eval_metrics)
  summarize_eval = setting.experiment.summarize_eval
  fields = (
    setting.runs.per_run(summarize_eval, eval_metrics) if summarize_eval else {}
  )
  return state, fields


def make_record(
  setting: Setting,
  step: int,
  window: list[Pytree],
  evaluated: dict,
  window_start: tuple[int, float],
) -> dict:
  """One `metrics.jsonl` record: the window's summary, the evaluation's
  fields and the speed since `window_start` `(step, perf_counter time)`."""
  experiment = setting.experiment
  start_step, start_time = window_start
  elapsed = time.perf_counter() - start_time
  record = {
    "step": step,
    **setting.runs.per_run(lambda w: experiment.summarize(list(w)), window),
    **evaluated,
  }
  record["steps_per_second"] = (step - start_step) / max(elapsed, 1e-9)
  if experiment.examples_per_step:
    record["examples_per_second"] = (
      record["steps_per_second"] * experiment.examples_per_step
    )
  return record


def write_record(
  setting: Setting, record: dict, progress: workdir_lib.Progress, note: str = ""
) -> None:
  """Appends `record` to `metrics.jsonl` and prints the progress line."""
  if not setting.writes:
    return
  if setting.lock is not None:
    setting.lock.refresh()
  metrics_log.MetricsLog(setting.workdir).append(record)
  fields = {
    k: run_axes.progress_value(record[k])
    for k in setting.experiment.progress_fields
    if k in record
  }
  if "skipped_updates" in record:
    fields["skipped"] = record["skipped_updates"]
  progress.report(record["step"], note=note, **fields)


def preempted(
  setting: Setting, signum: int | None, step: int
) -> signals_lib.Preempted:
  """Says how to resume; the exit of a process stopped by `signum`."""
  signum = signum or signal.SIGTERM  # Another process got the signal.
  setting.log(
    f"Stopped by {signal.Signals(signum).name} at step {step}; "
    "checkpoint written. Rerun the same command (same --workdir "
    f"{setting.workdir}) to resume from step {step}."
  )
  return signals_lib.Preempted(128 + signum)


def train(
  setting: Setting,
  start: resume.Start,
  signals: signals_lib.SignalCatcher,
  watch: health.Health,
) -> Pytree:
  """Trains from `step` to `config.num_steps`, recording, evaluating and
  checkpointing on schedule; returns the final state.

  Raises:
    TrainingFailedError: see `health.py`.
    signals.Preempted: after a signal, once a checkpoint is written.
  """
  config, program = setting.config, setting.program
  eval_every = setting.experiment.eval_every if program.evaluate else None
  step, state, window, last_record = start[:4]
  progress = workdir_lib.Progress(config.num_steps, start=step)
  window_start = (step, time.perf_counter())
  while step < config.num_steps:
    state, metrics = program.train_chunk(state)
    metrics = sharding.to_host(metrics)  # The chunk's one host round trip.
    counters = (
      sharding.to_host(program.skip_counters(state))
      if program.skip_counters
      else None
    )
    step += setting.experiment.chunk_steps
    watch.check_chunk(metrics, counters, step)
    window.append(metrics)
    evaluated = {}
    if eval_every and step % eval_every == 0:
      state, evaluated = evaluate(setting, state)
    if step % config.log_every == 0 or evaluated or step >= config.num_steps:
      record = make_record(setting, step, window, evaluated, window_start)
      watch.add_skips(record, counters)
      diverged = watch.diverged(record)
      note = "; ".join(
        f"DIVERGED (run {r})" if setting.runs.stacked else "DIVERGED"
        for r, _ in diverged
      )
      write_record(setting, record, progress, note)
      window, window_start, last_record = [], (step, time.perf_counter()), step
      for r, reason in diverged:
        watch.fail(r, step, reason)
    if sharding.any_process(signals.received is not None):
      write_checkpoint(setting, step, state, window, last_record, watch)
      raise preempted(setting, signals.received, step)
    if step % config.checkpoint_every == 0 or step >= config.num_steps:
      write_checkpoint(setting, step, state, window, last_record, watch)
  return state


def write_summary(
  setting: Setting, state: Pytree, watch: health.Health
) -> None:
  """`summary.json` from `Experiment.finish` (lists over stacked runs), and
  the runs that failed under `failed_runs` (also without `finish`)."""
  host_state = sharding.to_host(state)  # Collective with several processes.
  if not setting.writes:
    return
  runs, finish = setting.runs, setting.experiment.finish
  summary = (
    runs.per_run(lambda st: finish(st, setting.workdir), host_state)
    if finish is not None
    else {}
  )
  if runs.stacked:
    summary["runs"] = runs.runs
  if watch.failed:
    summary["failed_runs"] = [
      {"run": r, "step": f.step, "reason": f.reason}
      for r, f in sorted(watch.failed.items())
    ]
  workdir_lib.write_json(setting.workdir, workdir_lib.SUMMARY_FILE, summary)


def take_lock(workdir: str, writes: bool, log) -> lock_lib.WorkdirLock | None:
  """The workdir's lock on the writing process; every process learns if it
  could not be taken (a collective with several processes).

  Raises:
    WorkdirLockedError, WorkdirWriteError: on every process.
  """
  held, error = None, None
  if writes:
    try:
      held = lock_lib.acquire(workdir, log=log)
    except RunError as e:
      error = e
  if sharding.any_process(error is not None):
    raise error or WorkdirLockedError(
      f"process 0 could not take the lock of {workdir}: see its log"
    )
  return held


def run(
  config,
  workdir: str,
  experiment: Experiment,
  log: Callable[[str], None] = print,
) -> list[dict]:
  """Runs (or resumes) one experiment in `workdir`; returns all its records.

  Raises (each a `errors.RunError`, which the mains print as one message):
    WorkdirLockedError: another process holds `workdir`.
    ConfigMismatchError: the saved config, or the checkpoint's, differs
      (see `workdir.check_config`, `resume.py`).
    CheckpointError: checkpoints exist but none is valid or they do not
      fit this config.
    MetricsLogError: `metrics.jsonl` has a bad line (file and line named).
    TrainingFailedError: NaN/Inf, skipped updates, divergence (`health.py`).
    WorkdirWriteError: a full or read-only disk.
    signals.Preempted: after SIGTERM/SIGINT, once a checkpoint is written.
  """
  checks.schedule(
    config,
    experiment.chunk_steps,
    experiment.eval_every if experiment.evaluate is not None else None,
  )
  health.limits(config)
  matmul_precision = checks.matmul_precision(config)
  grid = run_axes.run_grid(config, experiment.swept_hparams)
  mesh = sharding.make_mesh(
    config,
    batch_size=experiment.batch_size,
    num_runs=len(grid),
    stacked=len(grid) > 1,
  )
  runs = run_axes.Runs(experiment, grid, mesh)
  writes = sharding.is_writer()
  say = log if writes else (lambda message: None)
  held = take_lock(workdir, writes, say)
  with held if held is not None else contextlib.nullcontext():
    return _run_locked(
      config,
      workdir,
      experiment,
      runs,
      mesh,
      matmul_precision,
      writes,
      say,
      held,
    )


def _start_line(setting: Setting, step: int) -> str:
  config, runs = setting.config, setting.runs
  return (
    f"{setting.experiment.name} | {config.num_steps} steps"
    + (f" | {len(runs.runs)} runs in one program" if runs.stacked else "")
    + (f" | resuming at {step}" if step else "")
    + (" | keeping every checkpoint" if not config.keep_checkpoints else "")
  )


def _run_locked(
  config,
  workdir: str,
  experiment: Experiment,
  runs: run_axes.Runs,
  mesh,
  matmul_precision: str,
  writes: bool,
  say: Callable[[str], None],
  held: lock_lib.WorkdirLock | None,
) -> list[dict]:
  """`run` once the lock is held: `config.json` is written only after the
  checkpoint has loaded."""
  checked = workdir_lib.check_config(
    workdir,
    config,
    resume_defaults=experiment.resume_defaults,
    allow_change=config.allow_config_change,
    extra={"runs": runs.runs} if runs.stacked else None,
    log=say,
  )
  with programs.traced_under(mesh, matmul_precision):
    program = programs.compile_program(experiment, runs, mesh)
    setting = Setting(
      config, workdir, experiment, runs, program, writes, say, checked.new, held
    )
    if mesh is not None:
      say(
        f"Mesh {dict(mesh.shape)} over {mesh.devices.size} devices "
        f"({jax.process_count()} processes)."
      )
    start = resume.start(setting)
    watch = health.Health(
      config,
      runs.runs,
      experiment.chunk_steps,
      experiment.chance_loss,
      start.skips_at_record,
      say,
      workdir,
    )
    say(_start_line(setting, start.step))
    try:
      if writes:
        workdir_lib.save_config(workdir, checked)
      with signals_lib.SignalCatcher() as signals:
        state = train(setting, start, signals, watch)
      if experiment.finish is not None or watch.failed:
        write_summary(setting, state, watch)
    except WorkdirWriteError as e:
      raise resumable(e, workdir) from e
  return workdir_lib.read_metrics(workdir)


def resumable(error: WorkdirWriteError, workdir: str) -> WorkdirWriteError:
  """`error` saying that the files written before are intact and how the
  run goes on."""
  last = checkpoints.latest_checkpoint_step(workdir)
  where = f"step {last}" if last is not None else "the start"
  return WorkdirWriteError(
    f"{error}. The checkpoints and metrics.jsonl are intact; free space (or "
    f"make {workdir} writable) and rerun the same command to resume from "
    f"{where}."
  )
