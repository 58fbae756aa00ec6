r"""Trains the RLS paper's CIFAR-10 "mini VGG" with RLS, the hybrid, or Adam.

  python -m experiments.cifar10 --config=configs/cifar10.py:rls,small \
    --workdir=runs/cifar10_rls_small --config.data_dir=../shared/data/cifar10

Model (`classifier_models.MiniVGG`) and data only; the optimiser, losses,
jitted epoch, evaluation and records are `experiments/classifier.py`, the run
loop `experiments/runner.py`. Images are kept on the device as uint8 and
standardised per channel (training-set mean and standard deviation) inside
the jitted step. Records: see `experiments/classifier.py`.
"""

from __future__ import annotations

from absl import app
import jax.numpy as jnp
import numpy as np

from experiments.classifier import experiment as classifier
from experiments.classifier import models as classifier_models
from experiments.loop import runner
from experiments.data import cifar10


def make_model(config) -> classifier_models.MiniVGG:
  return classifier_models.MiniVGG(
      conv_features=tuple(config.conv_features),
      pool_after_conv5=config.pool_after_conv5,
      hidden_size=config.hidden_size)


def load_data(config, data: dict | None = None) -> tuple[dict, tuple]:
  """uint8 image arrays and labels, and the per-channel (mean, std)."""
  if data is None:
    data = cifar10.load_cifar10(config.data_dir)
  limit = config.train_limit or None
  to_uint8 = lambda x: np.rint(np.asarray(x) * 255).astype(np.uint8)
  train = to_uint8(data["train_images"][:limit])
  pixels = train.reshape(-1, 3).astype(np.float64) / 255
  stats = (pixels.mean(0).astype(np.float32),
           pixels.std(0).astype(np.float32))
  return {"train_inputs": train,
          "train_labels": data["train_labels"][:limit],
          "test_inputs": to_uint8(data["test_images"]),
          "test_labels": data["test_labels"]}, stats


def train(config, workdir: str, data: dict | None = None) -> list[dict]:
  """Runs (or resumes) `config.epochs` epochs; returns the records.

  Args:
    config: a `configs/cifar10.py` config.
    workdir: run folder.
    data: optional preloaded `load_cifar10` dict (tests reuse one load).
  """
  arrays, (mean, std) = load_data(config, data)
  model = make_model(config)

  def preprocess(images):
    return (images.astype(jnp.float32) / 255 - mean) / std

  pools = sum(spec == "pool" for spec in config.conv_features)
  side = 32 // 2 ** (pools + bool(config.pool_after_conv5))
  channels = [s for s in config.conv_features if s != "pool"][-1]
  fc_inputs = f"FC in {side}x{side}x{channels}"
  name = (f"CIFAR-10 mini-VGG {list(config.conv_features)} ({fc_inputs}) "
          f"FC {config.hidden_size} | {config.optimizer} ({config.loss}) | "
          f"batch {config.batch_size} | {len(arrays['train_labels'])} images")
  return classifier.train(config, workdir, model, arrays, name,
                          classifier_models.example_input(model), preprocess)
