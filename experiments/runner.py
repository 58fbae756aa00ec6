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

Runs as an array axis. `config.num_seeds = S` and, for each hyper-parameter
an experiment declares in `swept_hparams` (e.g. `learning_rate`), a list in
the plural field (`config.learning_rates`; empty means the single
`config.learning_rate`) make `S x L` runs that train as ONE vmapped, jitted
program. Run `r` is the single run with seed `config.seed + j` and that
hyper-parameter value (same PRNG keys, same data stream, same curriculum
logic): `run_grid` gives the order (sweep values slowest, seeds fastest), and
`config.json` records it under `runs`. With more than one run every metric in
`metrics.jsonl` and `summary.json` is a list over runs in that order. A run
that diverges (NaN/Inf) is reported once and left to run on with the others;
with a single run a NaN stops the run.

Config fields read here: `seed`, `num_steps`, `log_every`, `checkpoint_every`,
and optionally `eval_every`, `num_seeds`, the sweep lists,
`keep_checkpoints`, `allow_config_change`, `skip_nonfinite_updates`.
"""

from __future__ import annotations

import itertools
import signal
import sys
import time
from typing import Any, Callable, NamedTuple

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments import workdir as workdir_lib

Pytree = Any


class Experiment(NamedTuple):
  """What an experiment gives the run loop (see the module docstring).

  Attributes:
    name: printed when the run starts.
    init: `key -> state`, a pytree of arrays for one run; with
      `swept_hparams`, `(key, hparams) -> state` where `hparams` maps each
      swept name to this run's value (a scalar array: keep it in the state
      and read it in `train_chunk`).
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


class Preempted(SystemExit):
  """Raised after a checkpoint was written in answer to SIGTERM/SIGINT.

  A `SystemExit` with code 128 + the signal number, as a shell reports a
  process killed by that signal, so schedulers see a non-zero exit.
  """


class NonFiniteError(FloatingPointError):
  """A training metric became NaN or Inf."""


def _positive_int(config, field: str, required: bool = True) -> int | None:
  value = config.get(field) if hasattr(config, "get") else getattr(
      config, field, None)
  if value is None and not required:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ValueError(f"config.{field} must be a positive integer, got "
                     f"{value!r}")
  return value


def validate_schedule(config, chunk_steps: int) -> None:
  """Checks the step-count fields against the chunk length."""
  if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, int) or \
      chunk_steps <= 0:
    raise ValueError(f"chunk_steps must be a positive integer, got "
                     f"{chunk_steps!r}")
  _positive_int(config, "num_steps")
  _positive_int(config, "checkpoint_every")
  for field in ("num_steps", "log_every", "eval_every"):
    value = _positive_int(config, field, required=field != "eval_every")
    if value is not None and value % chunk_steps:
      raise ValueError(f"config.{field} ({value}) must be a multiple of the "
                       f"chunk length ({chunk_steps} steps)")


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


def _nonfinite_leaves(tree: Pytree) -> list[str]:
  bad = []
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.inexact) and not np.isfinite(leaf).all():
      bad.append(jax.tree_util.keystr(key_path) or "metrics")
  return bad


def _data_args(experiment: Experiment) -> tuple:
  return () if experiment.data is None else (experiment.data,)


def _with_data(jitted: Callable, experiment: Experiment) -> Callable:
  """`state -> jitted(state, data)`: the data stay a jit argument."""
  if experiment.data is None:
    return jitted
  data = jax.device_put(experiment.data)
  return lambda state: jitted(state, data)


def run_grid(config, swept_hparams: tuple[str, ...] = ()) -> list[dict]:
  """The runs of a config, in run-axis order: one dict per run with its
  `seed` and its value of each swept hyper-parameter.

  Sweep values vary slowest (in the order of `swept_hparams`), seeds
  fastest: with learning rates `[a, b]` and 2 seeds from `seed = 0`,
  `[{seed 0, a}, {seed 1, a}, {seed 0, b}, {seed 1, b}]`.
  """
  num_seeds = config.get("num_seeds", 1)
  if num_seeds is None:
    num_seeds = 1
  if isinstance(num_seeds, bool) or not isinstance(num_seeds, int) or \
      num_seeds < 1:
    raise ValueError(f"config.num_seeds must be a positive integer, got "
                     f"{num_seeds!r}")
  value_lists = []
  for name in swept_hparams:
    listed = config.get(name + "s")
    values = list(listed) if listed else [config[name]]
    for value in values:
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config.{name}s must be a list of numbers, got "
                         f"{listed!r}")
    value_lists.append(values)
  return [{"seed": config.seed + j, **dict(zip(swept_hparams, combo))}
          for combo in itertools.product(*value_lists)
          for j in range(num_seeds)]


