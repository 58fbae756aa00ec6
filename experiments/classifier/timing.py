"""Time per training step of each optimiser on the RLS paper's networks, and
Table I's FLOP prediction of the RLS / Adam ratio.

`time_steps` builds, for every named config, the same jitted training step
that `experiments/classifier.py` trains with (forward, backward, layer-input
capture, clipping, the optimiser), on one fixed synthetic minibatch of the
network's input shape (the cost does not depend on the values). A timed call
runs `steps` steps in one `lax.scan`; calls go round-robin over the configs,
`repeats` times, so a busy spell of a shared machine hits all of them alike;
the best (minimum) call counts.

`predicted_ratio` counts multiply-adds as the paper's Table I does: a layer's
forward and backward matrix products (3x the forward's ``2 M · fan_in ·
fan_out``, with ``M`` examples times positions or time steps), against RLS's
extra ``2 (fan_in+1)^2 (fan_out + 2)`` per step (``P ∇``, ``u = P x``, the
rank-one update of ``P``) and Adam's ~10 flops per parameter.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.classifier import cifar10_task as cifar10_experiment
from experiments.classifier import experiment as classifier
from experiments.classifier import models as classifier_models
from experiments.classifier import imdb_task as imdb_experiment

ADAM_FLOPS_PER_PARAM = 10
# Section VI-B: RLS run time / Adam run time (PyTorch, one 1080Ti GPU).
PAPER_RATIOS = {"mnist": 1.1, "cifar10": 1.4, "imdb": 1.1}


def make_model(dataset: str, config):
  if dataset == "mnist":
    return classifier_models.FNN(hidden_size=config.hidden_size)
  if dataset == "cifar10":
    return cifar10_experiment.make_model(config)
  if dataset == "imdb":
    return imdb_experiment.make_model(config)
  raise ValueError(f"dataset={dataset!r}; expected mnist, cifar10 or imdb")


def synthetic_batch(dataset: str, config, seed: int = 0):
  """`(inputs, labels)` of one minibatch with the network's input shape."""
  rng = np.random.default_rng(seed)
  m = config.batch_size
  if dataset == "mnist":
    inputs = rng.random((m, 784), np.float32)
  elif dataset == "cifar10":
    inputs = rng.random((m, 32, 32, 3), np.float32)
  else:
    inputs = rng.integers(0, config.vocab_size, (m, config.max_length),
                          dtype=np.int32)
  num_classes = 2 if dataset == "imdb" else 10
  return jnp.asarray(inputs), jnp.asarray(rng.integers(0, num_classes, m))


def _repeat_step(model, config, inputs, labels, steps: int):
  tx = classifier.make_optimizer(config)
  step = classifier.make_train_step(model, tx, config.loss,
                                    config.optimizer != "adam")
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs[:1])["params"]
  carry = (params, tx.init(params))

  def run(carry):
    def body(carry, _):
      params, opt_state, loss = step(*carry, inputs, labels)
      return (params, opt_state), loss
    return jax.lax.scan(body, carry, None, length=steps)

  return jax.jit(run).lower(carry).compile(), carry


def time_steps(dataset: str, configs: dict[str, Any], steps: int = 5,
               repeats: int = 5) -> dict[str, float]:
  """Seconds per training step of each config (best of `repeats` calls).

  All configs must share the network (they are the same dataset's presets).
  """
  first = next(iter(configs.values()))
  model = make_model(dataset, first)
  inputs, labels = synthetic_batch(dataset, first)
  compiled = {name: _repeat_step(model, c, inputs, labels, steps)
              for name, c in configs.items()}
  for fn, carry in compiled.values():
    jax.block_until_ready(fn(carry))  # Warm up.
  best = {name: float("inf") for name in configs}
  for _ in range(repeats):
    for name, (fn, carry) in compiled.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(carry))
      best[name] = min(best[name], (time.perf_counter() - start) / steps)
  return best


def layer_shapes(dataset: str, config) -> list[tuple[int, int, int]]:
  """`(fan_in, fan_out, rows)` of every RLS matrix; rows = examples x
  positions (conv) or x time steps (LSTM) in one minibatch."""
  model = make_model(dataset, config)
  inputs, _ = synthetic_batch(dataset, config)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), inputs[:1])
  m = config.batch_size
  shapes = []
  for name, kernel in _kernels(params["params"]):
    fan_in = int(np.prod(kernel.shape[:-1]))
    fan_out = int(kernel.shape[-1])
    if name.startswith("conv"):
      index = int(name[4:].split("/")[0])
      side = 32 // 2 ** _pools_before(config, index)
      rows = m * side * side
    elif name.startswith("lstm"):
      rows = m * config.max_length
    else:
      rows = m
    shapes.append((fan_in, fan_out, rows))
  return shapes


def _pools_before(config, conv_index: int) -> int:
  pools, seen = 0, -1
  for spec in config.conv_features:
    if spec == "pool":
      pools += 1
    else:
      seen += 1
      if seen == conv_index:
        return pools
  return pools


def _kernels(params, prefix=""):
  for key, value in params.items():
    path = f"{prefix}{key}"
    if isinstance(value, dict) and "kernel" in value:
      yield path, value["kernel"]
    elif isinstance(value, dict):
      yield from _kernels(value, path + "/")


def predicted_ratio(dataset: str, config, hybrid: bool = False) -> dict:
  """Table I's FLOP counts: forward+backward, RLS extra, Adam extra, ratio.

  With `hybrid`, the output layer is Adam's (no RLS extra for it).
  """
  shapes = layer_shapes(dataset, config)
  fwd_bwd = sum(3 * 2 * rows * fan_in * fan_out
                for fan_in, fan_out, rows in shapes)
  num_params = sum((fan_in + 1) * fan_out for fan_in, fan_out, _ in shapes)
  rls_layers = shapes[:-1] if hybrid else shapes
  rls_extra = sum(2 * (fan_in + 1) ** 2 * (fan_out + 2)
                  for fan_in, fan_out, _ in rls_layers)
  adam_extra = ADAM_FLOPS_PER_PARAM * num_params
  return {"forward_backward_gflop": fwd_bwd / 1e9,
          "rls_extra_gflop": rls_extra / 1e9,
          "ratio": (fwd_bwd + rls_extra) / (fwd_bwd + adam_extra)}
