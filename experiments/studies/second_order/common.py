"""What every runner of the second-order comparison shares: the tasks'
configs and data, the optax optimisers by label (RLS-D, RLS-DA and the
earlier variants), initial weights, minibatch orders and per-epoch
records."""

from __future__ import annotations

import os

import jax
import numpy as np
import optax

from experiments.classifier import experiment
from experiments.classifier import models
from experiments.classifier import tasks
from experiments.classifier import training
from experiments.loop import config_files
from experiments.studies import compare_rls_second_moment as previous
import rls
from rls import damped_second_moment
from rls import grafting

REPO = config_files.REPO_ROOT
# RLS-D, one setting for both tasks (tuned on 1-2 epochs of MNIST and
# CIFAR-10 small, one seed; the benchmark page lists what was tried).
DAMPED = dict(decay=0.9, damping=1.0, gradient_scale=0.1, update_every=20)
# How the direction becomes a step (`damped_rls`).
DAMPED_OPTIONS = dict(mode="plain", momentum=0.0)
DAMPED_SAMPLES = 256

# RLS-DA: `rls.damped_rls_adam` at its defaults (one setting for both
# tasks); "Adam 2e-3" is Adam at RLS-DA's learning rate, for fairness.
ADAM_2E3 = "Adam 2e-3"
OPTAX_VARIANTS = tuple(previous.VARIANTS) + ("RLS-D", "RLS-DA", ADAM_2E3)
VARIANTS = OPTAX_VARIANTS + ("K-FAC",)
EPOCHS = {"mnist": 2, "cifar10": 3}


def slug(label: str) -> str:
  return previous.slug(label)


def task_config(task: str, label: str):
  """The run's config: `compare_rls_second_moment`'s for its variants, the
  Adam preset's (data, model, loss, batch) for RLS-D and K-FAC."""
  base = label if label in previous.VARIANTS else "Adam"
  config = previous.load(task, base, 1, None)
  if label == ADAM_2E3:
    config.learning_rate = 2e-3
  config.data_dir = os.path.join(
    os.environ.get("DATA_DIR", os.path.join(REPO, "..", "shared", "data")),
    task,
  )
  return config


def damped_rls(
  mode: str = "graft",
  learning_rate: float = 1e-3,
  momentum: float = 0.0,
  **overrides,
) -> optax.GradientTransformationExtraArgs:
  """RLS-D: clipping 5 (the paper's), then the damped second-moment RLS's
  direction ``P ∇``: at Adam's per-array step size (``mode='graft'``,
  `rls.grafting.graft`), or normalised by Adam (``'adam'``), descending at
  Adam's learning rate; or ``-η P ∇`` (``'plain'``)."""
  direction = damped_second_moment.scale_by_rls_damped_second_moment(
    **dict(DAMPED, **overrides)
  )
  if mode == "graft":
    inner = grafting.graft(optax.scale_by_adam(), direction)
  elif mode == "adam":
    inner = optax.chain(direction, optax.scale_by_adam())
  else:
    inner, learning_rate = direction, 1.0
  if momentum:
    inner = optax.chain(inner, optax.trace(momentum))
  return optax.chain(
    optax.clip_by_global_norm(5.0), inner, optax.scale(-learning_rate)
  )


def optimizer(label: str, config, damped_overrides: dict):
  """``(tx, needs layer inputs, input samples per layer)``."""
  if label == "RLS-D":
    options = dict(DAMPED_OPTIONS, **damped_overrides)
    return damped_rls(**options), True, DAMPED_SAMPLES
  if label == "RLS-DA":
    return rls.damped_rls_adam(**damped_overrides), True, DAMPED_SAMPLES
  return (
    training.make_optimizer(config),
    training.uses_layer_inputs(config),
    training.input_samples(config),
  )


def load_data(task_name: str, config):
  task = tasks.BY_NAME[task_name]
  arrays, preprocess = task.arrays(config, task.read(config))
  return task, arrays, preprocess


def init_params(task, config, model, seed: int):
  key = jax.random.PRNGKey(seed)
  params = model.init(key, tasks.example_input(task, config))["params"]
  if config.param_init == "pytorch":
    params = models.pytorch_default_init(params, key)
  return params


def epoch_order(seed: int, epoch: int, num_train: int, batch_size: int):
  """(batches, batch_size) indices of the epoch's shuffled full minibatches."""
  order = np.random.default_rng([seed, epoch]).permutation(num_train)
  batches = num_train // batch_size
  return order[: batches * batch_size].reshape(batches, batch_size)


def evaluate_fn(model, config, preprocess):
  return jax.jit(experiment.make_evaluate(model, "mse", 2000, preprocess))


def record(epoch, losses, seconds, params, evaluate, arrays) -> dict:
  train_loss, _ = evaluate(
    params, arrays["train_inputs"], arrays["train_labels"]
  )
  test_loss, test_accuracy = evaluate(
    params, arrays["test_inputs"], arrays["test_labels"]
  )
  losses = np.asarray(losses, np.float64)
  return {
    "epoch": epoch,
    "train_loss": float(losses.mean()),
    "train_eval_loss": float(train_loss),
    "test_loss": float(test_loss),
    "test_accuracy": float(test_accuracy),
    "seconds": seconds,
    "curve": [float(b.mean()) for b in np.array_split(losses, 10)],
  }