def _run_index(tree: Pytree, r: int) -> Pytree:
  return jax.tree_util.tree_map(lambda a: np.asarray(a)[r], tree)


class _Runs:
  """The experiment's single-run pieces, vmapped over the runs when there
  are several; metrics turned into records (lists over runs)."""

  def __init__(self, experiment: Experiment, runs: list[dict]):
    self.experiment = experiment
    self.runs = runs
    self.stacked = len(runs) > 1
    swept = experiment.swept_hparams
    keys = jnp.stack([jax.random.PRNGKey(r["seed"]) for r in runs])
    hparams = {name: jnp.asarray([r[name] for r in runs]) for name in swept}

    def init_one(key, hparams):
      return experiment.init(key, hparams) if swept else experiment.init(key)

    data_axes = () if experiment.data is None else (None,)
    if self.stacked:
      self.keys, self.hparams = keys, hparams
      self.init = jax.vmap(init_one)
      self.train_chunk = jax.vmap(experiment.train_chunk,
                                  in_axes=(0,) + data_axes)
      self.evaluate = (jax.vmap(experiment.evaluate, in_axes=(0,) + data_axes)
                       if experiment.evaluate else None)
    else:
      self.keys = keys[0]
      self.hparams = {name: v[0] for name, v in hparams.items()}
      self.init = init_one
      self.train_chunk = experiment.train_chunk
      self.evaluate = experiment.evaluate

  def per_run(self, fn: Callable[[Any], dict], tree: Any) -> dict:
    """`fn` on each run's slice of `tree`; values become lists over runs."""
    if not self.stacked:
      return fn(tree)
    dicts = [fn(_run_index(tree, r)) for r in range(len(self.runs))]
    return {k: [d[k] for d in dicts] for k in dicts[0]}

  def nonfinite_runs(self, metrics: Pytree) -> list[int]:
    return [r for r in range(len(self.runs))
            if _nonfinite_leaves(_run_index(metrics, r))]


