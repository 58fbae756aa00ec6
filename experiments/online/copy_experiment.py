"""Trains a recurrent network online on the Copy task with a curriculum.

  python -m experiments.copy_task --config configs/copy_task.py --workdir runs/copy

Writes `config.json`, `metrics.jsonl` and checkpoints into the workdir; the
shared run loop (`experiments/loop/runner.py`) resumes from the newest valid
checkpoint when rerun with the same workdir, refuses a changed config, and
checkpoints on SIGTERM/SIGINT.

`config.curriculum` picks the protocol (`rtrl/tasks/copy_task.py`):
"official" (the OK code's, the paper's Figure 1: loss on every position, a
moving average of it checked at every sequence start) or "output_only" (loss
and error on the output phase, checked once per chunk). The curriculum (T and
the moving average) is part of the run state: updated inside the jitted
chunk at every step, checkpointed, resumed exactly, one per run when runs
are stacked.

Each record has `loss_bits` (the trained loss, mean over the window, in
bits), `loss_bits_positions` ("all" under official, "output" under
output_only: what `loss_bits` averages over), `output_error_bits` (the
output-phase error under both protocols, for comparing curves),
`curriculum_length` (T at the record's step) and, under official,
`error_ema_bits` (the moving average that drives it). With
`config.shadow_every` > 0 (online single-cell estimators) an exact-RTRL
shadow runs on the same trajectory and each record also has
`cosine_to_rtrl`, the mean over the window's reported steps of the cell
gradient's cosine to exact RTRL's (`experiments/online/shadow_records.py`).

With TBPTT under "official" each window's batches are first generated step by
step with a forward pass at the window's (fixed) parameters, so the moving
average sees every step's loss before the next step's checks, as online.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from experiments.loop import checks
from experiments.loop import runner
from experiments.online import setup as online_setup
from experiments.online import shadow_records
from rtrl import losses as losses_lib
from rtrl import online
from rtrl import readout
from rtrl.readout import LOG2
from rtrl.tasks import copy_task

# Fields added after runs were saved (`runner.Experiment.resume_defaults`).
RESUME_DEFAULTS = {**online_setup.RESUME_DEFAULTS, "length_rule": "uniform"}


def validate(config) -> None:
  """Raises ValueError naming the first bad field (the step schedule is the
  run loop's: `experiments/loop/checks.schedule`)."""
  checks.positive_ints(
    config, "hidden_size", "batch_size", "chunk_steps", "max_length"
  )
  online_setup.validate_trainer(config)
  online_setup.validate_shadow_every(config, config.shadow_every)
  if config.length_rule not in copy_task.LENGTH_RULES:
    raise ValueError(
      f"config.length_rule must be one of "
      f"{copy_task.LENGTH_RULES}, got {config.length_rule!r}"
    )
  if config.curriculum not in copy_task.CURRICULA:
    raise ValueError(
      f"config.curriculum must be one of "
      f"{copy_task.CURRICULA}, got {config.curriculum!r}"
    )


def per_example_loss(cell, readout_params, cell_state, targets):
  """(B,) softmax cross-entropy (nats) of the readout at `cell_state`."""
  hidden = jax.vmap(cell.output)(cell_state)
  logits = jax.vmap(readout.linear().apply, in_axes=(None, 0))(
    readout_params, hidden
  )
  return jax.vmap(losses_lib.softmax_cross_entropy)(logits, targets)


class CopyShadowStepMetrics(NamedTuple):
  """`copy_task.CopyStepMetrics`' fields (what `copy_task.run_chunk` reads),
  then the step's `rtrl.online.ShadowStepMetrics` (`config.shadow_every` >
  0)."""

  loss_sum: jax.Array
  weight_sum: jax.Array
  output_loss_sum: jax.Array
  output_weight_sum: jax.Array
  shadow: online.ShadowStepMetrics


def make_online_chunk(config, cell, trainer):
  """An online trainer's chunk: one update per step, the curriculum checked
  inside (`copy_task.run_chunk`)."""
  official = config.curriculum == "official"

  def train_step(trainer_state, batch, output_weights):
    new_state, metrics = trainer.step(trainer_state, batch)
    if official:  # The output phase is a part of the loss.
      losses = per_example_loss(
        cell,
        trainer_state.params["readout"],
        new_state.cell_state,
        batch.targets,
      )
      output_loss = (losses * output_weights).sum()
    else:
      output_loss = metrics.loss_sum
    step = copy_task.CopyStepMetrics(
      metrics.loss_sum, metrics.weight_sum, output_loss, output_weights.sum()
    )
    if config.shadow_every:
      return new_state, CopyShadowStepMetrics(*step, shadow=metrics)
    return new_state, step

  def chunk(trainer_state, stream, curriculum):
    carry, outputs = copy_task.run_chunk(
      train_step,
      trainer_state,
      stream,
      curriculum,
      config.chunk_steps,
      curriculum=config.curriculum,
      threshold=config.error_threshold,
      length_rule=config.length_rule,
    )
    return carry, outputs.metrics

  return chunk


def make_forward_step(config, cell, params):
  """`(cell_state, batch, output_weights) -> (cell_state, CopyStepMetrics)`:
  a forward step at fixed `params`, for `copy_task.run_chunk`."""
  initial = online.broadcast_state(cell.initial_state(), config.batch_size)

  def forward_step(cell_state, batch, output_weights):
    cell_state = online.where_reset(batch.resets, initial, cell_state)
    cell_state = jax.vmap(cell.step, in_axes=(None, 0, 0))(
      params["cell"], cell_state, batch.inputs
    )
    losses = per_example_loss(
      cell, params["readout"], cell_state, batch.targets
    )
    return cell_state, copy_task.CopyStepMetrics(
      (losses * batch.weights).sum(),
      batch.weights.sum(),
      (losses * output_weights).sum(),
      output_weights.sum(),
    )

  return forward_step


def make_official_tbptt_chunk(config, cell, trainer):
  """TBPTT under "official": each window's steps interleave a forward pass at
  the window's parameters with the curriculum, then one TBPTT update, so the
  moving average sees every step's loss as online."""

  def window(carry, _):
    trainer_state, stream, curriculum = carry
    forward_step = make_forward_step(config, cell, trainer_state.params)
    (_, stream, curriculum), outputs = copy_task.run_chunk(
      forward_step,
      trainer_state.cell_state,
      stream,
      curriculum,
      config.truncation,
      curriculum="official",
      threshold=config.error_threshold,
      length_rule=config.length_rule,
    )
    trainer_state, _ = trainer.step(trainer_state, outputs.batches)
    return (trainer_state, stream, curriculum), outputs.metrics

  def chunk(trainer_state, stream, curriculum):
    carry, metrics = jax.lax.scan(
      window,
      (trainer_state, stream, curriculum),
      None,
      length=config.chunk_steps // config.truncation,
    )
    return carry, jax.tree_util.tree_map(
      lambda a: a.reshape((-1,) + a.shape[2:]), metrics
    )

  return chunk


def make_output_only_tbptt_chunk(config, trainer):
  """TBPTT under "output_only": T is fixed within the chunk, so the chunk is
  generated whole, trained on, then checked (`copy_task.check_after_chunk`)."""

  def chunk(trainer_state, stream, curriculum):
    stream, batches = copy_task.generate(
      stream, curriculum.length, config.chunk_steps, curriculum="output_only"
    )
    trainer_state, metrics = trainer.run(trainer_state, batches)
    metrics = copy_task.CopyStepMetrics(
      metrics.loss_sum, metrics.weight_sum, metrics.loss_sum, metrics.weight_sum
    )
    curriculum = copy_task.check_after_chunk(
      curriculum, metrics, config.max_length, config.error_threshold
    )
    return (trainer_state, stream, curriculum), metrics

  return chunk


def make_chunk(config, cell, trainer):
  """`(trainer_state, stream, curriculum) -> ((trainer_state, stream,
  curriculum), CopyStepMetrics per step)` for `config.chunk_steps` steps."""
  if config.estimator != "tbptt":
    return make_online_chunk(config, cell, trainer)
  if config.curriculum == "official":
    return make_official_tbptt_chunk(config, cell, trainer)
  return make_output_only_tbptt_chunk(config, trainer)


def make_init(config, cell):
  """`(key, hparams) -> state`: a run's fresh state (trainer, streams,
  curriculum and the swept hyper-parameters)."""

  def init(key, hparams):
    params_key, trainer_key, data_key = jax.random.split(key, 3)
    params = online_setup.init_params(
      cell,
      params_key,
      copy_task.VOCAB_SIZE,
      copy_task.VOCAB_SIZE,
      config.init_stddev,
      readout_fn=online_setup.make_readout(config),
    )
    trainer = online_setup.make_trainer(
      config, cell, **hparams, shadow_every=config.shadow_every
    )
    curriculum = copy_task.curriculum_init()
    return {
      "trainer": trainer.init(params, trainer_key, config.batch_size),
      "stream": copy_task.stream_init(
        data_key, config.batch_size, config.max_length
      ),
      "curriculum_length": curriculum.length,
      "error_ema": curriculum.error_ema,
      "hparams": hparams,
    }

  return init


def make_train_chunk(config, cell):
  """`state -> (state, metrics)`: one chunk, metrics summed over its steps
  plus the curriculum at its end."""

  def train_chunk(state):
    trainer = online_setup.make_trainer(
      config, cell, **state["hparams"], shadow_every=config.shadow_every
    )
    chunk = make_chunk(config, cell, trainer)
    curriculum = copy_task.CurriculumState(
      state["curriculum_length"], state["error_ema"]
    )
    (trainer_state, stream, curriculum), metrics = chunk(
      state["trainer"], state["stream"], curriculum
    )
    state = {
      "trainer": trainer_state,
      "stream": stream,
      "curriculum_length": curriculum.length,
      "error_ema": curriculum.error_ema,
      "hparams": state["hparams"],
    }
    sums = {
      name: getattr(metrics, name).sum()
      for name in copy_task.CopyStepMetrics._fields
    }
    if config.shadow_every:
      sums.update(shadow_records.shadow_sums(metrics.shadow))
    return state, {
      **sums,
      "curriculum_length": curriculum.length,
      "error_ema": curriculum.error_ema,
    }

  return train_chunk


def summarize(config, window: list[dict]) -> dict:
  """The metrics record of a window of `train_chunk` metrics (see the module
  docstring for its fields)."""
  total = {
    name: sum(float(m[name]) for m in window)
    for name in copy_task.CopyStepMetrics._fields
  }
  record = {
    "loss_bits": total["loss_sum"] / max(total["weight_sum"], 1.0) / LOG2,
    "loss_bits_positions": (
      "all" if config.curriculum == "official" else "output"
    ),
    "output_error_bits": (
      total["output_loss_sum"] / max(total["output_weight_sum"], 1.0) / LOG2
    ),
    "curriculum_length": int(window[-1]["curriculum_length"]),
  }
  if config.curriculum == "official":
    record["error_ema_bits"] = float(window[-1]["error_ema"])
  if "reported_count" in window[0]:  # config.shadow_every > 0
    record.update(shadow_records.shadow_means(window))
  return record


def describe(config) -> str:
  return (
    f"Copy task | {online_setup.describe(config)} | {config.cell}-"
    f"{config.hidden_size} | batch {config.batch_size} | lr "
    f"{config.learning_rate:.3g} | curriculum {config.curriculum}"
  )


def make_experiment(config) -> runner.Experiment:
  """The Copy task's pieces for `runner.run`."""
  validate(config)
  cell = online_setup.make_cell(config)
  return runner.Experiment(
    name=describe(config),
    init=make_init(config, cell),
    train_chunk=make_train_chunk(config, cell),
    chunk_steps=config.chunk_steps,
    summarize=lambda window: summarize(config, window),
    examples_per_step=config.batch_size,
    swept_hparams=("learning_rate",),
    batch_axes=online_setup.batch_axes,
    batch_size=config.batch_size,
    progress_fields=("loss_bits", "output_error_bits", "curriculum_length"),
    resume_defaults=RESUME_DEFAULTS,
    # A uniform guess over the 4 symbols: 2 bits.
    chance_loss=("loss_bits", float(np.log2(copy_task.VOCAB_SIZE))),
  )


def train(config, workdir: str) -> dict:
  """Runs (or resumes) the Copy-task run; returns the last metrics record."""
  records = runner.run(config, workdir, make_experiment(config))
  return records[-1] if records else {}
