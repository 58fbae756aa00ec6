r"""One classifier experiment for the RLS paper's networks (MNIST, CIFAR-10,
IMDB): a dataset's `tasks.Task` and the training step of `training.py` made
into the shared run loop's pieces (`experiments/loop/runner.py`: config check,
checkpoints, resume, progress lines).

One runner chunk is one epoch: a `lax.scan` over the shuffled minibatches,
then, with `config.keep_partial_batch` (the default, as PyTorch's
``DataLoader``), one step on the last ``n % batch_size`` examples of the
permutation (else they are left out of that epoch).
Records, one per epoch: `epoch`, `step`, `train_loss` (epoch-mean minibatch
loss), `train_loss_last_batch`, `train_loss_curve` (mean minibatch loss of
each block of `config.loss_every` steps, for convergence speed), `test_loss`,
`test_accuracy` (and `train_eval_loss` / `train_eval_accuracy` on the whole
training set when `config.eval_train_set`), `steps_per_second`;
`summary.json` has the final and best test accuracy; `curves.png` plots the
records.

Runs axis (`experiments/loop/run_axes.py`): `config.num_seeds` and the lists
`config.learning_rates` (Adam), `config.ratios` (k) and
`config.gradient_scales` (η) make seeds x values runs that train as one
vmapped program (the optimiser is rebuilt inside the jitted epoch from each
run's values); record values are then lists over runs.
"""

from __future__ import annotations

from collections.abc import Callable
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.classifier import models
from experiments.classifier import presets
from experiments.classifier import tasks
from experiments.classifier import training
from experiments.loop import checks
from experiments.loop import runner
from experiments.loop import sharding
from experiments.loop import workdir as workdir_lib

SWEPT_HPARAMS = ("learning_rate", "ratio", "gradient_scale")
PROGRESS_FIELDS = ("epoch", "train_loss", "test_loss", "test_accuracy")
# Fields added after runs were saved, each at the value that reproduces what
# those runs computed (`runner.Experiment.resume_defaults`).
RESUME_DEFAULTS = {
  "output_gradient_scale": 1.0,
  "square_root": False,
  "param_init": "flax",
  "keep_partial_batch": False,
  "input_statistics": "mean",
  "input_samples": 256,
  "second_moment_direction": "eq63",
  "test_limit": 0,
  "muon_adam_learning_rate": 1e-3,
  "model_api": "linen",
  "num_layers": 1,
}
# The network's sizes, where a config has them: each a positive integer.
SIZE_FIELDS = (
  "hidden_size",
  "embed_dim",
  "num_layers",
  "vocab_size",
  "max_length",
)


def validate(config) -> None:
  if config.optimizer not in presets.OPTIMIZERS:
    raise ValueError(
      f"optimizer={config.optimizer!r}; expected one of {presets.OPTIMIZERS}"
    )
  if config.loss not in training.LOSSES:
    raise ValueError(
      f"loss={config.loss!r}; expected one of {presets.LOSS_NAMES}"
    )
  checks.positive_ints(
    config,
    "batch_size",
    "epochs",
    "eval_chunk_size",
    "loss_every",
    "checkpoint_every_epochs",
  )
  checks.positive_ints(config, *(f for f in SIZE_FIELDS if f in config))
  checks.nonnegative_ints(
    config, "train_limit", "test_limit", zero_means="the whole split"
  )
  if config.param_init not in models.PARAM_INITS:
    raise ValueError(
      f"param_init={config.param_init!r}; expected one of {models.PARAM_INITS}"
    )


def make_evaluate(
  model: nn.Module, loss_name: str, chunk_size: int, preprocess: Callable
) -> Callable:
  """`evaluate(params, inputs, labels) -> (mean loss, accuracy)`.

  Forward passes of `chunk_size` examples inside one `lax.map`; the tail is
  zero-padded and masked out, so any number of examples compiles once.
  """
  loss_fn = training.LOSSES[loss_name]

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
      lambda c: per_example(params, c[0], c[1]), (inputs, labels)
    )
    return jnp.sum(losses * mask) / n, jnp.sum(correct * mask) / n

  return evaluate


def with_schedule(config, steps_per_epoch: int) -> ml_collections.ConfigDict:
  """A copy of `config` with the runner's step counts derived from epochs."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.num_steps = config.epochs * steps_per_epoch
  config.log_every = steps_per_epoch
  config.eval_every = steps_per_epoch
  config.checkpoint_every = steps_per_epoch * config.checkpoint_every_epochs
  return config


def full_batches(config, num_train: int) -> int:
  """Full minibatches per epoch."""
  steps = num_train // config.batch_size
  if steps == 0:
    raise ValueError(
      f"{num_train} training examples < batch_size {config.batch_size}"
    )
  return steps


def partial_batch_size(config, num_train: int) -> int:
  """Examples in the epoch's last, partial minibatch (0: none is taken)."""
  if not config.keep_partial_batch:
    return 0
  return num_train % config.batch_size


