r"""One classifier experiment for the RLS paper's networks (MNIST, CIFAR-10, IMDB).

`experiments/mnist.py`, `experiments/cifar10.py` and `experiments/imdb.py`
give a model and a dataset; this module builds the optimiser, the losses, the
jitted epoch and the evaluation, and hands them to the shared run loop
(`experiments/runner.py`: config check, checkpoints, resume, progress lines).

Optimisers (`config.optimizer`), each after global-norm clipping
(`config.clip_norm`, 0 = off):

* `rls`: RLS (`rls.rls`, with `config.momentum` = α and `config.l1` = γ) on
  every dense, conv and LSTM layer, the output layer included (full RLS:
  identity output, the MSE of eq. 57). An embedding table has no layer input
  (its input is a one-hot id), so it is trained by Adam
  (`config.embedding_learning_rate`) through `optax.multi_transform`.
* `rls_hybrid`: RLS on the hidden layers, Adam (`config.learning_rate`) on the
  output layer and the embedding; softmax cross-entropy.
* `adam`: Adam on everything.

Losses (`config.loss`): `mse` is eq. (57), ``||Z - Z*||_F^2 / (2M)`` with
one-hot targets (sum over outputs, mean over the batch); `mse_mean` is the
mean over all elements (``/ (M C)``, PyTorch's `MSELoss`, 2/C times eq. 57's);
`cross_entropy` is the batch-mean softmax cross-entropy.

One runner chunk is one epoch: a `lax.scan` over the shuffled minibatches
(the last ``n % batch_size`` examples of each permutation are left out).
Records, one per epoch: `epoch`, `step`, `train_loss` (epoch-mean minibatch
loss), `train_loss_last_batch`, `train_loss_curve` (mean minibatch loss of
each block of `config.loss_every` steps, for convergence speed), `test_loss`,
`test_accuracy` (and `train_eval_loss` / `train_eval_accuracy` on the whole
training set when `config.eval_train_set`), `steps_per_second`;
`summary.json` has the final and best test accuracy.

Runs axis (`experiments/run_axes.py`): `config.num_seeds` and the lists
`config.learning_rates` (Adam), `config.ratios` (k) and
`config.gradient_scales` (η) make seeds x values runs that train as one
vmapped program (the optimiser is rebuilt inside the jitted epoch from each
run's values); record values are then lists over runs.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

import rls
from experiments.classifier import config as classifier_config
from experiments.classifier import models as classifier_models
from experiments.loop import runner
from experiments.loop import sharding
from experiments.loop import workdir as workdir_lib

OPTIMIZERS = classifier_config.OPTIMIZERS
LOSS_NAMES = classifier_config.LOSS_NAMES
PRESETS = classifier_config.PRESETS
base_config = classifier_config.base_config
preset_config = classifier_config.preset_config
SCHEDULE_FIELDS = ("num_steps", "log_every", "eval_every", "checkpoint_every")


def mse_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  """Eq. (57): ``||Z - Z*||_F^2 / (2M)`` with one-hot targets ``Z*``."""
  targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
  return 0.5 * jnp.mean(jnp.sum((outputs - targets) ** 2, axis=-1))


def mse_mean_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  """Mean over batch and outputs of ``(z - z*)^2`` (PyTorch's MSELoss)."""
  targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
  return jnp.mean((outputs - targets) ** 2)


def cross_entropy_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  return jnp.mean(
      optax.softmax_cross_entropy_with_integer_labels(outputs, labels))


LOSSES = {"mse": mse_loss, "mse_mean": mse_mean_loss,
          "cross_entropy": cross_entropy_loss}


def validate(config) -> None:
  if config.optimizer not in OPTIMIZERS:
    raise ValueError(f"optimizer={config.optimizer!r}; expected one of "
                     f"{OPTIMIZERS}")
  if config.loss not in LOSSES:
    raise ValueError(f"loss={config.loss!r}; expected one of {LOSS_NAMES}")
  for field in ("batch_size", "epochs", "eval_chunk_size", "loss_every"):
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f"config.{field} must be a positive integer, got "
                       f"{value!r}")