def _progress_value(value: Any) -> Any:
  if isinstance(value, list):  # Several runs: show the mean of the finite.
    finite = [v for v in value if isinstance(v, (int, float))
              and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")
  return value


def run(config, workdir: str, experiment: Experiment,
        log: Callable[[str], None] = print) -> list[dict]:
  """Runs (or resumes) one experiment in `workdir`; returns all its records.

  Raises:
    workdir_lib.ConfigMismatchError: the saved config differs (see
      `workdir.prepare`).
    workdir_lib.CheckpointError: checkpoints exist but none is valid or they
      do not fit this config.
    NonFiniteError: a metric became NaN/Inf (the step is named).
    Preempted: after SIGTERM/SIGINT, once a checkpoint is written.
  """
  chunk_steps = experiment.chunk_steps
  validate_schedule(config, chunk_steps)
  eval_every = config.get("eval_every") if experiment.evaluate else None
  skip_nonfinite = bool(config.get("skip_nonfinite_updates", False))
  keep = config.get("keep_checkpoints", 2) or 2

  runs = _Runs(experiment, run_grid(config, experiment.swept_hparams))
  workdir_lib.prepare(workdir, config, log=log,
                      extra={"runs": runs.runs} if runs.stacked else None)
  state = jax.jit(runs.init)(runs.keys, runs.hparams)
  metrics_template = jax.tree_util.tree_map(
      lambda s: np.zeros(s.shape, s.dtype),
      jax.eval_shape(runs.train_chunk, state, *_data_args(experiment))[1])
  step = 0
  # Per-chunk metrics since the last record. Checkpointed with the state, so
  # a run resumed between two records writes the same records.
  window: list[Pytree] = []
  writer = workdir_lib.MetricsWriter(workdir)
  found = workdir_lib.read_latest_checkpoint(workdir, log=log)
  if found is not None:
    step, raw = found
    path = workdir_lib.checkpoint_path(workdir, step)
    state = jax.device_put(workdir_lib.restore_like(state, raw["state"], path))
    saved_window = raw.get("window") or {}
    window = [workdir_lib.restore_like(metrics_template, saved_window[str(i)],
                                       path)
              for i in range(len(saved_window))]
    writer.truncate_after(step)
    log(f"Resumed from step {step} ({path}).")

  def checkpoint(at_step: int) -> None:
    target = {"step": at_step, "state": state,
              "window": {str(i): m for i, m in enumerate(window)}}
    workdir_lib.save_checkpoint(workdir, at_step, target, keep=keep)

  train_chunk = _with_data(jax.jit(runs.train_chunk, donate_argnums=0),
                           experiment)
  evaluate = (_with_data(jax.jit(runs.evaluate), experiment)
              if experiment.evaluate else None)
  log(f"{experiment.name} | {config.num_steps} steps"
      + (f" | {len(runs.runs)} runs in one program" if runs.stacked else "")
      + (f" | resuming at {step}" if step else ""))
  diverged: set[int] = set()
  progress = workdir_lib.Progress(config.num_steps, start=step)
  window_start_time = time.perf_counter()
  window_start_step = step
  record: dict = {}
  with _SignalCatcher() as signals:
    while step < config.num_steps:
      state, metrics = train_chunk(state)
      metrics = jax.device_get(metrics)  # The chunk's one host round trip.
      step += chunk_steps
      if runs.stacked:
        for r in runs.nonfinite_runs(metrics):
          if r not in diverged:
            diverged.add(r)
            log(f"Run {r} ({runs.runs[r]}) became non-finite in the chunk "
                f"ending at step {step}; the other runs go on.")
      bad = [] if skip_nonfinite or runs.stacked else _nonfinite_leaves(
          metrics)
      if bad:
        last = workdir_lib.latest_checkpoint_step(workdir)
        raise NonFiniteError(
            f"Non-finite {', '.join(bad)} in the chunk ending at step {step} "
            f"(steps {step - chunk_steps + 1}..{step}). The last good "
            f"checkpoint (step {last}) is kept. Lower the learning rate, clip "
            "gradients, or set --config.skip_nonfinite_updates=true.")
      window.append(metrics)
      evaluated = {}
      if eval_every and step % eval_every == 0:
        state, eval_metrics = evaluate(state)
        eval_metrics = jax.device_get(eval_metrics)
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
        writer.write(record)
        shown = {k: _progress_value(record[k])
                 for k in experiment.progress_fields if k in record}
        progress.report(step, **shown)
        window = []
        window_start_time = time.perf_counter()
        window_start_step = step
      if signals.received is not None:
        checkpoint(step)
        name = signal.Signals(signals.received).name
        log(f"Stopped by {name} at step {step}; checkpoint written. Rerun the "
            f"same command (same --workdir {workdir}) to resume from step "
            f"{step}.")
        raise Preempted(128 + signals.received)
      if step % config.checkpoint_every == 0 or step >= config.num_steps:
        checkpoint(step)
  if experiment.finish is not None:
    summary = runs.per_run(lambda st: experiment.finish(st, workdir), state)
    if runs.stacked:
      summary["runs"] = runs.runs
    workdir_lib.write_json(workdir, workdir_lib.SUMMARY_FILE, summary)
  return workdir_lib.read_metrics(workdir)


def define_flags(default_config: str, help_text: str) -> None:
  """`--config` (an ml_collections config file, fields overridable) and
  `--workdir`. Call under `if __name__ == '__main__'` only, so tests can
  import several experiments at once."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  config_flags.DEFINE_config_file("config", default_config, help_text)
  flags.DEFINE_string("workdir", None, "Run directory: config.json, "
                      "metrics.jsonl, checkpoints.", required=True)


def main_for(train: Callable[[Any, str], Any]) -> Callable[[list[str]], None]:
  """An absl `main` that calls `train(config, workdir)` and turns the run
  loop's expected failures into one clear message and a non-zero exit."""

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
      train(flags.FLAGS.config, flags.FLAGS.workdir)
    except Preempted:
      raise
    except (workdir_lib.ConfigMismatchError, workdir_lib.CheckpointError,
            NonFiniteError) as e:
      print(f"Error: {e}", file=sys.stderr, flush=True)
      sys.exit(2 if not isinstance(e, NonFiniteError) else 3)

  return main
