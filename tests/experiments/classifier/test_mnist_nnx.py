"""`--config.model_api=nnx`: the MNIST FNN as an nnx.Module, captured by
rls.layer_inputs(model, x), trains to the Linen FNN's losses."""

from helpers import load_config
import numpy as np
import pytest

from experiments.classifier import experiment
from experiments.classifier import tasks


def _tiny_mnist(seed=0):
  rng = np.random.default_rng(seed)
  return {
    "train_images": rng.integers(0, 256, (96, 784)).astype(np.uint8),
    "train_labels": rng.integers(0, 10, 96).astype(np.int32),
    "test_images": rng.integers(0, 256, (32, 784)).astype(np.uint8),
    "test_labels": rng.integers(0, 10, 32).astype(np.int32),
  }


@pytest.mark.parametrize("preset", ["rls_momentum", "rls_hybrid"])
def test_nnx_fnn_trains_to_the_linen_losses(tmp_path, preset):
  dataset = _tiny_mnist()
  records = {}
  for api in ("linen", "nnx"):
    config = load_config(
      "mnist",
      preset,
      model_api=api,
      hidden_size=16,
      batch_size=32,
      epochs=2,
      seed=0,
      param_init="pytorch",  # Redrawn per layer name: the same params.
      eval_train_set=False,
      # Random labels: the hybrid's first epoch reaches 41 nats, past the
      # divergence bound; this compares the two APIs, not learning.
      divergence_factor=0.0,
    )
    records[api] = experiment.train(
      tasks.MNIST, config, str(tmp_path / api), dataset
    )
  for linen, nnx in zip(records["linen"], records["nnx"]):
    for key in ("train_loss", "test_loss", "test_accuracy"):
      np.testing.assert_allclose(nnx[key], linen[key], rtol=1e-5)
  assert records["nnx"][-1]["train_loss"] != records["nnx"][0]["train_loss"]


def test_unknown_model_api_is_named():
  config = load_config("mnist", "rls", model_api="haiku")
  with pytest.raises(ValueError, match="model_api must be 'linen' or 'nnx'"):
    tasks.MNIST.make_model(config)
