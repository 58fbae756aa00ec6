"""Trains a recurrent network online on the Copy task with a curriculum.

  python -m experiments.copy_task --config configs/copy_task.py --workdir runs/copy

Writes `config.json`, `metrics.jsonl` (one record per `log_every` steps:
step, loss_bits, curriculum_length, steps_per_second, examples_per_second)
and checkpoints into the workdir; the shared run loop (`experiments/runner.py`)
resumes from the newest valid checkpoint when rerun with the same workdir,
refuses a changed config, and checkpoints on SIGTERM/SIGINT.

One chunk of `chunk_steps` steps is one jitted program: the Copy stream is
generated for the chunk, the trainer scans over it, and the curriculum is
updated from the chunk's output-phase error, all on the device.
"""

from __future__ import annotations

from absl import app
import jax
import jax.numpy as jnp

from experiments import online_setup
from experiments import runner
from rtrl.readout import LOG2
from rtrl.tasks import copy_task


def validate(config) -> None:
  for field in ("hidden_size", "batch_size", "num_steps", "chunk_steps",
                "max_length"):
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      raise ValueError(f"config.{field} must be a positive integer, got "
                       f"{value!r}")
  if config.num_steps % config.chunk_steps:
    raise ValueError(f"config.num_steps ({config.num_steps}) must be a "
                     f"multiple of config.chunk_steps ({config.chunk_steps})")
  if config.estimator == "tbptt" and (
      not isinstance(config.truncation, int) or config.truncation <= 0):
    raise ValueError(f"config.truncation must be a positive integer, got "
                     f"{config.truncation!r}")
  if config.estimator == "tbptt" and config.chunk_steps % config.truncation:
    raise ValueError(f"config.chunk_steps ({config.chunk_steps}) must be a "
                     f"multiple of config.truncation ({config.truncation})")
  if config.log_every % config.chunk_steps:
    raise ValueError("config.log_every must be a multiple of "
                     "config.chunk_steps")


def make_experiment(config) -> runner.Experiment:
  """The Copy task's pieces for `runner.run`."""
  validate(config)
  cell = online_setup.make_cell(config)

  def init(key, hparams):
    params_key, trainer_key, data_key = jax.random.split(key, 3)
    params = online_setup.init_params(cell, params_key, copy_task.VOCAB_SIZE,
                                      copy_task.VOCAB_SIZE)
    trainer = online_setup.make_trainer(config, cell, **hparams)
    return {
        "trainer": trainer.init(params, trainer_key, config.batch_size),
        "stream": copy_task.stream_init(data_key, config.batch_size,
                                        config.max_length),
        "curriculum_length": jnp.ones((), jnp.int32),
        "hparams": hparams,
    }

  def train_chunk(state):
    length = state["curriculum_length"]
    stream, chunk = copy_task.generate(state["stream"], length,
                                       config.chunk_steps)
    trainer = online_setup.make_trainer(config, cell, **state["hparams"])
    trainer_state, metrics = trainer.run(state["trainer"], chunk)
    loss_sum, weight_sum = metrics.loss_sum.sum(), metrics.weight_sum.sum()
    error_bits = loss_sum / jnp.maximum(weight_sum, 1.0) / LOG2
    new_length = copy_task.curriculum_update(length, error_bits,
                                             config.error_threshold)
    new_length = jnp.minimum(new_length, config.max_length).astype(jnp.int32)
    state = {"trainer": trainer_state, "stream": stream,
             "curriculum_length": new_length, "hparams": state["hparams"]}
    return state, {"loss_sum": loss_sum, "weight_sum": weight_sum,
                   "curriculum_length": new_length}

  def summarize(window):
    loss = sum(float(m["loss_sum"]) for m in window)
    weight = sum(float(m["weight_sum"]) for m in window)
    return {"loss_bits": loss / max(weight, 1.0) / LOG2,
            "curriculum_length": int(window[-1]["curriculum_length"])}

  name = (f"Copy task | {online_setup.describe(config)} | {config.cell}-"
          f"{config.hidden_size} | batch {config.batch_size} | lr "
          f"{config.learning_rate:.3g}")
  return runner.Experiment(
      name=name, init=init, train_chunk=train_chunk,
      chunk_steps=config.chunk_steps, summarize=summarize,
      examples_per_step=config.batch_size,
      swept_hparams=("learning_rate",),
      progress_fields=("loss_bits", "curriculum_length"))


def train(config, workdir: str) -> dict:
  """Runs (or resumes) the Copy-task run; returns the last metrics record."""
  records = runner.run(config, workdir, make_experiment(config))
  return records[-1] if records else {}


if __name__ == "__main__":
  runner.define_flags("configs/copy_task.py", "Copy-task config file.")
  app.run(runner.main_for(train))
