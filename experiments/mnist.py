r"""Trains the paper's MNIST FNN with RLS, the RLS+Adam hybrid, or Adam.

  python -m experiments.mnist --config=configs/mnist.py:rls \
    --workdir=runs/mnist_rls --config.epochs=1

(see `configs/mnist.py` for the other commands). The workdir gets
`config.json`, `metrics.jsonl`, checkpoints that a restart with the same
`--workdir` resumes from, and `curves.png`. One metrics record per epoch:
`epoch`, `step`, `train_loss` (mean minibatch loss of the epoch),
`train_loss_last_batch`, `train_eval_loss` / `train_eval_accuracy` (whole
training set, end-of-epoch parameters), `test_loss`, `test_accuracy`,
`seconds` (the epoch's training only: compilation and evaluation excluded)
and `steps_per_second`.

An epoch is one jitted `lax.scan` over its shuffled minibatches, so the host
waits for the device once per epoch, not once per step.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

from absl import app
from absl import flags
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np
import optax

import rls
from experiments import workdir as workdir_lib
from experiments.data import mnist as mnist_data

NUM_CLASSES = mnist_data.NUM_CLASSES
HIDDEN_LAYER = "hidden"
OUTPUT_LAYER = "output"
OPTIMIZERS = ("rls", "rls_hybrid", "adam")


class FNN(nn.Module):
  """784-`hidden_size`(ReLU)-10 with an identity output (logits or targets)."""
  hidden_size: int = 512
  num_classes: int = NUM_CLASSES

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    hidden = nn.relu(nn.Dense(self.hidden_size, name=HIDDEN_LAYER)(images))
    return nn.Dense(self.num_classes, name=OUTPUT_LAYER)(hidden)


def mse_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  """Eq. (57): `||Z - Z*||_F^2 / (2M)` with one-hot targets `Z*`."""
  targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
  return 0.5 * jnp.mean(jnp.sum((outputs - targets) ** 2, axis=-1))


def cross_entropy_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  return jnp.mean(
      optax.softmax_cross_entropy_with_integer_labels(outputs, labels))


LOSSES = {"mse": mse_loss, "cross_entropy": cross_entropy_loss}


def make_optimizer(config) -> optax.GradientTransformationExtraArgs:
  """Gradient clipping, then RLS, RLS (hidden) + Adam (output), or Adam."""
  if config.optimizer not in OPTIMIZERS:
    raise ValueError(f"optimizer={config.optimizer!r}; expected one of "
                     f"{OPTIMIZERS}")
  rls_kwargs = dict(
      forgetting_factor=config.forgetting_factor, ratio=config.ratio,
      gradient_scale=config.gradient_scale, init_scale=config.init_scale,
      momentum=config.momentum, l1=config.l1)
  if config.optimizer == "rls":
    inner = rls.rls(**rls_kwargs)
  elif config.optimizer == "rls_hybrid":
    inner = optax.multi_transform(
        {"rls": rls.rls(**rls_kwargs),
         "adam": optax.adam(config.learning_rate)},
        hybrid_labels)
  else:
    inner = optax.adam(config.learning_rate)
  if config.clip_norm:
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), inner)
  return optax.chain(inner)


def hybrid_labels(params: Any) -> Any:
  """Adam for the output layer, RLS for every hidden layer."""
  return {name: jax.tree.map(
      lambda _, n=name: "adam" if n == OUTPUT_LAYER else "rls", layer)
          for name, layer in params.items()}


class TrainState(NamedTuple):
  step: jax.Array
  params: Any
  opt_state: Any


def create_train_state(config, key: jax.Array) -> tuple[FNN, TrainState,
                                                        optax.GradientTransformation]:
  model = FNN(hidden_size=config.hidden_size)
  tx = make_optimizer(config)

  @jax.jit  # One compilation instead of one per eager init op.
  def init(key):
    params = model.init(key, jnp.zeros((1, 784), jnp.float32))["params"]
    return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

  return model, init(key), tx


def make_train_step(model: FNN, tx: optax.GradientTransformation,
                    loss_name: str, uses_layer_inputs: bool) -> Callable:
  """`step(state, images, labels) -> (state, loss)` for one minibatch."""
  loss_fn = LOSSES[loss_name]

  def loss_and_inputs(params, images, labels):
    variables = {"params": params}
    if uses_layer_inputs:
      # Each Dense layer's minibatch-mean input, which RLS's P update needs.
      outputs, layer_inputs = rls.layer_inputs(model.apply, variables, images)
    else:
      outputs, layer_inputs = model.apply(variables, images), None
    return loss_fn(outputs, labels), layer_inputs

  def train_step(state: TrainState, images, labels):
    (loss, layer_inputs), grads = jax.value_and_grad(
        loss_and_inputs, has_aux=True)(state.params, images, labels)
    extra = {"layer_inputs": layer_inputs} if uses_layer_inputs else {}
    updates, opt_state = tx.update(grads, state.opt_state, state.params,
                                   **extra)
    params = optax.apply_updates(state.params, updates)
    return TrainState(state.step + 1, params, opt_state), loss

  return train_step


def make_train_epoch(train_step: Callable, batch_size: int) -> Callable:
  """`epoch(state, images, labels, key) -> (state, losses)`, one `lax.scan`.

  The examples are shuffled with `key`; the last `n % batch_size` of each
  permutation are left out so that every step has the same shape.
  """

  def train_epoch(state, images, labels, key):
    num_steps = images.shape[0] // batch_size
    order = jax.random.permutation(key, images.shape[0])
    batches = order[:num_steps * batch_size].reshape(num_steps, batch_size)

    def body(state, batch_indices):
      return train_step(state, images[batch_indices], labels[batch_indices])

    return jax.lax.scan(body, state, batches)

  return train_epoch


def make_evaluate(model: FNN, loss_name: str, chunk_size: int) -> Callable:
  """`evaluate(params, images, labels) -> (mean loss, accuracy)`.

  Forward passes of `chunk_size` examples inside one `lax.map`; the tail is
  zero-padded and masked out, so any number of examples compiles once.
  """
  loss_fn = LOSSES[loss_name]

  def per_example(params, images, labels):
    outputs = model.apply({"params": params}, images)
    losses = jax.vmap(lambda o, y: loss_fn(o[None], y[None]))(outputs, labels)
    return losses, (jnp.argmax(outputs, -1) == labels).astype(jnp.float32)

  def evaluate(params, images, labels):
    n = images.shape[0]
    chunks = -(-n // chunk_size)
    pad = chunks * chunk_size - n
    images = jnp.pad(images, ((0, pad), (0, 0))).reshape(
        chunks, chunk_size, -1)
    labels = jnp.pad(labels, (0, pad)).reshape(chunks, chunk_size)
    mask = (jnp.arange(chunks * chunk_size) < n).reshape(chunks, chunk_size)
    losses, correct = jax.lax.map(
        lambda c: per_example(params, c[0], c[1]), (images, labels))
    return jnp.sum(losses * mask) / n, jnp.sum(correct * mask) / n

  return evaluate


def load_data(config) -> dict[str, jax.Array]:
  data = mnist_data.load_mnist(config.data_dir)
  if config.train_limit:
    data["train_images"] = data["train_images"][:config.train_limit]
    data["train_labels"] = data["train_labels"][:config.train_limit]
  return {k: jnp.asarray(v) for k, v in data.items()}


def train_and_evaluate(config, workdir: str,
                       data: dict[str, Any] | None = None) -> list[dict]:
  """Trains for `config.epochs` (resuming from `workdir`); returns metrics.

  Args:
    config: a `configs/mnist.py` config.
    workdir: run folder; an existing checkpoint there is resumed from.
    data: optional preloaded `load_mnist`-style dict (tests pass it to load
      the files once for several runs); `config.train_limit` still applies.

  Returns:
    All per-epoch metric records of this workdir, in order.
  """
  if config.loss not in LOSSES:
    raise ValueError(f"loss={config.loss!r}; expected one of {tuple(LOSSES)}")
  if config.optimizer == "rls" and config.loss != "mse":
    logging.warning("Full RLS is derived for an identity output with MSE loss "
                    "(eq. 57); running it on %s anyway.", config.loss)
  workdir_lib.prepare(workdir, config)
  if data is None:
    data = load_data(config)
  elif config.train_limit:
    data = dict(data, train_images=data["train_images"][:config.train_limit],
                train_labels=data["train_labels"][:config.train_limit])
  data = {k: jnp.asarray(v) for k, v in data.items()}
  num_train = data["train_images"].shape[0]
  steps_per_epoch = num_train // config.batch_size
  if steps_per_epoch == 0:
    raise ValueError(f"{num_train} training examples < batch_size "
                     f"{config.batch_size}")

  init_key, shuffle_key = jax.random.split(jax.random.key(config.seed))
  model, state, tx = create_train_state(config, init_key)
  start_epoch = 0
  restored = workdir_lib.restore_checkpoint(
      workdir, {"epoch": 0, "state": state})
  metrics = workdir_lib.MetricsWriter(workdir)
  if restored is not None:
    step, target = restored
    start_epoch, state = int(target["epoch"]), target["state"]
    metrics.truncate_after(step)
    logging.info("Resumed from step %d (epoch %d) in %s", step, start_epoch,
                 workdir)

  uses_layer_inputs = config.optimizer != "adam"
  train_step = make_train_step(model, tx, config.loss, uses_layer_inputs)
  compile_start = time.perf_counter()
  train_epoch = jax.jit(make_train_epoch(train_step, config.batch_size),
                        donate_argnums=0).lower(
                            state, data["train_images"], data["train_labels"],
                            shuffle_key).compile()
  evaluate = jax.jit(make_evaluate(model, config.loss,
                                   config.eval_chunk_size))
  logging.info("Compiled the epoch in %.1fs", time.perf_counter() - compile_start)

  progress = workdir_lib.Progress(config.epochs, start=start_epoch,
                                  label="epoch")
  for epoch in range(start_epoch + 1, config.epochs + 1):
    epoch_key = jax.random.fold_in(shuffle_key, epoch)
    start = time.perf_counter()
    state, losses = train_epoch(state, data["train_images"],
                                data["train_labels"], epoch_key)
    losses = np.asarray(losses)  # The epoch's only wait for the device.
    seconds = time.perf_counter() - start
    test_loss, test_accuracy = evaluate(state.params, data["test_images"],
                                        data["test_labels"])
    train_eval_loss, train_eval_accuracy = evaluate(
        state.params, data["train_images"], data["train_labels"])
    step = int(state.step)
    record = dict(
        epoch=epoch, step=step, train_loss=float(losses.mean()),
        train_loss_last_batch=float(losses[-1]),
        train_eval_loss=float(train_eval_loss),
        train_eval_accuracy=float(train_eval_accuracy),
        test_loss=float(test_loss), test_accuracy=float(test_accuracy),
        seconds=seconds, steps_per_second=steps_per_epoch / seconds)
    if not np.isfinite(losses).all():
      logging.warning("Non-finite training loss in epoch %d", epoch)
    metrics.write(record)
    workdir_lib.save_checkpoint(workdir, step, {"epoch": epoch,
                                                "state": state})
    progress.report(epoch, train_loss=record["train_loss"],
                    test_loss=record["test_loss"],
                    test_acc=record["test_accuracy"],
                    sec=round(seconds, 1))
  records = workdir_lib.read_metrics(workdir)
  plot_curves(records, workdir, title=f"MNIST FNN, {config.optimizer} "
              f"({config.loss})")
  return records


def plot_curves(records: list[dict], workdir: str, title: str = "") -> None:
  """Writes `curves.png`: test accuracy and train/test loss per epoch."""
  if not records:
    return
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  epochs = [r["epoch"] for r in records]
  fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(9, 3.5))
  acc_ax.plot(epochs, [r["test_accuracy"] for r in records], marker="o")
  acc_ax.set(xlabel="epoch", ylabel="test accuracy")
  loss_ax.plot(epochs, [r["train_loss"] for r in records], marker="o",
               label="train (epoch mean)")
  loss_ax.plot(epochs, [r["train_eval_loss"] for r in records], marker="o",
               label="train (end of epoch)")
  loss_ax.plot(epochs, [r["test_loss"] for r in records], marker="o",
               label="test")
  loss_ax.set(xlabel="epoch", ylabel="loss", yscale="log")
  loss_ax.legend()
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(f"{workdir}/curves.png", dpi=100)
  plt.close(fig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("JAX devices: %s", jax.devices())
  train_and_evaluate(flags.FLAGS.config, flags.FLAGS.workdir)


if __name__ == "__main__":
  # Defined here, not at import, so that tests and tools can import this
  # module beside other experiments that define the same flag names.
  config_flags.DEFINE_config_file(
      "config", None, "Config file, e.g. configs/mnist.py:rls.",
      lock_config=True)
  flags.DEFINE_string(
      "workdir", None, "Run folder: config, metrics, checkpoints, plot.")
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
