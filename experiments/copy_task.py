"""Trains a recurrent network online on the Copy task with a curriculum.

  python -m experiments.copy_task --config configs/copy_task.py --workdir runs/copy

Writes `config.json`, `metrics.jsonl` (one record per chunk: step, loss_bits,
curriculum_length, steps_per_second, ...) and checkpoints into the workdir,
and resumes from the newest checkpoint when restarted with the same workdir.
"""

from __future__ import annotations

import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from experiments import online_setup
from experiments import workdir as workdir_lib
from rtrl.readout import LOG2
from rtrl.tasks import copy_task

def validate(config) -> None:
  for field in ("hidden_size", "batch_size", "num_steps", "chunk_steps",
                "max_length"):
    value = config[field]
    if not isinstance(value, int) or value <= 0:
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


def train(config, workdir: str) -> dict:
  """Runs (or resumes) the Copy-task run; returns the last metrics record."""
  validate(config)
  workdir_lib.prepare(workdir, config)
  cell = online_setup.make_cell(config)
  trainer = online_setup.make_trainer(config, cell)
  params_key, trainer_key, data_key = jax.random.split(
      jax.random.PRNGKey(config.seed), 3)
  params = online_setup.init_params(cell, params_key, copy_task.VOCAB_SIZE,
                                    copy_task.VOCAB_SIZE)
  run_state = {
      "trainer": trainer.init(params, trainer_key, config.batch_size),
      "stream": copy_task.stream_init(data_key, config.batch_size,
                                      config.max_length),
      "curriculum_length": jnp.ones((), jnp.int32),
      "step": jnp.zeros((), jnp.int32),
  }
  metrics_writer = workdir_lib.MetricsWriter(workdir)
  restored = workdir_lib.restore_checkpoint(workdir, run_state)
  if restored is not None:
    _, run_state = restored
    metrics_writer.truncate_after(int(run_state["step"]))
    print(f"Resumed from step {int(run_state['step'])} "
          f"(curriculum length {int(run_state['curriculum_length'])}).")

  generate = jax.jit(copy_task.generate, static_argnums=2)
  start = int(run_state["step"])
  progress = workdir_lib.Progress(config.num_steps, start=start)
  name = online_setup.describe(config)
  print(f"Copy task | {name} | {config.cell}-{config.hidden_size} | batch "
        f"{config.batch_size} | lr {config.learning_rate:.3g} | "
        f"{config.num_steps} steps")
  record: dict = {}
  window_loss, window_weight = 0.0, 0.0
  window_start = time.perf_counter()
  step = start
  while step < config.num_steps:
    length = run_state["curriculum_length"]
    stream, chunk = generate(run_state["stream"], length, config.chunk_steps)
    trainer_state, metrics = trainer.run(run_state["trainer"], chunk)
    loss_sum, weight_sum = jax.device_get(
        (metrics.loss_sum.sum(), metrics.weight_sum.sum()))
    error_bits = float(loss_sum / max(weight_sum, 1.0) / LOG2)
    if not np.isfinite(error_bits):
      raise FloatingPointError(f"non-finite loss at step {step}; "
                               "lower the learning rate or enable clip_norm")
    new_length = copy_task.curriculum_update(
        length, error_bits, config.error_threshold)
    step += config.chunk_steps
    run_state = {"trainer": trainer_state, "stream": stream,
                 "curriculum_length": jnp.minimum(new_length,
                                                  config.max_length),
                 "step": jnp.asarray(step, jnp.int32)}
    window_loss += float(loss_sum)
    window_weight += float(weight_sum)
    if step % config.log_every == 0 or step >= config.num_steps:
      elapsed = time.perf_counter() - window_start
      steps_in_window = (step - start) % config.log_every or config.log_every
      record = {
          "step": step,
          "loss_bits": window_loss / max(window_weight, 1.0) / LOG2,
          "curriculum_length": int(run_state["curriculum_length"]),
          "steps_per_second": steps_in_window / elapsed,
          "examples_per_second": steps_in_window * config.batch_size / elapsed,
      }
      metrics_writer.write(record)
      progress.report(step, loss_bits=record["loss_bits"],
                      T=record["curriculum_length"])
      window_loss, window_weight = 0.0, 0.0
      window_start = time.perf_counter()
    if step % config.checkpoint_every == 0 or step >= config.num_steps:
      workdir_lib.save_checkpoint(workdir, step, run_state)
  return record


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  train(flags.FLAGS.config, flags.FLAGS.workdir)


if __name__ == "__main__":
  # Defined here, not at import, so that tests and tools can import this
  # module beside other experiments that define the same flag names.
  config_flags.DEFINE_config_file("config", "configs/copy_task.py",
                                  "Copy-task config file.")
  flags.DEFINE_string("workdir", None, "Run directory.", required=True)
  app.run(main)
