"""The run loop, written once for every experiment.

An experiment (Copy task, PTB, MNIST, CIFAR-10, IMDB) supplies only pure
single-run pieces in an `Experiment`: `init(key) -> state`, a jittable
`train_chunk(state) -> (state, metrics)` that advances `chunk_steps` training
steps, an optional jittable `evaluate(state) -> (state, metrics)`, and host
functions that turn metrics into JSON records. `run` does the rest:

* `config.json`, compared with the saved one on a rerun before anything is
  written (`workdir.prepare`);
* resume from the newest *valid* checkpoint (checksummed; a corrupt newest
  one is skipped with a warning), with `metrics.jsonl` truncated to it and the
  partial logging window restored, so a resumed run logs exactly what an
  uninterrupted one does;
* one jitted chunk per host round trip; progress lines with an ETA;
* SIGTERM / SIGINT: finish the chunk in flight, checkpoint, say how to
  resume, exit non-zero (`signals.Preempted`);
* a NaN/Inf in any float metric stops the run naming the step, without
  overwriting the last good checkpoint (unless
  `config.skip_nonfinite_updates`, where the experiment's optimiser skips
  such updates and the run goes on);
* `summary.json` from `Experiment.finish`.

Runs as an array axis (`run_axes.py`): `config.num_seeds` and
the lists of swept hyper-parameters (`config.learning_rates`) train as ONE
vmapped program; `config.json` records the run grid under `runs`, and every
metric becomes a list over runs. A run that diverges is reported and the
others go on; with a single run a NaN stops the run.

Devices (`sharding.py`): the batch is split over a `data` mesh
axis and stacked runs over a `runs` axis; with `config.distributed` the same
command runs on every host of a cluster, and only process 0 writes.

Config fields read here (every experiment's config lists them): `seed`,
`num_steps`, `log_every`, `checkpoint_every`, `num_seeds`, the sweep lists
(`learning_rates`, ...), `keep_checkpoints`, `allow_config_change`,
`skip_nonfinite_updates`, `num_devices`, `mesh_shape`, `distributed`,
`coordinator_address`, `num_processes`, `process_id`, `matmul_precision`.
How often to evaluate is the experiment's (`Experiment.eval_every`).

The jitted programs and the mesh and matmul precision they run under:
`programs.py`; checkpoints: `checkpoints.py`; the other run-directory files:
`workdir.py`.
"""

from __future__ import annotations

from collections.abc import Callable
import signal
import time
from typing import Any, NamedTuple

import jax
import numpy as np

from experiments.loop import checkpoints
from experiments.loop import checks
from experiments.loop import programs
from experiments.loop import run_axes
from experiments.loop import sharding
from experiments.loop import signals as signals_lib
from experiments.loop import workdir as workdir_lib

Pytree = Any


class Experiment(NamedTuple):
  """What an experiment gives the run loop (see the module docstring).

  Attributes:
    name: printed when the run starts.
    init: `key -> state`, a pytree of arrays for one run; with
      `swept_hparams`, `(key, hparams) -> state` where `hparams` maps each
      swept name to this run's value (a scalar array: keep the dict at
      `state['hparams']` and read it in `train_chunk`; on resume the runner
      puts the config's values there).
    train_chunk: pure, jittable `state -> (state, metrics)` advancing exactly
      `chunk_steps` training steps; `metrics` is a pytree of arrays.
    chunk_steps: training steps per `train_chunk` call.
    summarize: host function from the list of per-chunk metrics (NumPy
      pytrees) since the last record to a dict of numbers for that record.
    evaluate: optional pure, jittable `state -> (state, eval_metrics)`, run
      every `eval_every` steps; may update the state (e.g. keep the best
      parameters).
    eval_every: training steps between evaluations (a multiple of
      `chunk_steps`; the experiment's `config.eval_every`); None without
      `evaluate`.
    summarize_eval: host function from eval metrics (NumPy) to record fields.
    finish: optional host function `(state, workdir) -> dict`, written as
      `summary.json` at the end of the run.
    progress_fields: record fields echoed on the progress line.
    examples_per_step: when positive, records get `examples_per_second`.
    data: optional pytree of arrays (a dataset) given to `train_chunk` and
      `evaluate` as a second argument, `train_chunk(state, data)`, as a jit
      argument: arrays a jitted function closes over are embedded in the
      program as constants (a 600 MB CIFAR-10 array takes minutes to compile).
      Never checkpointed.
    swept_hparams: config fields that may take a list of values (in the
      plural field, e.g. `learning_rates`), vmapped as runs.
    batch_axes: optional `state -> tree` giving, per leaf of one run's state,
      the index of its batch axis (split over the `data` mesh axis) or None
      (replicated). Without it the state is replicated.
    batch_size: the batch that the `data` mesh axis splits (checked to
      divide over it).
  """

  name: str
  init: Callable[[jax.Array], Pytree]
  train_chunk: Callable[[Pytree], tuple[Pytree, Pytree]]
  chunk_steps: int
  summarize: Callable[[list[Pytree]], dict]
  evaluate: Callable[[Pytree], tuple[Pytree, Pytree]] | None = None
  eval_every: int | None = None
  summarize_eval: Callable[[Pytree], dict] | None = None
  finish: Callable[[Pytree, str], dict] | None = None
  progress_fields: tuple[str, ...] = ()
  examples_per_step: int = 0
  data: Pytree = None
  swept_hparams: tuple[str, ...] = ()
  batch_axes: Callable[[Pytree], Pytree] | None = None
  batch_size: int | None = None


