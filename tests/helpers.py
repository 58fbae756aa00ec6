"""Helpers shared by the test files (plain functions; fixtures are in
`conftest.py`). `tests/` is on `sys.path` (pyproject's pytest `pythonpath`)."""

from __future__ import annotations

import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np

from experiments.data import cifar10
from experiments.loop.config_files import REPO_ROOT as _ROOT
from experiments.loop.config_files import load_config

REPO_ROOT = pathlib.Path(_ROOT)

# Copy-task fields pinned so that later changes of the shipped defaults (e.g.
# another default estimator) do not change what the tests measure.
COPY_PINNED = dict(
  estimator="rtrl",
  cell="rhn",
  hidden_size=32,
  batch_size=16,
  learning_rate=10**-2.5,
  clip_norm=0.0,
  accumulate_steps=1,
  seed=0,
  chunk_steps=100,
  log_every=100,
  checkpoint_every=100_000,
  max_length=100,
  error_threshold=0.15,
  curriculum="output_only",
)


def copy_config(**overrides):
  """`configs/copy_task.py` with `COPY_PINNED`, then `overrides`."""
  return load_config("copy_task", **{**COPY_PINNED, **overrides})


# Whether `rtrl.cpu_kernels` can be built here; where it can, its tests
# require the build to succeed (a silent fallback would hide a broken kernel
# behind XLA's products).
HAVE_COMPILER = any(shutil.which(c) for c in ("g++", "c++", "clang++"))


def random_normal(shape, dtype, seed):
  """Standard normal numpy array of `shape` and `dtype` from `seed`."""
  return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


__all__ = [
  "REPO_ROOT",
  "COPY_PINNED",
  "HAVE_COMPILER",
  "copy_config",
  "load_config",
  "random_normal",
]


def init_float64(model, x, seed=0):
  """Random float64 params of `model` for input `x`: normal with standard
  deviation 1/sqrt(fan_in) for matrices, 0.1 for biases (drawn in NumPy:
  compiling Flax's initialisers costs seconds)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)["params"]
  rng = np.random.default_rng(seed)

  def draw(shape):
    scale = (
      1 / np.sqrt(np.prod(shape.shape[:-1])) if len(shape.shape) > 1 else 0.1
    )
    return jnp.asarray(scale * rng.normal(size=shape.shape), jnp.float64)

  return jax.tree.map(draw, shapes)


def write_fake_cifar(folder, train_images: int = 8, test_images: int = 4):
  """Random CIFAR-10 batch files in `folder` (`train_images` in
  data_batch_1, `test_images` in test_batch, labels 0, 1, .. mod 10), for
  runs that need the format and not the pictures; returns the folder."""
  rng = np.random.default_rng(0)
  folder.mkdir(parents=True, exist_ok=True)
  for name, num in (
    ("data_batch_1", train_images),
    ("test_batch", test_images),
  ):
    cifar10.write_batch(
      folder / name, rng.integers(0, 256, (num, 32, 32, 3)), np.arange(num) % 10
    )
  return str(folder)
