"""Trains a recurrent network online on a task of the suite
(`rtrl.tasks.suite`: adding, copy_memory, rotation, rotation_recall, anbn,
henon, lorenz, mackey_glass).

  python -m experiments.suite_task --config configs/suite_task.py:adding --workdir runs/suite_adding

`config.task` names the task and `config.task_settings` holds its settings
(`suite.make_task(config.task, **config.task_settings)`); the model,
estimator and optimiser fields are the Copy task's
(`experiments/online/setup.py`). Each lane of the batch runs the task's
sequences back to back, state and tangents reset at each sequence start.
Online estimators update at every step (`suite.train_chunk`); TBPTT
generates each window, scores it with a forward pass at the window's
parameters (what its loss is taken of) and then updates once.

Writes `config.json`, `metrics.jsonl` and checkpoints into the workdir; the
shared run loop (`experiments/loop/runner.py`) resumes from the newest valid
checkpoint when rerun with the same workdir. Each record has `loss` (the
mean per weighted step of the task's loss, in its units: nats for the
classification tasks, ½ squared error for the regression tasks) and the
task metric under its name (`mse`, `accuracy` or `sequences_solved`),
both over the steps since the previous record, as each step scored them.

`config.shadow_every` > 0 (online single-cell estimators only; 0: off) runs
an exact-RTRL shadow on the same trajectory
(`rtrl.online.make_online_trainer`'s `shadow_every`, at exact RTRL's
cost): each record then also has `cosine_to_rtrl`, the mean over the
window's reported steps (those with a finite cosine; NaN if none) of the
cell gradient's cosine to exact RTRL's, and the mean of each of the
estimator's own metrics (SK-RTRL's `certificate`) over the reported steps
where it is finite, with the fraction of them it was finite at
(`certificate_finite_fraction`: the bound may overflow on long sequences):

  python -m experiments.suite_task --config configs/suite_task.py:henon --config.estimator=sk_rtrl --config.rank=4 --config.shadow_every=10 --workdir runs/x
"""

from __future__ import annotations

import jax

from experiments.loop import checks
from experiments.loop import runner
from experiments.online import setup as online_setup
from experiments.online import shadow_records
from rtrl.tasks import suite


def make_task(config) -> suite.SuiteTask:
  """`config.task` with `config.task_settings` (ValueErrors name a bad
  one)."""
  if config.task not in suite.names():
    raise ValueError(
      f"config.task must be one of {suite.names()}, got {config.task!r}"
    )
  return suite.make_task(config.task, **dict(config.task_settings))


def validate(config) -> None:
  """Raises ValueError naming the first bad field (the step schedule is the
  run loop's: `experiments/loop/checks.schedule`)."""
  checks.positive_ints(config, "hidden_size", "batch_size", "chunk_steps")
  online_setup.validate_trainer(config)
  online_setup.validate_shadow_every(config, config.shadow_every)
  make_task(config)


def initial_state(config, cell, task: suite.SuiteTask, trainer, keys):
  """One run's `(trainer state, stream, metric state)` from `keys`, the
  (parameters, trainer, data) keys: fresh parameters
  (`online_setup.init_params`), the trainer's state, the task's streams and
  the metric's per-lane state."""
  params_key, trainer_key, data_key = keys
  params = online_setup.init_params(
    cell,
    params_key,
    task.input_size,
    task.output_size,
    config.init_stddev,
    readout_fn=online_setup.make_readout(config),
  )
  batch = config.batch_size
  return (
    trainer.init(params, trainer_key, batch),
    task.init_stream(data_key, batch),
    task.metric.init(batch),
  )


def make_init(config, cell, task: suite.SuiteTask):
  """`(key, hparams) -> state`: trainer, streams with the metric's per-lane
  state, and the swept hyper-parameters."""

  def init(key, hparams):
    trainer = online_setup.make_trainer(
      config,
      cell,
      **hparams,
      loss=task.loss,
      shadow_every=config.shadow_every,
    )
    keys = jax.random.split(key, 3)
    trainer_state, stream, metric_state = initial_state(
      config, cell, task, trainer, keys
    )
    return {
      "trainer": trainer_state,
      "stream": (stream, metric_state),
      "hparams": hparams,
    }

  return init