def steps_per_epoch(config, num_train: int) -> int:
  """Training steps per epoch: the full minibatches and a partial one."""
  return full_batches(config, num_train) + (
    partial_batch_size(config, num_train) > 0
  )


def make_init(config, model: nn.Module, example_input: jax.Array) -> Callable:
  """`init(key, hparams) -> state`: params, optimiser state, epoch, the
  shuffling key and the run's swept hyper-parameters."""

  def init(key, hparams):
    init_key, shuffle_key = jax.random.split(key)
    params = model.init(init_key, example_input)["params"]
    if config.param_init == "pytorch":
      params = models.pytorch_default_init(params, init_key)
    tx = training.make_optimizer(config, **hparams)
    return {
      "params": params,
      "opt_state": tx.init(params),
      "epoch": jnp.zeros((), jnp.int32),
      "shuffle_key": shuffle_key,
      "hparams": hparams,
    }

  return init


def shuffled_batches(
  shuffle_key: jax.Array,
  epoch: jax.Array,
  num_train: int,
  num_batches: int,
  batch_size: int,
  partial_size: int = 0,
) -> tuple[jax.Array, jax.Array]:
  """`epoch`'s permutation as `(num_batches, batch_size)` example indices and
  the `(partial_size,)` indices of the last, partial minibatch."""
  order = jax.random.permutation(
    jax.random.fold_in(shuffle_key, epoch), num_train
  )
  full = num_batches * batch_size
  return (
    order[:full].reshape(num_batches, batch_size),
    order[full : full + partial_size],
  )


def make_train_chunk(
  config,
  model: nn.Module,
  preprocess: Callable,
  num_batches: int,
  partial_size: int = 0,
) -> Callable:
  """`train_chunk(state, data) -> (state, metrics)`: one epoch, a scan over
  the minibatches of a fresh permutation, then the partial one (if
  `partial_size`)."""

  def train_chunk(state, data):
    epoch = state["epoch"] + 1
    batches, partial = shuffled_batches(
      state["shuffle_key"],
      epoch,
      data["train_inputs"].shape[0],
      num_batches,
      config.batch_size,
      partial_size,
    )
    tx = training.make_optimizer(config, **state["hparams"])
    train_step = training.make_train_step(
      model,
      tx,
      config.loss,
      training.uses_layer_inputs(config),
      training.input_samples(config),
    )

    def body(carry, indices, shard=True):
      inputs, labels = (
        preprocess(data["train_inputs"][indices]),
        data["train_labels"][indices],
      )
      if shard:
        # Split over the `data` mesh axis when there is one: the layer-input
        # means and gradients are then global-batch means (all-reduced), so
        # RLS's P updates equal the single-device ones.
        inputs, labels = sharding.shard_batch((inputs, labels))
      params, opt_state, loss = train_step(*carry, inputs, labels)
      return (params, opt_state), loss

    carry, losses = jax.lax.scan(
      body, (state["params"], state["opt_state"]), batches
    )
    if partial_size:
      # Its size need not divide over the devices; one step, unsplit.
      carry, last_loss = body(carry, partial, shard=False)
      losses = jnp.concatenate([losses, last_loss[None]])
    params, opt_state = carry
    state = dict(state, params=params, opt_state=opt_state, epoch=epoch)
    return state, {"losses": losses, "epoch": epoch}

  return train_chunk


def make_evaluate_splits(
  config, model: nn.Module, preprocess: Callable
) -> Callable:
  """`evaluate(state, data) -> (state, metrics)`: loss and accuracy on the
  test set (`test_*`) and, with `config.eval_train_set`, the training set
  (`train_eval_*`)."""
  evaluate_split = make_evaluate(
    model, config.loss, config.eval_chunk_size, preprocess
  )
  prefixes = {"test": "test"}
  if config.eval_train_set:
    prefixes["train"] = "train_eval"

  def evaluate(state, data):
    metrics = {}
    for split, prefix in prefixes.items():
      loss, accuracy = evaluate_split(
        state["params"], data[f"{split}_inputs"], data[f"{split}_labels"]
      )
      metrics[f"{prefix}_loss"] = loss
      metrics[f"{prefix}_accuracy"] = accuracy
    return state, metrics

  return evaluate


