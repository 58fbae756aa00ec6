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
  resume, exit non-zero (`Preempted`);
* a NaN/Inf in any float metric stops the run naming the step, without
  overwriting the last good checkpoint (unless
  `config.skip_nonfinite_updates`, where the experiment's optimiser skips
  such updates and the run goes on);
* `summary.json` from `Experiment.finish`.

Runs as an array axis (`experiments/run_axes.py`): `config.num_seeds` and
the lists of swept hyper-parameters (`config.learning_rates`) train as ONE
vmapped program; `config.json` records the run grid under `runs`, and every
metric becomes a list over runs. A run that diverges is reported and the
others go on; with a single run a NaN stops the run.

Devices (`experiments/sharding.py`): the batch is split over a `data` mesh
axis and stacked runs over a `runs` axis; with `config.distributed` the same
command runs on every host of a cluster, and only process 0 writes.

Config fields read here: `seed`, `num_steps`, `log_every`, `checkpoint_every`,
and optionally `eval_every`, `num_seeds`, the sweep lists,
`keep_checkpoints`, `allow_config_change`, `skip_nonfinite_updates`,
`num_devices`, `mesh_shape`, `distributed`.
"""

from __future__ import annotations

import signal
import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from experiments.loop import checks
from experiments.loop import run_axes
from experiments.loop import sharding
from experiments.loop import checkpoints
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
      every `config.eval_every` steps; may update the state (e.g. keep the
      best parameters).
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
  summarize_eval: Callable[[Pytree], dict] | None = None
  finish: Callable[[Pytree, str], dict] | None = None
  progress_fields: tuple[str, ...] = ()
  examples_per_step: int = 0
  data: Pytree = None
  swept_hparams: tuple[str, ...] = ()
  batch_axes: Callable[[Pytree], Pytree] | None = None
  batch_size: int | None = None


class Preempted(SystemExit):
  """Raised after a checkpoint was written in answer to SIGTERM/SIGINT.

  A `SystemExit` with code 128 + the signal number, as a shell reports a
  process killed by that signal, so schedulers see a non-zero exit.
  """


class NonFiniteError(FloatingPointError):
  """A training metric became NaN or Inf."""


class _SignalCatcher:
  """Records SIGTERM/SIGINT instead of dying; a second one kills as usual."""

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.received: int | None = None
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    if self.received is not None:  # Second signal: stop now.
      signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
      signal.raise_signal(signum)
      return
    self.received = signum
    print(f"\nReceived {signal.Signals(signum).name}: finishing the current "
          "chunk, then checkpointing (send it again to stop at once).",
          flush=True)

  def __enter__(self):
    try:
      for sig in self.SIGNALS:
        self._previous[sig] = signal.signal(sig, self._handle)
    except ValueError:  # Not the main thread: leave signals alone.
      self._previous.clear()
    return self

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    return False


def _data_args(experiment: Experiment) -> tuple:
  return () if experiment.data is None else (experiment.data,)


def _with_data(jitted: Callable, data: Pytree) -> Callable:
  """`state -> jitted(state, data)`: the data stay a jit argument."""
  if data is None:
    return jitted
  return lambda state: jitted(state, data)


def run(config, workdir: str, experiment: Experiment,
        log: Callable[[str], None] = print) -> list[dict]:
  """Runs (or resumes) one experiment in `workdir`; returns all its records.

  Raises:
    workdir_lib.ConfigMismatchError: the saved config differs (see
      `workdir.prepare`).
    checkpoints.CheckpointError: checkpoints exist but none is valid or they
      do not fit this config.
    NonFiniteError: a metric became NaN/Inf (the step is named).
    Preempted: after SIGTERM/SIGINT, once a checkpoint is written.
  """
  chunk_steps = experiment.chunk_steps
  checks.schedule(config, chunk_steps)
  eval_every = config.get("eval_every") if experiment.evaluate else None
  skip_nonfinite = bool(config.get("skip_nonfinite_updates", False))
  keep = config.get("keep_checkpoints", 2) or 2

  grid = run_axes.run_grid(config, experiment.swept_hparams)
  mesh = sharding.make_mesh(config, batch_size=experiment.batch_size,
                            num_runs=len(grid), stacked=len(grid) > 1)
  runs = run_axes.Runs(experiment, grid, mesh)
  writes = sharding.is_writer()
  say = log if writes else (lambda message: None)
  workdir_lib.prepare(workdir, config, log=say, write=writes,
                      extra={"runs": runs.runs} if runs.stacked else None)

  state_shape = jax.eval_shape(runs.init, runs.keys, runs.hparams)
  data = experiment.data
  if mesh is None:
    place_state = jax.device_put
    data = None if data is None else jax.device_put(data)
    init = jax.jit(runs.init)
    train_chunk = jax.jit(runs.train_chunk, donate_argnums=0)
    evaluate = jax.jit(runs.evaluate) if experiment.evaluate else None
  else:
    axes = experiment.batch_axes(state_shape) if experiment.batch_axes else None
    state_sh = sharding.state_shardings(mesh, state_shape, axes,
                                        runs.stacked)
    place_state = lambda tree: sharding.put(tree, state_sh)
    data_sh = () if data is None else (sharding.replicated(mesh, data),)
    if data is not None:
      data = sharding.put(data, data_sh[0])
    init = jax.jit(runs.init, out_shardings=state_sh)
    metrics_sh = sharding.replicated(
        mesh, jax.eval_shape(runs.train_chunk, state_shape,
                             *_data_args(experiment))[1])
    train_chunk = jax.jit(runs.train_chunk, donate_argnums=0,
                          in_shardings=(state_sh,) + data_sh,
                          out_shardings=(state_sh, metrics_sh))
    evaluate = (jax.jit(runs.evaluate, in_shardings=(state_sh,) + data_sh)
                if experiment.evaluate else None)
    say(f"Mesh {dict(mesh.shape)} over {mesh.devices.size} devices "
        f"({jax.process_count()} processes).")
  train_chunk = _with_data(train_chunk, data)
  evaluate = _with_data(evaluate, data) if evaluate else None

  with sharding.active(mesh):
    state = init(runs.keys, runs.hparams)
  metrics_template = jax.tree_util.tree_map(
      lambda s: np.zeros(s.shape, s.dtype),
      jax.eval_shape(runs.train_chunk, state_shape,
                     *_data_args(experiment))[1])
  step = 0
  # Per-chunk metrics since the last record. Checkpointed with the state, so
  # a run resumed between two records writes the same records.
  window: list[Pytree] = []
  writer = workdir_lib.MetricsWriter(workdir)
  found = checkpoints.read_latest_checkpoint(workdir, log=say)
  if found is not None:
    step, raw = found
    path = checkpoints.checkpoint_path(workdir, step)
    host_template = jax.tree_util.tree_map(
        lambda s: np.zeros(s.shape, s.dtype), state_shape)
    restored = checkpoints.restore_like(host_template, raw["state"], path)
    if experiment.swept_hparams and isinstance(restored, dict) and \
        "hparams" in restored:
      # The config's values, not the checkpoint's: an allowed change of a
      # learning rate takes effect on resume.
      restored["hparams"] = jax.tree_util.tree_map(
          lambda old, new: np.asarray(new, old.dtype), restored["hparams"],
          jax.device_get(runs.hparams))
    state = place_state(restored)
    saved_window = raw.get("window") or {}
    window = [checkpoints.restore_like(metrics_template, saved_window[str(i)],
                                       path)
              for i in range(len(saved_window))]
    if writes:
      writer.truncate_after(step)
    say(f"Resumed from step {step} ({path}).")

  def checkpoint(at_step: int) -> None:
    host_state = sharding.to_host(state)  # Collective with several processes.
    if writes:
      target = {"step": at_step, "state": host_state,
                "window": {str(i): m for i, m in enumerate(window)}}
      checkpoints.save_checkpoint(workdir, at_step, target, keep=keep)

  say(f"{experiment.name} | {config.num_steps} steps"
      + (f" | {len(runs.runs)} runs in one program" if runs.stacked else "")
      + (f" | resuming at {step}" if step else ""))
  diverged: set[int] = set()
  progress = workdir_lib.Progress(config.num_steps, start=step)
  window_start_time = time.perf_counter()
  window_start_step = step
  with _SignalCatcher() as signals, sharding.active(mesh):
    while step < config.num_steps:
      state, metrics = train_chunk(state)
      metrics = sharding.to_host(metrics)  # The chunk's one host round trip.
      step += chunk_steps
      if runs.stacked:
        for r in runs.nonfinite_runs(metrics):
          if r not in diverged:
            diverged.add(r)
            say(f"Run {r} ({runs.runs[r]}) became non-finite in the chunk "
                f"ending at step {step}; the other runs go on.")
      bad = [] if skip_nonfinite or runs.stacked else \
          run_axes.nonfinite_leaves(metrics)
      if bad:
        last = checkpoints.latest_checkpoint_step(workdir)
        raise NonFiniteError(
            f"Non-finite {', '.join(bad)} in the chunk ending at step {step} "
            f"(steps {step - chunk_steps + 1}..{step}). The last good "
            f"checkpoint (step {last}) is kept. Lower the learning rate, clip "
            "gradients, or set --config.skip_nonfinite_updates=true.")
      window.append(metrics)
      evaluated = {}
      if eval_every and step % eval_every == 0:
        state, eval_metrics = evaluate(state)
        eval_metrics = sharding.to_host(eval_metrics)
        evaluated = (runs.per_run(experiment.summarize_eval, eval_metrics)
                     if experiment.summarize_eval else {})
      if step % config.log_every == 0 or evaluated or step >= config.num_steps:
        elapsed = time.perf_counter() - window_start_time
        record = {"step": step, **runs.per_run(
            lambda w: experiment.summarize(list(w)), window), **evaluated}
        record["steps_per_second"] = (step - window_start_step) / max(
            elapsed, 1e-9)
        if experiment.examples_per_step:
          record["examples_per_second"] = (record["steps_per_second"]
                                           * experiment.examples_per_step)
        if writes:
          writer.write(record)
          progress.report(step, **{
              k: run_axes.progress_value(record[k])
              for k in experiment.progress_fields if k in record})
        window = []
        window_start_time = time.perf_counter()
        window_start_step = step
      stop = sharding.any_process(signals.received is not None)
      if stop:
        checkpoint(step)
        signum = signals.received or signal.SIGTERM
        say(f"Stopped by {signal.Signals(signum).name} at step {step}; "
            f"checkpoint written. Rerun the same command (same --workdir "
            f"{workdir}) to resume from step {step}.")
        raise Preempted(128 + signum)
      if step % config.checkpoint_every == 0 or step >= config.num_steps:
        checkpoint(step)
  if experiment.finish is not None:
    host_state = sharding.to_host(state)
    if writes:
      summary = runs.per_run(lambda st: experiment.finish(st, workdir),
                             host_state)
      if runs.stacked:
        summary["runs"] = runs.runs
      workdir_lib.write_json(workdir, workdir_lib.SUMMARY_FILE, summary)
  return workdir_lib.read_metrics(workdir)
