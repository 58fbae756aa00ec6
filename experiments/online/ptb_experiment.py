"""Trains a recurrent network on character-level Penn Treebank (OK paper 4.1.2).

  python -m experiments.ptb --config configs/ptb.py:small --workdir runs/ptb_small
  python -m experiments.ptb --config configs/ptb.py --workdir runs/ptb   # paper

Online RTRL approximations (8-OK by default) or TBPTT on B contiguous streams
of the training text (`rtrl/tasks/ptb.py`), one parameter update per step
(per window for TBPTT). Every `eval_every` steps the valid BPC is measured
over the whole valid split with frozen parameters (`rtrl/tasks/ptb_eval.py`);
the parameters with the best valid BPC are kept in the run state (so they are
checkpointed) and the test BPC is computed at them when the run ends.

The workdir gets `config.json`, `metrics.jsonl` (`step`, `train_bpc` (mean
over the steps since the previous record), `train_loss_ema_bits` (the
official code's logged moving average of the per-step loss, decay 0.999 from
1 bit), `steps_per_second`, and `valid_bpc` at eval steps), checkpoints and `summary.json`
(`best_valid_bpc`, `best_step`, `test_bpc`). With `config.shadow_every` > 0
(online single-cell estimators) an exact-RTRL shadow runs on the same
trajectory and each record also has `cosine_to_rtrl`, the mean over the
window's reported steps of the cell gradient's cosine to exact RTRL's
(`experiments/online/shadow_records.py`). The shared run loop
(`experiments/loop/runner.py`) resumes a rerun from the newest valid checkpoint;
with `num_seeds > 1` or a `learning_rates` list the runs train as one
vmapped program and every value becomes a list over runs.

The official code's details are config fields (all set by the `official`
preset, see `configs/common.py`): `init_stddev=0.01` (every
weight normal(0, 0.01)), `cell_clip_norm=3200` (its 100 in our units; the
cell gradient only), and `reset_every=100` for its fixed reset rule instead
of the paper's `reset_probability=0.01`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from experiments.data import load_ptb_split
from experiments.loop import checks
from experiments.loop import runner
from experiments.online import official
from experiments.online import setup as online_setup
from experiments.online import shadow_records
from rtrl.readout import LOG2
from rtrl.tasks import ptb
from rtrl.tasks import ptb_eval

# Fields added after runs were saved (`runner.Experiment.resume_defaults`).
RESUME_DEFAULTS = {
  **online_setup.RESUME_DEFAULTS,
  "text_layout": "standard",
  "stream_offsets": "even",
}


def validate(config) -> None:
  """Raises ValueError naming the first bad field (the step schedule is the
  run loop's: `experiments/loop/checks.schedule`)."""
  checks.positive_ints(
    config, "hidden_size", "batch_size", "chunk_steps", "eval_batch_size"
  )
  online_setup.validate_trainer(config)
  online_setup.validate_shadow_every(config, config.shadow_every)
  if config.text_layout not in ptb.LAYOUTS:
    raise ValueError(
      f"config.text_layout must be one of {ptb.LAYOUTS}, got "
      f"{config.text_layout!r}"
    )
  if config.stream_offsets not in ptb.STREAM_OFFSETS:
    raise ValueError(
      f"config.stream_offsets must be one of "
      f"{ptb.STREAM_OFFSETS}, got {config.stream_offsets!r}"
    )
  if not 0.0 <= config.reset_probability <= 1.0:
    raise ValueError(
      f"config.reset_probability must be in [0, 1], got "
      f"{config.reset_probability!r}"
    )
  checks.nonnegative_ints(
    config, "reset_every", "eval_reset_every", zero_means="off"
  )


def describe(config) -> str:
  return (
    f"char-PTB | {online_setup.describe(config)} | {config.cell}-"
    f"{config.hidden_size} | batch {config.batch_size} | lr "
    f"{config.learning_rate:.3g}"
  )


def batch_axes(state: dict) -> dict:
  """`online_setup.batch_axes`, with the stream's reset key replicated."""
  axes = online_setup.batch_axes(state)
  axes["stream"] = axes["stream"]._replace(key=None)
  return axes


def load_ids(config, split: str):
  """The `(N,)` character ids of `split` ('train', 'valid' or 'test')."""
  return load_ptb_split(
    split, config.data_dir, config.verify_md5, config.text_layout
  )


def load_eval_streams(config, split: str) -> ptb_eval.EvalStreams:
  """The whole `split` laid out for evaluation (`config.eval_batch_size`
  streams)."""
  ids = load_ids(config, split)
  return ptb_eval.make_eval_streams(
    ids, config.eval_batch_size, config.eval_reset_every
  )


def load_data(config) -> dict:
  """The run loop's `data` (a jit argument, never checkpointed): the
  training text `(N,)` and the valid split's `EvalStreams`."""
  return {
    "train": jnp.asarray(load_ids(config, "train")),
    "valid": load_eval_streams(config, "valid"),
  }


def make_init(config, cell, num_symbols: int):
  """`(key, hparams) -> state`: the trainer, the `B` training streams over
  `num_symbols` characters, the step count and the best parameters so far."""
  dtype = jnp.asarray(0.0).dtype

  def init(key, hparams):
    params_key, trainer_key, data_key = jax.random.split(key, 3)
    params = online_setup.init_params(
      cell,
      params_key,
      ptb.VOCAB_SIZE,
      ptb.VOCAB_SIZE,
      config.init_stddev,
      readout_fn=online_setup.make_readout(config),
    )
    trainer = online_setup.make_trainer(
      config, cell, **hparams, shadow_every=config.shadow_every
    )
    return {
      "trainer": trainer.init(params, trainer_key, config.batch_size),
      "stream": ptb.stream_init(
        data_key, num_symbols, config.batch_size, config.stream_offsets
      ),
      "step": jnp.zeros((), jnp.int32),
      "best_params": params,
      "best_valid_bpc": jnp.full((), jnp.inf, dtype),
      "best_step": jnp.zeros((), jnp.int32),
      # The official code's logged training-loss average (bits).
      "train_loss_ema": jnp.ones((), dtype),
      "hparams": hparams,
    }

  return init


def loss_moving_average(average: jax.Array, metrics) -> jax.Array:
  """The official code's logged training loss: at every step `average <-
  d * average + (1 - d) * loss`, `loss` the step's batch-mean cross-entropy
  in bits, `d = official.LOSS_EMA_DECAY` (from 1 bit at step 0)."""
  decay = official.LOSS_EMA_DECAY
  step_bits = metrics.loss_sum / jnp.maximum(metrics.weight_sum, 1.0) / LOG2

  def update(value, bits):
    return decay * value + (1.0 - decay) * bits, None

  average, _ = jax.lax.scan(update, average, step_bits.astype(average.dtype))
  return average


def make_train_chunk(config, cell):
  """`(state, data) -> (state, metrics)` over a chunk: the chunk's loss and
  weight sums and the loss moving average at its end."""

  def train_chunk(state, data):
    trainer = online_setup.make_trainer(
      config, cell, **state["hparams"], shadow_every=config.shadow_every
    )
    stream, chunk = ptb.stream_chunk(
      data["train"],
      state["stream"],
      config.chunk_steps,
      config.reset_probability,
      config.reset_every,
    )
    trainer_state, metrics = trainer.run(state["trainer"], chunk)
    average = loss_moving_average(state["train_loss_ema"], metrics)
    state = {
      **state,
      "trainer": trainer_state,
      "stream": stream,
      "step": state["step"] + config.chunk_steps,
      "train_loss_ema": average,
    }
    sums = {
      "loss_sum": metrics.loss_sum.sum(),
      "weight_sum": metrics.weight_sum.sum(),
      "train_loss_ema": average,
    }
    if config.shadow_every:
      sums.update(shadow_records.shadow_sums(metrics))
    return state, sums

  return train_chunk


def summarize(window: list[dict]) -> dict:
  loss = sum(float(m["loss_sum"]) for m in window)
  weight = sum(float(m["weight_sum"]) for m in window)
  record = {
    "train_bpc": loss / max(weight, 1.0) / LOG2,
    "train_loss_ema_bits": float(window[-1]["train_loss_ema"]),
  }
  if "reported_count" in window[0]:  # config.shadow_every > 0
    record.update(shadow_records.shadow_means(window))
  return record


def make_evaluate(cell):
  """`(state, data) -> (state, {'valid_bpc'})`: the valid BPC at the current
  parameters; they become the best ones if it is the lowest so far."""

  def evaluate(state, data):
    params = state["trainer"].params
    bits, count = ptb_eval.bits_sums(cell, params, data["valid"])
    valid_bpc = bits / count
    better = valid_bpc < state["best_valid_bpc"]
    keep = lambda new, old: jnp.where(better, new, old)
    state = {
      **state,
      "best_params": jax.tree_util.tree_map(keep, params, state["best_params"]),
      "best_valid_bpc": keep(valid_bpc, state["best_valid_bpc"]),
      "best_step": keep(state["step"], state["best_step"]),
    }
    return state, {"valid_bpc": valid_bpc}

  return evaluate


def make_finish(config, cell):
  """`(state, workdir) -> summary`: the best valid BPC, its step and the test
  BPC at its parameters (the test split is read on first use, once)."""
  test_streams = []

  def finish(state, workdir):
    del workdir
    best_step = int(state["best_step"])
    summary = {
      "best_valid_bpc": float(state["best_valid_bpc"]),
      "best_step": best_step,
      "test_bpc": None,
    }
    if best_step > 0:
      if not test_streams:
        test_streams.append(load_eval_streams(config, "test"))
      summary["test_bpc"] = ptb_eval.bpc(
        cell, state["best_params"], test_streams[0]
      )
    print(
      f"Best valid BPC {summary['best_valid_bpc']:.4f} at step "
      f"{best_step}; test BPC there: {summary['test_bpc']}"
    )
    return summary

  return finish


def make_experiment(config) -> runner.Experiment:
  """The PTB pieces for `runner.run` (loads the data once, here).

  `learning_rate` may be swept (`config.learning_rates`) and `num_seeds` > 1
  stacks runs.
  """
  validate(config)
  cell = online_setup.make_cell(config)
  data = load_data(config)
  return runner.Experiment(
    name=describe(config),
    init=make_init(config, cell, data["train"].size),
    train_chunk=make_train_chunk(config, cell),
    chunk_steps=config.chunk_steps,
    summarize=summarize,
    evaluate=make_evaluate(cell),
    eval_every=config.eval_every,
    summarize_eval=lambda metrics: {"valid_bpc": float(metrics["valid_bpc"])},
    finish=make_finish(config, cell),
    progress_fields=("train_bpc", "valid_bpc"),
    examples_per_step=config.batch_size,
    data=data,
    swept_hparams=("learning_rate",),
    batch_axes=batch_axes,
    batch_size=config.batch_size,
    resume_defaults=RESUME_DEFAULTS,
    # A uniform guess over the 50 symbols: log2(50) = 5.64 bits.
    chance_loss=("train_bpc", math.log2(ptb.VOCAB_SIZE)),
  )


def train(config, workdir: str) -> list[dict]:
  """Runs (or resumes) one PTB run; returns all metrics records."""
  return runner.run(config, workdir, make_experiment(config))
