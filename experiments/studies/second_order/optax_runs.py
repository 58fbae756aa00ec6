"""The optax optimisers' runs: one seed per jitted `lax.scan` epoch, and
the interleaved per-step timing."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from experiments.classifier import training
from experiments.studies.second_order.common import epoch_order
from experiments.studies.second_order.common import evaluate_fn
from experiments.studies.second_order.common import init_params
from experiments.studies.second_order.common import load_data
from experiments.studies.second_order.common import optimizer
from experiments.studies.second_order.common import record
from experiments.studies.second_order.common import task_config


def prepare_optax(task_name, label, seed, damped_overrides=None):
  """``(run_epoch, params, opt_state, data, evaluate)`` of one seed:
  ``run_epoch(params, opt_state, order, train_x, train_y) -> (params,
  opt_state, losses)`` scans the minibatches of ``order``."""
  config = task_config(task_name, label)
  task, arrays, preprocess = load_data(task_name, config)
  model = task.make_model(config)
  tx, with_inputs, samples = optimizer(label, config, damped_overrides or {})
  step = training.make_train_step(model, tx, "mse", with_inputs, samples)
  params = init_params(task, config, model, seed)

  def run_epoch(params, opt_state, order, train_x, train_y):
    def body(carry, indices):
      params, opt_state = carry
      inputs = preprocess(train_x[indices])
      params, opt_state, loss = step(
        params, opt_state, inputs, train_y[indices]
      )
      return (params, opt_state), loss

    (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), order)
    return params, opt_state, losses

  data = (
    jnp.asarray(arrays["train_inputs"]),
    jnp.asarray(arrays["train_labels"]),
  )
  evaluate = evaluate_fn(model, config, preprocess)
  return run_epoch, params, tx.init(params), data, (evaluate, arrays, config)


def run_optax(task_name, label, seed, epochs, damped_overrides=None):
  """One seed of an optax optimiser; a list of per-epoch records."""
  run_epoch, params, opt_state, (train_x, train_y), extra = prepare_optax(
    task_name, label, seed, damped_overrides
  )
  evaluate, arrays, config = extra
  num_train = train_x.shape[0]
  order = epoch_order(seed, 1, num_train, config.batch_size)
  compiled = (
    jax.jit(run_epoch)
    .lower(params, opt_state, order, train_x, train_y)
    .compile()
  )
  records = []
  for epoch in range(1, epochs + 1):
    order = epoch_order(seed, epoch, num_train, config.batch_size)
    start = time.perf_counter()
    params, opt_state, losses = compiled(
      params, opt_state, order, train_x, train_y
    )
    losses = jax.block_until_ready(losses)
    seconds = time.perf_counter() - start
    records.append(record(epoch, losses, seconds, params, evaluate, arrays))
    print(f"  {label} seed {seed} epoch {epoch}: {records[-1]}", flush=True)
  return records, {}


def step_seconds(task_name, labels, steps=20, repeats=5) -> dict:
  """Seconds per training step of each optax optimiser: `steps` steps in
  one jitted scan, best of `repeats`, the optimisers interleaved so that
  the load of a shared machine hits them alike."""
  runs = {}
  for label in labels:
    run_epoch, params, opt_state, data, (_, _, config) = prepare_optax(
      task_name, label, 0
    )
    order = epoch_order(0, 1, data[0].shape[0], config.batch_size)[:steps]
    compiled = (
      jax.jit(run_epoch).lower(params, opt_state, order, *data).compile()
    )
    runs[label] = (compiled, (params, opt_state, order) + data)
  best = {label: float("inf") for label in labels}
  for _ in range(repeats):
    for label, (compiled, args) in runs.items():
      start = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      best[label] = min(best[label], (time.perf_counter() - start) / steps)
  return best