def make_tbptt_chunk(config, cell, task, trainer, readout):
  """TBPTT: per window, a forward pass at the window's parameters scores it,
  then one update (`chunk_steps / truncation` windows)."""

  def window(carry, _):
    trainer_state, stream, metric_state = carry
    stream, batches = task.chunk(stream, config.truncation)
    (_, metric_state), outputs = suite.forward_chunk(
      task,
      cell,
      trainer_state.params,
      trainer_state.cell_state,
      metric_state,
      batches,
      readout,
    )
    trainer_state, _ = trainer.step(trainer_state, batches)
    return (trainer_state, stream, metric_state), outputs

  def chunk(trainer_state, stream, metric_state):
    carry, outputs = jax.lax.scan(
      window,
      (trainer_state, stream, metric_state),
      None,
      length=config.chunk_steps // config.truncation,
    )
    return carry, jax.tree_util.tree_map(
      lambda a: a.reshape((-1,) + a.shape[2:]), outputs
    )

  return chunk


def make_train_chunk(config, cell, task: suite.SuiteTask):
  """`state -> (state, metrics)`: one chunk, loss and metric sums."""
  readout = online_setup.make_readout(config)

  def train_chunk(state):
    trainer = online_setup.make_trainer(
      config,
      cell,
      **state["hparams"],
      loss=task.loss,
      shadow_every=config.shadow_every,
    )
    stream, metric_state = state["stream"]
    if config.estimator == "tbptt":
      chunk = make_tbptt_chunk(config, cell, task, trainer, readout)
      carry, outputs = chunk(state["trainer"], stream, metric_state)
    else:
      carry, outputs = suite.train_chunk(
        task,
        cell,
        trainer,
        state["trainer"],
        stream,
        metric_state,
        config.chunk_steps,
        readout,
      )
    trainer_state, stream, metric_state = carry
    state = {
      "trainer": trainer_state,
      "stream": (stream, metric_state),
      "hparams": state["hparams"],
    }
    metrics = {
      "loss_sum": outputs.loss.loss_sum.sum(),
      "weight_sum": outputs.loss.weight_sum.sum(),
      "metric_sum": outputs.metric.value_sum.sum(),
      "metric_weight_sum": outputs.metric.weight_sum.sum(),
    }
    if config.shadow_every:
      metrics.update(shadow_records.shadow_sums(outputs.loss))
    return state, metrics

  return train_chunk


# The per-chunk sums every run has (the shadow's come beside them).
SUMS = ("loss_sum", "weight_sum", "metric_sum", "metric_weight_sum")


def make_summarize(task: suite.SuiteTask):
  """The metrics record of a window of `train_chunk` metrics."""

  def summarize(window: list[dict]) -> dict:
    total = {name: sum(float(m[name]) for m in window) for name in SUMS}
    weight = total["metric_weight_sum"]
    record = {
      "loss": total["loss_sum"] / max(total["weight_sum"], 1.0),
      # The metric's ratio of sums (task_metrics.value) over the window.
      task.metric.name: total["metric_sum"] / weight if weight else 0.0,
    }
    if "reported_count" in window[0]:
      record.update(shadow_records.shadow_means(window))
    return record

  return summarize


def describe(config, task: suite.SuiteTask) -> str:
  baseline = task.metric.baseline
  return (
    f"{task.name} {task.settings} | {online_setup.describe(config)} | "
    f"{config.cell}-{config.hidden_size} | batch {config.batch_size} | lr "
    f"{config.learning_rate:.3g} | {task.metric.name} baseline "
    f"{baseline if baseline is None else round(baseline, 4)} "
    f"({task.metric.baseline_name})"
  )


def make_experiment(config) -> runner.Experiment:
  """The suite task's pieces for `runner.run`."""
  validate(config)
  task = make_task(config)
  cell = online_setup.make_cell(config)
  return runner.Experiment(
    name=describe(config, task),
    init=make_init(config, cell, task),
    train_chunk=make_train_chunk(config, cell, task),
    chunk_steps=config.chunk_steps,
    summarize=make_summarize(task),
    examples_per_step=config.batch_size,
    swept_hparams=("learning_rate",),
    batch_axes=online_setup.batch_axes,
    batch_size=config.batch_size,
    progress_fields=("loss", task.metric.name)
    + (("cosine_to_rtrl",) if config.shadow_every else ()),
    resume_defaults=online_setup.RESUME_DEFAULTS,
  )


def train(config, workdir: str) -> dict:
  """Runs (or resumes) the run; returns the last metrics record."""
  records = runner.run(config, workdir, make_experiment(config))
  return records[-1] if records else {}
