r"""The datasets of the classifier experiments: what each adds to the shared
experiment (`experiment.py`). Adding a dataset is one `Task` here (and its
`configs/NAME.py` and `experiments/NAME.py`).

* `MNIST`: the paper's FNN 784-512(ReLU)-10 on flattened images in [0, 1].
* `CIFAR10`: the mini-VGG (`models.MiniVGG`). Images stay on the device as
  uint8 and are standardised per channel (training-set mean and standard
  deviation) inside the jitted step.
* `IMDB`: embedding, stacked `rls.LSTM`, a 2-unit output on the last step
  (`models.SentimentLSTM`) on token ids (`experiments/data/imdb.py`
  tokenises, truncates and pads; its token cache makes the second run start
  in about a second). The embedding has no layer input in the RLS sense, so
  every optimiser but `adam` trains it with Adam
  (`config.embedding_learning_rate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from experiments import data
from experiments.classifier import models

Arrays = dict[str, np.ndarray]
Preprocess = Callable[[jax.Array], jax.Array]


def _identity(inputs: jax.Array) -> jax.Array:
  return inputs


class Task(NamedTuple):
  """One dataset and its network.

  Attributes:
    name: the experiment's name (`configs/NAME.py`, `experiments/NAME.py`).
    read: `read(config) -> dataset`, the files as the data loader returns
      them (the only file or network I/O).
    arrays: `arrays(config, dataset) -> (arrays, preprocess)`: the
      `train_inputs`, `train_labels`, `test_inputs`, `test_labels` arrays
      (inputs may be compact, e.g. uint8) and the jittable map applied to
      every minibatch before the model.
    make_model: `make_model(config) -> flax module` mapping preprocessed
      inputs to class scores.
    input_spec: `input_spec(config) -> jax.ShapeDtypeStruct` of one
      preprocessed example (integer inputs are token ids below
      `config.vocab_size`).
    num_classes: outputs of the network.
    describe: `describe(config, arrays) -> str`, printed at the start of a run
      and the title of its `curves.png`.
  """

  name: str
  read: Callable[[Any], dict]
  arrays: Callable[[Any, dict], tuple[Arrays, Preprocess]]
  make_model: Callable[[Any], nn.Module]
  input_spec: Callable[[Any], jax.ShapeDtypeStruct]
  num_classes: int
  describe: Callable[[Any, Arrays], str]


def example_input(task: Task, config) -> jax.Array:
  """A batch-of-one input for `model.init`."""
  spec = task.input_spec(config)
  return jnp.zeros((1,) + spec.shape, spec.dtype)


def _mnist_arrays(config, dataset: dict) -> tuple[Arrays, Preprocess]:
  """`train_inputs` (n, 784) float32 in [0, 1] (the first
  `config.train_limit`), labels, and the test set (the first
  `config.test_limit`)."""
  limit = config.train_limit or None
  test_limit = config.test_limit or None
  return {
    "train_inputs": dataset["train_images"][:limit],
    "train_labels": dataset["train_labels"][:limit],
    "test_inputs": dataset["test_images"][:test_limit],
    "test_labels": dataset["test_labels"][:test_limit],
  }, _identity


def _mnist_model(config):
  """`models.FNN`, or with ``model_api='nnx'`` the same network in NNX."""
  api = config.model_api
  if api == "nnx":
    from experiments.classifier import nnx_models  # Imports flax.nnx.

    return nnx_models.NnxModel(
      lambda rngs: nnx_models.NnxFNN(config.hidden_size, rngs=rngs)
    )
  if api != "linen":
    raise ValueError(f"model_api must be 'linen' or 'nnx', got {api!r}.")
  return models.FNN(hidden_size=config.hidden_size)


MNIST = Task(
  name="mnist",
  read=lambda config: data.load_mnist(config.data_dir),
  arrays=_mnist_arrays,
  make_model=lambda config: _mnist_model(config),
  input_spec=lambda config: jax.ShapeDtypeStruct((784,), jnp.float32),
  num_classes=10,
  describe=lambda config, arrays: (
    f"MNIST FNN 784-{config.hidden_size}-10 | {config.optimizer} "
    f"({config.loss}) | batch {config.batch_size}"
  ),
)


def _cifar10_arrays(config, dataset: dict) -> tuple[Arrays, Preprocess]:
  """uint8 images and labels (the first `train_limit` / `test_limit`),
  standardised per channel by `preprocess`."""
  limit = config.train_limit or None
  to_uint8 = lambda x: np.rint(np.asarray(x) * 255).astype(np.uint8)
  train = to_uint8(dataset["train_images"][:limit])
  pixels = train.reshape(-1, 3).astype(np.float64) / 255
  mean = pixels.mean(0).astype(np.float32)
  std = pixels.std(0).astype(np.float32)

  def preprocess(images):
    return (images.astype(jnp.float32) / 255 - mean) / std

  test_limit = config.test_limit or None
  return {
    "train_inputs": train,
    "train_labels": dataset["train_labels"][:limit],
    "test_inputs": to_uint8(dataset["test_images"][:test_limit]),
    "test_labels": dataset["test_labels"][:test_limit],
  }, preprocess


def _mini_vgg(config) -> models.MiniVGG:
  return models.MiniVGG(
    conv_features=tuple(config.conv_features),
    pool_after_conv5=config.pool_after_conv5,
    hidden_size=config.hidden_size,
  )


def _describe_mini_vgg(config, arrays: Arrays) -> str:
  pools = sum(spec == "pool" for spec in config.conv_features)
  side = 32 // 2 ** (pools + bool(config.pool_after_conv5))
  channels = [s for s in config.conv_features if s != "pool"][-1]
  return (
    f"CIFAR-10 mini-VGG {list(config.conv_features)} (FC in "
    f"{side}x{side}x{channels}) FC {config.hidden_size} | "
    f"{config.optimizer} ({config.loss}) | batch {config.batch_size} | "
    f"{len(arrays['train_labels'])} images"
  )


CIFAR10 = Task(
  name="cifar10",
  read=lambda config: data.load_cifar10(config.data_dir),
  arrays=_cifar10_arrays,
  make_model=_mini_vgg,
  input_spec=lambda config: jax.ShapeDtypeStruct((32, 32, 3), jnp.float32),
  num_classes=10,
  describe=_describe_mini_vgg,
)


def _every_kth(tokens: np.ndarray, labels: np.ndarray, limit: int):
  """A balanced subset of at most `limit` reviews (they are stored neg then
  pos), or all of them when `limit` is 0."""
  if not limit:
    return tokens, labels
  stride = max(len(labels) // limit, 1)
  return tokens[::stride][:limit], labels[::stride][:limit]


def _imdb_arrays(config, dataset: dict) -> tuple[Arrays, Preprocess]:
  """Token-id arrays and labels (`train_limit` and `test_limit` keep
  balanced subsets)."""
  data.imdb.check_sequence_args(
    config.vocab_size, config.max_length, config.truncate, config.pad
  )
  train_tokens, train_labels = _every_kth(
    dataset["train_tokens"], dataset["train_labels"], config.train_limit
  )
  test_tokens, test_labels = _every_kth(
    dataset["test_tokens"], dataset["test_labels"], config.test_limit
  )
  return {
    "train_inputs": train_tokens,
    "train_labels": train_labels,
    "test_inputs": test_tokens,
    "test_labels": test_labels,
  }, _identity


IMDB = Task(
  name="imdb",
  read=lambda config: data.load_imdb(
    config.data_dir,
    config.vocab_size,
    config.max_length,
    config.truncate,
    config.pad,
  ),
  arrays=_imdb_arrays,
  make_model=lambda config: models.SentimentLSTM(
    vocab_size=config.vocab_size,
    embed_dim=config.embed_dim,
    hidden_size=config.hidden_size,
    num_layers=config.num_layers,
  ),
  input_spec=lambda config: jax.ShapeDtypeStruct(
    (config.max_length,), jnp.int32
  ),
  num_classes=2,
  describe=lambda config, arrays: (
    f"IMDB embed {config.embed_dim} + {config.num_layers}x LSTM "
    f"{config.hidden_size} | {config.optimizer} ({config.loss}) | "
    f"batch {config.batch_size} | vocab {config.vocab_size}, length "
    f"{config.max_length} | {len(arrays['train_labels'])} reviews"
  ),
)

BY_NAME = {task.name: task for task in (MNIST, CIFAR10, IMDB)}