def summarize(window: list[dict], loss_every: int) -> dict:
  """The log record of the epochs in `window` (their per-step losses)."""
  losses = np.concatenate([np.asarray(m["losses"]) for m in window])
  blocks = [
    float(b.mean())
    for b in np.array_split(losses, -(-len(losses) // loss_every))
  ]
  return {
    "epoch": int(window[-1]["epoch"]),
    "train_loss": float(losses.mean()),
    "train_loss_last_batch": float(losses[-1]),
    "train_loss_curve": blocks,
  }


def summarize_eval(metrics: dict) -> dict:
  return {k: float(v) for k, v in metrics.items()}


def finish(state, workdir: str) -> dict:
  """`summary.json`: the last epoch's test metrics and the best accuracy."""
  del state
  records = workdir_lib.read_metrics(workdir)
  # Values are lists over runs when seeds or hyper-parameters are swept.
  accuracy = np.asarray([r["test_accuracy"] for r in records], np.float64)
  return {
    "epochs": records[-1]["epoch"],
    "final_test_accuracy": records[-1]["test_accuracy"],
    "final_test_loss": records[-1]["test_loss"],
    "best_test_accuracy": accuracy.max(axis=0).tolist(),
  }


def chance_loss(config, num_classes: int) -> tuple[str, float] | None:
  """`train_loss` of a uniform guess (cross-entropy: ln C), the divergence
  bound's unit; None for the squared errors, whose loss at initialisation
  depends on the network's output scale."""
  if config.loss != "cross_entropy":
    return None
  return "train_loss", float(np.log(num_classes))


def make_experiment(
  config,
  model: nn.Module,
  data: dict,
  name: str,
  example_input: jax.Array,
  preprocess: Callable,
  num_classes: int = 10,
) -> runner.Experiment:
  """The runner pieces for one classifier run.

  Args:
    config: a classifier config (see `configs/mnist.py`).
    model: a Flax module mapping `preprocess(inputs)` to class scores.
    data: `train_inputs`, `train_labels`, `test_inputs`, `test_labels`
      (device arrays; inputs may be compact, e.g. uint8).
    name: printed at the start of the run.
    example_input: a batch-of-one input for `model.init`.
    preprocess: jittable, applied to every minibatch before the model.
    num_classes: the network's outputs (the divergence bound's unit).
  """
  validate(config)
  num_train = data["train_inputs"].shape[0]
  training.make_optimizer(config)  # Checks the hyper-parameters before tracing.
  return runner.Experiment(
    name=name,
    init=make_init(config, model, example_input),
    train_chunk=make_train_chunk(
      config,
      model,
      preprocess,
      full_batches(config, num_train),
      partial_batch_size(config, num_train),
    ),
    chunk_steps=steps_per_epoch(config, num_train),
    summarize=functools.partial(summarize, loss_every=config.loss_every),
    evaluate=make_evaluate_splits(config, model, preprocess),
    eval_every=config.eval_every,
    summarize_eval=summarize_eval,
    finish=finish,
    progress_fields=PROGRESS_FIELDS,
    examples_per_step=config.batch_size,
    data=data,
    swept_hparams=SWEPT_HPARAMS,
    batch_size=config.batch_size,
    resume_defaults=RESUME_DEFAULTS,
    chance_loss=chance_loss(config, num_classes),
  )


def train(
  task: tasks.Task, config, workdir: str, dataset: dict | None = None
) -> list[dict]:
  """Runs (or resumes) `config.epochs` epochs of `task` in `workdir`.

  Args:
    task: the dataset and its network.
    config: the task's config (`configs/<task.name>.py`).
    workdir: run folder; an existing checkpoint there is resumed from.
    dataset: optional, what `task.read(config)` returns (tests read the
      files once for several runs); the config's limits still apply.

  Returns:
    The records, one per epoch.
  """
  validate(config)  # Before the sizes below divide by the batch size.
  if config.optimizer == "rls" and config.loss == "cross_entropy":
    print(
      "Note: full RLS is derived for an identity output with MSE loss "
      "(eq. 57); running it on cross-entropy anyway."
    )
  if dataset is None:
    dataset = task.read(config)
  arrays, preprocess = task.arrays(config, dataset)
  data = {k: jnp.asarray(v) for k, v in arrays.items()}
  name = f"{task.describe(config, arrays)} | preset {config.preset}"
  config = with_schedule(
    config, steps_per_epoch(config, data["train_inputs"].shape[0])
  )
  experiment = make_experiment(
    config,
    task.make_model(config),
    data,
    name,
    tasks.example_input(task, config),
    preprocess,
    task.num_classes,
  )
  records = runner.run(config, workdir, experiment)
  plot_curves(records, workdir, title=name)
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
  loss_ax.plot(
    epochs, column("train_loss"), marker="o", label="train (epoch mean)"
  )
  if "train_eval_loss" in records[0]:
    loss_ax.plot(
      epochs,
      column("train_eval_loss"),
      marker="o",
      label="train (end of epoch)",
    )
  loss_ax.plot(epochs, column("test_loss"), marker="o", label="test")
  loss_ax.set(xlabel="epoch", ylabel="loss", yscale="log")
  loss_ax.legend()
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(f"{workdir}/curves.png", dpi=100)
  plt.close(fig)
