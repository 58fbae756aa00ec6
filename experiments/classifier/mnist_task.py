r"""Trains the paper's MNIST FNN 784-512(ReLU)-10 with RLS, the hybrid, or Adam.

  python -m experiments.mnist --config=configs/mnist.py:rls \
    --workdir=runs/mnist_rls --config.epochs=1

(see `configs/mnist.py` for the presets). Model and data only: the optimiser,
losses, jitted epoch, evaluation and records are `experiments/classifier.py`,
the run loop (config check, checkpoints, resume) `experiments/runner.py`. The
workdir gets `config.json`, `metrics.jsonl` (one record per epoch: `epoch`,
`step`, `train_loss`, `train_loss_last_batch`, `train_loss_curve`,
`train_eval_loss` / `train_eval_accuracy` on the whole training set,
`test_loss`, `test_accuracy`, `steps_per_second`), checkpoints,
`summary.json` and `curves.png`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from absl import app
import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.classifier import experiment as classifier
from experiments.classifier import models as classifier_models
from experiments.loop import runner
from experiments.data import mnist

NUM_CLASSES = mnist.NUM_CLASSES
FNN = classifier_models.FNN
LOSSES = classifier.LOSSES
make_optimizer = classifier.make_optimizer


def load_data(config, data: dict | None = None) -> dict[str, np.ndarray]:
  """`train_inputs` (n, 784) float32 in [0, 1], labels, and the test set."""
  if data is None:
    data = mnist.load_mnist(config.data_dir)
  limit = config.train_limit or None
  return {"train_inputs": data["train_images"][:limit],
          "train_labels": data["train_labels"][:limit],
          "test_inputs": data["test_images"],
          "test_labels": data["test_labels"]}


def train_and_evaluate(config, workdir: str,
                       data: dict[str, Any] | None = None) -> list[dict]:
  """Trains for `config.epochs` (resuming from `workdir`); returns records.

  Args:
    config: a `configs/mnist.py` config.
    workdir: run folder; an existing checkpoint there is resumed from.
    data: optional preloaded `load_mnist` dict (tests load the files once
      for several runs); `config.train_limit` still applies.
  """
  model = FNN(hidden_size=config.hidden_size)
  name = (f"MNIST FNN 784-{config.hidden_size}-10 | {config.optimizer} "
          f"({config.loss}) | batch {config.batch_size}")
  return classifier.train(
      config, workdir, model, load_data(config, data), name,
      classifier_models.example_input(model),
      plot_title=f"MNIST FNN, {config.optimizer} ({config.loss})")


# The pieces `scripts/bench_rls.py` times, kept with their old signatures.


class TrainState(NamedTuple):
  step: jax.Array
  params: Any
  opt_state: Any


def create_train_state(config, key: jax.Array):
  """`(model, TrainState, tx)` for `config` (optimizer, loss, hidden_size)."""
  model = FNN(hidden_size=config.hidden_size)
  tx = classifier.make_optimizer(_with_defaults(config))

  @jax.jit
  def init(key):
    params = model.init(key, jnp.zeros((1, 784), jnp.float32))["params"]
    return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

  return model, init(key), tx


def _with_defaults(config):
  full = classifier.base_config(config.optimizer, config.loss)
  full.update({k: v for k, v in config.items() if k in full})
  return full


def make_train_step(model, tx: optax.GradientTransformation, loss_name: str,
                    uses_layer_inputs: bool) -> Callable:
  """`step(state, images, labels) -> (state, loss)` for one minibatch."""
  step = classifier.make_train_step(model, tx, loss_name, uses_layer_inputs)

  def train_step(state: TrainState, images, labels):
    params, opt_state, loss = step(state.params, state.opt_state, images,
                                   labels)
    return TrainState(state.step + 1, params, opt_state), loss

  return train_step


def train(config, workdir: str) -> list[dict]:
  return train_and_evaluate(config, workdir)