class NonFiniteError(FloatingPointError):
  """A training metric became NaN or Inf."""


class Setting(NamedTuple):
  """What stays fixed while a run trains.

  Attributes:
    config, workdir, experiment: as given to `run`.
    runs: the run axis (`run_axes.Runs`).
    program: the jitted pieces (`programs.compile_program`).
    writes: whether this process writes files (process 0).
    log: prints on the writing process only.
  """

  config: Any
  workdir: str
  experiment: Experiment
  runs: run_axes.Runs
  program: programs.Program
  writes: bool
  log: Callable[[str], None]


def _host_zeros(shapes: Pytree) -> Pytree:
  return jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)


def _config_hparams(state: Pytree, hparams: dict) -> Pytree:
  """`state` with `state['hparams']` set to the config's values, not the
  checkpoint's: an allowed change of a learning rate takes effect on
  resume."""
  if not hparams or not isinstance(state, dict) or "hparams" not in state:
    return state
  return {
    **state,
    "hparams": jax.tree_util.tree_map(
      lambda old, new: np.asarray(new, old.dtype),
      state["hparams"],
      jax.device_get(hparams),
    ),
  }


def restore(setting: Setting) -> tuple[int, Pytree, list[Pytree]] | None:
  """`(step, state on the devices, logging window)` from the newest valid
  checkpoint, or None without one.

  The window is the per-chunk metrics since the last record, checkpointed
  with the state so that a run resumed between two records writes the same
  records.
  """
  found = checkpoints.read_latest_checkpoint(setting.workdir, log=setting.log)
  if found is None:
    return None
  step, raw = found
  path = checkpoints.checkpoint_path(setting.workdir, step)
  program = setting.program
  state = checkpoints.restore_like(
    _host_zeros(program.state_shape), raw["state"], path
  )
  state = _config_hparams(state, setting.runs.hparams)
  saved_window = raw.get("window") or {}
  window = [
    checkpoints.restore_like(
      _host_zeros(program.metrics_shape), saved_window[str(i)], path
    )
    for i in range(len(saved_window))
  ]
  return step, program.place_state(state), window


def start(setting: Setting) -> tuple[int, Pytree, list[Pytree]]:
  """`(step, state, window)` to train from: resumed from the newest valid
  checkpoint (records past it dropped), else step 0 and a fresh state."""
  resumed = restore(setting)
  if resumed is None:
    runs = setting.runs
    return 0, setting.program.init(runs.keys, runs.hparams), []
  step = resumed[0]
  if setting.writes:
    workdir_lib.MetricsWriter(setting.workdir).truncate_after(step)
  setting.log(
    f"Resumed from step {step} "
    f"({checkpoints.checkpoint_path(setting.workdir, step)})."
  )
  return resumed


def write_checkpoint(
  setting: Setting, step: int, state: Pytree, window: list[Pytree]
) -> None:
  """Gathers the state (a collective: every process calls this); process 0
  writes it with the logging window, keeping `config.keep_checkpoints`."""
  host_state = sharding.to_host(state)
  if setting.writes:
    target = {
      "step": step,
      "state": host_state,
      "window": {str(i): m for i, m in enumerate(window)},
    }
    checkpoints.save_checkpoint(
      setting.workdir,
      step,
      target,
      keep=setting.config.keep_checkpoints,
    )