SWEPT_HPARAMS = ("learning_rate", "ratio", "gradient_scale")


def make_optimizer(config, learning_rate=None, ratio=None,
                   gradient_scale=None) -> optax.GradientTransformationExtraArgs:
  """Clipping, then RLS (+ Adam for embeddings), the hybrid, or Adam.

  The labels are functions of the params, so one construction serves every
  model: `classifier_models.optimizer_labels` sends a layer named
  `embedding` to Adam (`config.embedding_learning_rate`) and, in the hybrid,
  the `output` layer to Adam (`config.learning_rate`).

  `learning_rate` (Adam), `ratio` (k) and `gradient_scale` (η) override the
  config's values; they may be traced (one run of a vmapped sweep).
  """
  learning_rate = (config.learning_rate if learning_rate is None
                   else learning_rate)
  rls_opt = rls.rls(
      forgetting_factor=config.forgetting_factor,
      ratio=config.ratio if ratio is None else ratio,
      gradient_scale=(config.gradient_scale if gradient_scale is None
                      else gradient_scale),
      init_scale=config.init_scale, momentum=config.momentum, l1=config.l1)
  embedding_adam = optax.adam(config.embedding_learning_rate)
  if config.optimizer == "rls":
    inner = optax.multi_transform(
        {"rls": rls_opt, "embedding": embedding_adam},
        classifier_models.optimizer_labels)
  elif config.optimizer == "rls_hybrid":
    inner = optax.multi_transform(
        {"rls": rls_opt, "adam": optax.adam(learning_rate),
         "embedding": embedding_adam},
        functools.partial(classifier_models.optimizer_labels, hybrid=True))
  elif config.optimizer == "adam":
    inner = optax.adam(learning_rate)
  else:
    raise ValueError(f"optimizer={config.optimizer!r}; expected one of "
                     f"{OPTIMIZERS}")
  if config.clip_norm:
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), inner)
  return optax.chain(inner)


def make_train_step(model: nn.Module, tx, loss_name: str,
                    uses_layer_inputs: bool) -> Callable:
  """`step(params, opt_state, inputs, labels) -> (params, opt_state, loss)`.

  Gradients and every layer's mean input ``x̄`` come from one forward pass.
  """
  loss_fn = LOSSES[loss_name]

  def loss_and_inputs(params, inputs, labels):
    variables = {"params": params}
    if uses_layer_inputs:
      outputs, layer_inputs = rls.layer_inputs(model.apply, variables, inputs)
    else:
      outputs, layer_inputs = model.apply(variables, inputs), None
    return loss_fn(outputs, labels), layer_inputs

  def train_step(params, opt_state, inputs, labels):
    (loss, layer_inputs), grads = jax.value_and_grad(
        loss_and_inputs, has_aux=True)(params, inputs, labels)
    extra = {"layer_inputs": layer_inputs} if uses_layer_inputs else {}
    updates, opt_state = tx.update(grads, opt_state, params, **extra)
    return optax.apply_updates(params, updates), opt_state, loss

  return train_step


