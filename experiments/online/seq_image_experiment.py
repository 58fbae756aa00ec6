"""Trains a recurrent network online on sequential CIFAR-10 (one pixel a step).

  python -m experiments.seq_cifar --config configs/seq_cifar.py:small --workdir runs/seq_cifar_small
  python -m experiments.seq_cifar --config configs/seq_cifar.py --workdir runs/seq_cifar   # paper-like

Each of B training streams reads one training image at a time, one pixel (its
3 channels) per step in raster order, 1024 steps an image, the state reset at
each image's first pixel, the class predicted and scored at its last pixel
only (`rtrl/tasks/seq_images.py`); images come in a fresh random order every
epoch. Online RTRL and its approximations (an online LRU stack by default)
or TBPTT (`truncation` dividing 1024; 1024 is full BPTT per image) train on
these streams. Every `eval_every` steps the test accuracy is measured on the
first `eval_images` test images (0: all) with frozen parameters.

All B streams are at the same pixel, and a chunk holds whole images
(`chunk_steps` a multiple of 1024), so the chunk is trained image by image:
the training accuracy at the last pixel is the prediction the trainer scored
there, its readout at the parameters before that step's update (before the
last window's, for TBPTT).

The workdir gets `config.json`, `metrics.jsonl` (`step`, `train_loss` (mean
cross-entropy in nats at the images' last pixels over the steps since the
previous record), `train_accuracy` (over the same images), `epoch`
(training images read / training-set size), `steps_per_second`,
`examples_per_second` (pixels a second over the batch), and `test_accuracy`, `test_loss` at eval steps),
checkpoints and `summary.json` (`final_test_accuracy`, `final_test_loss` at
the final parameters; `best_test_accuracy` and its `best_step` among the
evals: selected on the test set itself, so optimistic; `epochs`). With
`config.shadow_every` > 0 (online single-cell estimators; it must divide
the 1024 pixels of an image, so that the reported steps include the images'
last pixels, the only steps with a loss) an exact-RTRL shadow runs on the
same trajectory and each record also has `cosine_to_rtrl`, the mean over
the window's images of the cosine of the cell gradient at an image's last
pixel to exact RTRL's (`experiments/online/shadow_records.py`). The shared
run loop (`experiments/loop/runner.py`) resumes a rerun from the newest valid
checkpoint; with `num_seeds > 1` or a `learning_rates` list the runs train as
one vmapped program and every value becomes a list over runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from experiments.data import load_cifar10
from experiments.loop import checks
from experiments.loop import runner
from experiments.online import setup as online_setup
from experiments.online import shadow_records
from rtrl.tasks import seq_images

NUM_CLASSES = 10
# A CIFAR-10 image as a sequence: 32 x 32 pixels, 3 channels each.
PIXELS_PER_IMAGE = 32 * 32
CHANNELS = 3


def validate(config) -> None:
  """Raises ValueError naming the first bad field (the step schedule is the
  run loop's: `experiments/loop/checks.schedule`)."""
  checks.positive_ints(
    config,
    "hidden_size",
    "batch_size",
    "chunk_steps",
    "eval_batch_size",
    "accumulate_steps",
  )
  checks.nonnegative_ints(config, "eval_images", zero_means="all test images")
  checks.multiple_of(
    config, "chunk_steps", PIXELS_PER_IMAGE, "the pixels per image"
  )
  online_setup.validate_trainer(config)
  shadow_every = online_setup.validate_shadow_every(config, config.shadow_every)
  if shadow_every and PIXELS_PER_IMAGE % shadow_every:
    # Only an image's last pixel has a loss: other steps' cosines are 0/0.
    raise ValueError(
      f"config.shadow_every must divide the {PIXELS_PER_IMAGE} pixels of "
      f"an image (the cosine is taken where the loss is, at each image's "
      f"last pixel), got {shadow_every!r}"
    )
  if config.estimator == "tbptt" and PIXELS_PER_IMAGE % config.truncation:
    raise ValueError(
      f"config.truncation must divide the {PIXELS_PER_IMAGE} "
      f"pixels of an image (TBPTT windows aligned to images; "
      f"{PIXELS_PER_IMAGE}: full BPTT per image), got "
      f"{config.truncation!r}"
    )
  if config.normalization not in seq_images.NORMALIZATIONS:
    raise ValueError(
      f"config.normalization must be one of "
      f"{seq_images.NORMALIZATIONS}, got "
      f"{config.normalization!r}"
    )


def describe(config) -> str:
  return (
    f"sequential CIFAR-10 | {online_setup.describe(config)} | "
    f"{config.cell}-{config.hidden_size} | batch {config.batch_size} "
    f"| lr {config.learning_rate:.3g}"
  )


def batch_axes(state: dict) -> dict:
  """`online_setup.batch_axes`, with the streams replicated: every stream
  leaf is shared by the B streams (`seq_images.StreamState`)."""
  axes = online_setup.batch_axes(state)
  axes["stream"] = jax.tree_util.tree_map(lambda _: None, state["stream"])
  return axes


def to_uint8(images: np.ndarray) -> np.ndarray:
  """The loader's [0, 1] floats back to the files' bytes (exact: they are
  bytes / 255), a quarter of the device memory."""
  return np.rint(np.asarray(images) * 255.0).astype(np.uint8)


def load_data(config) -> dict:
  """The run loop's `data` (a jit argument, never checkpointed): the
  training images and the evaluation images (the first `eval_images` test
  images, 0: all) as `seq_images.ImageSet`s, both normalised by the
  training images' per-channel statistics."""
  cifar = load_cifar10(config.data_dir or None)
  train_images = to_uint8(cifar["train_images"])
  mean, std = seq_images.channel_stats(train_images, config.normalization)
  test_images, test_labels = cifar["test_images"], cifar["test_labels"]
  if config.eval_images:
    test_images = test_images[: config.eval_images]
    test_labels = test_labels[: config.eval_images]
  return {
    "train": seq_images.make_image_set(
      train_images, cifar["train_labels"], mean, std
    ),
    "test": seq_images.make_image_set(
      to_uint8(test_images), test_labels, mean, std
    ),
  }


def make_init(config, cell):
  """`(key, hparams) -> state`: the trainer, the streams, the step count and
  the evaluation record (the last and the best test accuracy)."""
  dtype = jnp.asarray(0.0).dtype

  def init(key, hparams):
    params_key, trainer_key, data_key = jax.random.split(key, 3)
    params = online_setup.init_params(
      cell,
      params_key,
      CHANNELS,
      NUM_CLASSES,
      config.init_stddev,
      readout_fn=online_setup.make_readout(config),
    )
    trainer = online_setup.make_trainer(
      config, cell, **hparams, shadow_every=config.shadow_every
    )
    return {
      "trainer": trainer.init(params, trainer_key, config.batch_size),
      "stream": seq_images.stream_init(data_key),
      "step": jnp.zeros((), jnp.int32),
      "last_test_accuracy": jnp.zeros((), dtype),
      "last_test_loss": jnp.zeros((), dtype),
      "last_eval_step": jnp.zeros((), jnp.int32),
      "best_test_accuracy": jnp.full((), -1.0, dtype),
      "best_step": jnp.zeros((), jnp.int32),
      "hparams": hparams,
    }

  return init


def last_pieces(config) -> tuple[int, int]:
  """An image's steps as `(head, tail)`: the tail is the last update's
  steps (the last pixel online, the last window for TBPTT), so the readout
  parameters between the two are the ones that scored the last pixel."""
  tail = config.truncation if config.estimator == "tbptt" else 1
  return PIXELS_PER_IMAGE - tail, tail


def make_train_chunk(config, cell):
  """`(state, data) -> (state, metrics)` over a chunk of whole images: the
  chunk's loss, weight (images) and correct-prediction sums at the last
  pixels, the images read so far, and with `config.shadow_every` the
  shadow's sums (`shadow_records.shadow_sums`)."""
  readout = online_setup.make_readout(config)
  head_steps, tail_steps = last_pieces(config)

  def train_chunk(state, data):
    trainer = online_setup.make_trainer(
      config, cell, **state["hparams"], shadow_every=config.shadow_every
    )
    stream, chunk = seq_images.stream_chunk(
      data["train"], state["stream"], config.batch_size, config.chunk_steps
    )
    images = jax.tree_util.tree_map(
      lambda a: a.reshape((-1, PIXELS_PER_IMAGE) + a.shape[1:]), chunk
    )

    def train_image(trainer_state, image):
      pieces = []
      if head_steps:  # Static: TBPTT-1024 has no head.
        trainer_state, metrics = trainer.run(
          trainer_state, jax.tree_util.tree_map(lambda a: a[:head_steps], image)
        )
        pieces.append(metrics)
      scoring = trainer_state.params["readout"]
      trainer_state, metrics = trainer.run(
        trainer_state, jax.tree_util.tree_map(lambda a: a[head_steps:], image)
      )
      pieces.append(metrics)
      hidden = jax.vmap(cell.output)(trainer_state.cell_state)
      logits = jax.vmap(readout.apply, in_axes=(None, 0))(scoring, hidden)
      sums = {
        "loss_sum": sum(m.loss_sum.sum() for m in pieces),
        "weight_sum": image.weights.sum(),
        "correct": (jnp.argmax(logits, -1) == image.targets[-1]).sum(),
      }
      if config.shadow_every:
        shadows = [shadow_records.shadow_sums(m) for m in pieces]
        sums.update(jax.tree_util.tree_map(lambda *s: sum(s), *shadows))
      return trainer_state, sums

    trainer_state, image_sums = jax.lax.scan(
      train_image, state["trainer"], images
    )
    state = {
      **state,
      "trainer": trainer_state,
      "stream": stream,
      "step": state["step"] + config.chunk_steps,
    }
    sums = jax.tree_util.tree_map(lambda a: a.sum(0), image_sums)
    return state, {
      **sums,
      "images_read": stream.image_ordinal * config.batch_size,
    }

  return train_chunk


def make_summarize(num_train_images: int):
  """The metrics record of a window of `train_chunk` metrics."""

  def summarize(window: list[dict]) -> dict:
    loss = sum(float(m["loss_sum"]) for m in window)
    weight = sum(float(m["weight_sum"]) for m in window)
    correct = sum(float(m["correct"]) for m in window)
    record = {
      "train_loss": loss / max(weight, 1.0),
      "train_accuracy": correct / max(weight, 1.0),
      "epoch": float(window[-1]["images_read"]) / num_train_images,
    }
    if "reported_count" in window[0]:  # config.shadow_every > 0
      record.update(shadow_records.shadow_means(window))
    return record

  return summarize


def make_evaluate(config, cell):
  """`(state, data) -> (state, {'test_accuracy', 'test_loss'})` at the
  current parameters, recorded in the state as the last evaluation (and the
  best one if its accuracy is the highest so far)."""
  readout = online_setup.make_readout(config)

  def evaluate(state, data):
    correct, loss, num = seq_images.evaluation_sums(
      cell,
      state["trainer"].params,
      data["test"],
      config.eval_batch_size,
      readout,
    )
    accuracy, loss = correct / num, loss / num
    better = accuracy > state["best_test_accuracy"]
    state = {
      **state,
      "last_test_accuracy": accuracy.astype(state["last_test_accuracy"].dtype),
      "last_test_loss": loss.astype(state["last_test_loss"].dtype),
      "last_eval_step": state["step"],
      "best_test_accuracy": jnp.where(
        better, accuracy, state["best_test_accuracy"]
      ).astype(state["best_test_accuracy"].dtype),
      "best_step": jnp.where(better, state["step"], state["best_step"]),
    }
    return state, {"test_accuracy": accuracy, "test_loss": loss}

  return evaluate


def make_finish(config, cell, data: dict):
  """`(state, workdir) -> summary`: the test accuracy at the final
  parameters (evaluated here unless the last eval was at the final step),
  the best one among the evals and its step, and the epochs trained."""
  readout = online_setup.make_readout(config)

  def finish(state, workdir):
    del workdir
    step = int(state["step"])
    if int(state["last_eval_step"]) == step and step > 0:
      final = {
        "accuracy": float(state["last_test_accuracy"]),
        "loss": float(state["last_test_loss"]),
      }
    else:
      final = seq_images.evaluate(
        cell,
        state["trainer"].params,
        data["test"],
        config.eval_batch_size,
        readout,
      )
    best_step = int(state["best_step"])
    summary = {
      "final_test_accuracy": final["accuracy"],
      "final_test_loss": final["loss"],
      "best_test_accuracy": (
        float(state["best_test_accuracy"]) if best_step > 0 else None
      ),
      "best_step": best_step,
      "test_images": int(data["test"].num_images),
      "epochs": (
        int(state["stream"].image_ordinal)
        * config.batch_size
        / data["train"].num_images
      ),
    }
    print(
      f"Test accuracy {summary['final_test_accuracy']:.4f} at step "
      f"{step} ({summary['test_images']} test images); best among the "
      f"evals {summary['best_test_accuracy']} at step {best_step}"
    )
    return summary

  return finish


def make_experiment(config) -> runner.Experiment:
  """The sequential-CIFAR pieces for `runner.run` (loads the data once,
  here).

  `learning_rate` may be swept (`config.learning_rates`) and `num_seeds` > 1
  stacks runs.
  """
  validate(config)
  cell = online_setup.make_cell(config)
  data = load_data(config)
  return runner.Experiment(
    name=describe(config),
    init=make_init(config, cell),
    train_chunk=make_train_chunk(config, cell),
    chunk_steps=config.chunk_steps,
    summarize=make_summarize(data["train"].num_images),
    evaluate=make_evaluate(config, cell),
    eval_every=config.eval_every,
    summarize_eval=lambda metrics: {
      "test_accuracy": float(metrics["test_accuracy"]),
      "test_loss": float(metrics["test_loss"]),
    },
    finish=make_finish(config, cell, data),
    progress_fields=("train_loss", "train_accuracy", "test_accuracy"),
    examples_per_step=config.batch_size,
    data=data,
    swept_hparams=("learning_rate",),
    batch_axes=batch_axes,
    batch_size=config.batch_size,
    resume_defaults=online_setup.RESUME_DEFAULTS,
    # A uniform guess over the 10 classes: ln 10 nats.
    chance_loss=("train_loss", float(np.log(NUM_CLASSES))),
  )


def train(config, workdir: str) -> list[dict]:
  """Runs (or resumes) one sequential-CIFAR run; returns all metrics
  records."""
  return runner.run(config, workdir, make_experiment(config))