def check_finite(
  setting: Setting, metrics: Pytree, step: int, diverged: set[int]
) -> set[int]:
  """The NaN/Inf policy for one chunk's metrics (host arrays).

  Stacked runs: each run that became non-finite is reported once and the
  others go on. A single run: a `NonFiniteError` naming the metrics and the
  steps, unless `config.skip_nonfinite_updates`.

  Returns:
    `diverged` with the runs that became non-finite in this chunk.
  """
  runs = setting.runs
  if runs.stacked:
    new = [r for r in runs.nonfinite_runs(metrics) if r not in diverged]
    for r in new:
      setting.log(
        f"Run {r} ({runs.runs[r]}) became non-finite in the chunk "
        f"ending at step {step}; the other runs go on."
      )
    return diverged | set(new)
  bad = run_axes.nonfinite_leaves(metrics)
  if bad and not setting.config.skip_nonfinite_updates:
    first = step - setting.experiment.chunk_steps + 1
    last = checkpoints.latest_checkpoint_step(setting.workdir)
    raise NonFiniteError(
      f"Non-finite {', '.join(bad)} in the chunk ending at step {step} "
      f"(steps {first}..{step}). The last good checkpoint (step {last}) is "
      "kept. Lower the learning rate, clip gradients, or set "
      "--config.skip_nonfinite_updates=true."
    )
  return diverged


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
  setting: Setting, record: dict, progress: workdir_lib.Progress
) -> None:
  """Appends `record` to `metrics.jsonl` and prints the progress line."""
  if not setting.writes:
    return
  workdir_lib.MetricsWriter(setting.workdir).write(record)
  progress.report(
    record["step"],
    **{
      k: run_axes.progress_value(record[k])
      for k in setting.experiment.progress_fields
      if k in record
    },
  )


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
  step: int,
  state: Pytree,
  window: list[Pytree],
  signals: signals_lib.SignalCatcher,
) -> Pytree:
  """Trains from `step` to `config.num_steps`, recording, evaluating and
  checkpointing on schedule; returns the final state.

  Raises:
    NonFiniteError: see `check_finite`.
    signals.Preempted: after a signal, once a checkpoint is written.
  """
  config = setting.config
  eval_every = (
    setting.experiment.eval_every if setting.program.evaluate else None
  )
  progress = workdir_lib.Progress(config.num_steps, start=step)
  diverged: set[int] = set()
  window_start = (step, time.perf_counter())
  while step < config.num_steps:
    state, metrics = setting.program.train_chunk(state)
    metrics = sharding.to_host(metrics)  # The chunk's one host round trip.
    step += setting.experiment.chunk_steps
    diverged = check_finite(setting, metrics, step, diverged)
    window.append(metrics)
    evaluated = {}
    if eval_every and step % eval_every == 0:
      state, evaluated = evaluate(setting, state)
    if step % config.log_every == 0 or evaluated or step >= config.num_steps:
      write_record(
        setting,
        make_record(setting, step, window, evaluated, window_start),
        progress,
      )
      window, window_start = [], (step, time.perf_counter())
    if sharding.any_process(signals.received is not None):
      write_checkpoint(setting, step, state, window)
      raise preempted(setting, signals.received, step)
    if step % config.checkpoint_every == 0 or step >= config.num_steps:
      write_checkpoint(setting, step, state, window)
  return state


def write_summary(setting: Setting, state: Pytree) -> None:
  """`summary.json` from `Experiment.finish` (lists over stacked runs)."""
  host_state = sharding.to_host(state)  # Collective with several processes.
  if not setting.writes:
    return
  runs = setting.runs
  summary = runs.per_run(
    lambda st: setting.experiment.finish(st, setting.workdir), host_state
  )
  if runs.stacked:
    summary["runs"] = runs.runs
  workdir_lib.write_json(setting.workdir, workdir_lib.SUMMARY_FILE, summary)


def run(
  config,
  workdir: str,
  experiment: Experiment,
  log: Callable[[str], None] = print,
) -> list[dict]:
  """Runs (or resumes) one experiment in `workdir`; returns all its records.

  Raises:
    workdir_lib.ConfigMismatchError: the saved config differs (see
      `workdir.prepare`).
    checkpoints.CheckpointError: checkpoints exist but none is valid or they
      do not fit this config.
    NonFiniteError: a metric became NaN/Inf (the step is named).
    signals.Preempted: after SIGTERM/SIGINT, once a checkpoint is written.
  """
  checks.schedule(
    config,
    experiment.chunk_steps,
    experiment.eval_every if experiment.evaluate is not None else None,
  )
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
  workdir_lib.prepare(
    workdir,
    config,
    log=say,
    write=writes,
    extra={"runs": runs.runs} if runs.stacked else None,
    allow_change=config.allow_config_change,
  )
  with programs.traced_under(mesh, matmul_precision):
    setting = Setting(
      config,
      workdir,
      experiment,
      runs,
      programs.compile_program(experiment, runs, mesh),
      writes,
      say,
    )
    if mesh is not None:
      say(
        f"Mesh {dict(mesh.shape)} over {mesh.devices.size} devices "
        f"({jax.process_count()} processes)."
      )
    step, state, window = start(setting)
    say(
      f"{experiment.name} | {config.num_steps} steps"
      + (f" | {len(runs.runs)} runs in one program" if runs.stacked else "")
      + (f" | resuming at {step}" if step else "")
    )
    with signals_lib.SignalCatcher() as signals:
      state = train(setting, step, state, window, signals)
  if experiment.finish is not None:
    write_summary(setting, state)
  return workdir_lib.read_metrics(workdir)