def make_evaluate(model: nn.Module, loss_name: str, chunk_size: int,
                  preprocess: Callable) -> Callable:
  """`evaluate(params, inputs, labels) -> (mean loss, accuracy)`.

  Forward passes of `chunk_size` examples inside one `lax.map`; the tail is
  zero-padded and masked out, so any number of examples compiles once.
  """
  loss_fn = LOSSES[loss_name]

  def per_example(params, inputs, labels):
    outputs = model.apply({"params": params}, preprocess(inputs))
    losses = jax.vmap(lambda o, y: loss_fn(o[None], y[None]))(outputs, labels)
    return losses, (jnp.argmax(outputs, -1) == labels).astype(jnp.float32)

  def evaluate(params, inputs, labels):
    n = inputs.shape[0]
    size = min(chunk_size, n)
    chunks = -(-n // size)
    pad = chunks * size - n
    inputs = jnp.pad(inputs, [(0, pad)] + [(0, 0)] * (inputs.ndim - 1))
    inputs = inputs.reshape((chunks, size) + inputs.shape[1:])
    labels = jnp.pad(labels, (0, pad)).reshape(chunks, size)
    mask = (jnp.arange(chunks * size) < n).reshape(chunks, size)
    losses, correct = jax.lax.map(
        lambda c: per_example(params, c[0], c[1]), (inputs, labels))
    return jnp.sum(losses * mask) / n, jnp.sum(correct * mask) / n

  return evaluate


def with_schedule(config, steps_per_epoch: int) -> ml_collections.ConfigDict:
  """A copy of `config` with the runner's step counts derived from epochs."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.num_steps = config.epochs * steps_per_epoch
  config.log_every = steps_per_epoch
  config.eval_every = steps_per_epoch
  config.checkpoint_every = steps_per_epoch * config.get(
      "checkpoint_every_epochs", 1)
  return config


def make_experiment(config, model: nn.Module, data: dict, name: str,
                    example_input: jax.Array,
                    preprocess: Callable = lambda x: x) -> runner.Experiment:
  """The runner pieces for one classifier run.

  Args:
    config: a classifier config (see `configs/mnist.py`).
    model: a Flax module mapping `preprocess(inputs)` to class scores.
    data: `train_inputs`, `train_labels`, `test_inputs`, `test_labels`
      (arrays; inputs may be compact, e.g. uint8, and turned to floats by
      `preprocess` inside the jitted step).
    name: printed at the start of the run.
    example_input: a batch-of-one input for `model.init`.
    preprocess: jittable, applied to every minibatch before the model.
  """
  validate(config)
  num_train = data["train_inputs"].shape[0]
  steps_per_epoch = num_train // config.batch_size
  if steps_per_epoch == 0:
    raise ValueError(f"{num_train} training examples < batch_size "
                     f"{config.batch_size}")
  make_optimizer(config)  # Checks the hyper-parameters before tracing.
  uses_layer_inputs = config.optimizer != "adam"
  evaluate_split = make_evaluate(model, config.loss, config.eval_chunk_size,
                                 preprocess)
  batch_size = config.batch_size

  def init(key, hparams):
    init_key, shuffle_key = jax.random.split(key)
    params = model.init(init_key, example_input)["params"]
    tx = make_optimizer(config, **hparams)
    return {"params": params, "opt_state": tx.init(params),
            "epoch": jnp.zeros((), jnp.int32), "shuffle_key": shuffle_key,
            "hparams": hparams}

  def train_chunk(state, data):
    """One epoch: a scan over the minibatches of a fresh permutation."""
    epoch = state["epoch"] + 1
    key = jax.random.fold_in(state["shuffle_key"], epoch)
    order = jax.random.permutation(key, num_train)
    batches = order[:steps_per_epoch * batch_size].reshape(steps_per_epoch,
                                                           batch_size)
    tx = make_optimizer(config, **state["hparams"])
    train_step = make_train_step(model, tx, config.loss, uses_layer_inputs)

    def body(carry, indices):
      params, opt_state = carry
      # Split over the `data` mesh axis when there is one: the layer-input
      # means and gradients are then global-batch means (all-reduced), so
      # RLS's P updates equal the single-device ones.
      inputs, labels = sharding.shard_batch(
          (preprocess(data["train_inputs"][indices]),
           data["train_labels"][indices]))
      params, opt_state, loss = train_step(params, opt_state, inputs, labels)
      return (params, opt_state), loss

    (params, opt_state), losses = jax.lax.scan(
        body, (state["params"], state["opt_state"]), batches)
    state = dict(state, params=params, opt_state=opt_state, epoch=epoch)
    return state, {"losses": losses, "epoch": epoch}

  def evaluate(state, data):
    metrics = {}
    splits = ("test", "train") if config.eval_train_set else ("test",)
    for split in splits:
      loss, accuracy = evaluate_split(state["params"],
                                      data[f"{split}_inputs"],
                                      data[f"{split}_labels"])
      prefix = "test" if split == "test" else "train_eval"
      metrics[f"{prefix}_loss"] = loss
      metrics[f"{prefix}_accuracy"] = accuracy
    return state, metrics

  def summarize(window):
    losses = np.concatenate([np.asarray(m["losses"]) for m in window])
    blocks = [float(b.mean()) for b in
              np.array_split(losses, -(-len(losses) // config.loss_every))]
    return {"epoch": int(window[-1]["epoch"]),
            "train_loss": float(losses.mean()),
            "train_loss_last_batch": float(losses[-1]),
            "train_loss_curve": blocks}

  def summarize_eval(metrics):
    return {k: float(v) for k, v in metrics.items()}

  def finish(state, workdir):
    del state
    records = workdir_lib.read_metrics(workdir)
    # Values are lists over runs when seeds or hyper-parameters are swept.
    accuracy = np.asarray([r["test_accuracy"] for r in records], np.float64)
    return {"epochs": records[-1]["epoch"],
            "final_test_accuracy": records[-1]["test_accuracy"],
            "final_test_loss": records[-1]["test_loss"],
            "best_test_accuracy": accuracy.max(axis=0).tolist()}

  return runner.Experiment(
      name=name, init=init, train_chunk=train_chunk,
      chunk_steps=steps_per_epoch, summarize=summarize, evaluate=evaluate,
      summarize_eval=summarize_eval, finish=finish,
      progress_fields=("epoch", "train_loss", "test_loss", "test_accuracy"),
      examples_per_step=batch_size, data=data, swept_hparams=SWEPT_HPARAMS,
      batch_size=batch_size)


def train(config, workdir: str, model: nn.Module, data: dict, name: str,
          example_input: jax.Array, preprocess: Callable = lambda x: x,
          plot_title: str = "") -> list[dict]:
  """Runs (or resumes) `config.epochs` epochs in `workdir`; returns records."""
  if config.optimizer == "rls" and config.loss == "cross_entropy":
    print("Note: full RLS is derived for an identity output with MSE loss "
          "(eq. 57); running it on cross-entropy anyway.")
  data = {k: jnp.asarray(v) for k, v in data.items()}
  steps_per_epoch = data["train_inputs"].shape[0] // config.batch_size
  config = with_schedule(config, max(steps_per_epoch, 1))
  experiment = make_experiment(config, model, data, name, example_input,
                               preprocess)
  records = runner.run(config, workdir, experiment)
  plot_curves(records, workdir, title=plot_title or name)
  return records


def plot_curves(records: list[dict], workdir: str, title: str = "") -> None:
  """Writes `curves.png`: test accuracy, and train/test loss per epoch."""
  if not records:
    return
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  # With several runs (lists), plot their mean.
  column = lambda key: [float(np.mean(r[key])) for r in records]
  epochs = column("epoch")
  fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(9, 3.5))
  acc_ax.plot(epochs, column("test_accuracy"), marker="o")
  acc_ax.set(xlabel="epoch", ylabel="test accuracy")
  loss_ax.plot(epochs, column("train_loss"), marker="o",
               label="train (epoch mean)")
  if "train_eval_loss" in records[0]:
    loss_ax.plot(epochs, column("train_eval_loss"), marker="o",
                 label="train (end of epoch)")
  loss_ax.plot(epochs, column("test_loss"), marker="o", label="test")
  loss_ax.set(xlabel="epoch", ylabel="loss", yscale="log")
  loss_ax.legend()
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(f"{workdir}/curves.png", dpi=100)
  plt.close(fig)
