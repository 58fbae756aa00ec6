"""Time per training step of each optimiser on the RLS paper's networks,
where an RLS step's time goes, and Table I's FLOP predictions of the RLS /
Adam ratio. `scripts/bench_rls.py` (the MNIST FNN) and the `rls_runtime`
reproduction target (all three networks) report these.

Every step timed is the jitted training step the experiments train with
(`training.make_train_step`: forward, backward, layer-input capture, clipping,
the optimiser) on one fixed synthetic minibatch of the network's input shape
(the cost does not depend on the values). A timed call runs `steps` steps in
one `lax.scan`, compiled and run once before timing; calls go round-robin
over the configs, `repeats` times, so a busy spell of a shared machine hits
all of them alike; `statistic` (the minimum by default, or the median) of a
config's calls counts.

`predicted_ratio` counts multiply-adds as the paper's Table I does: a layer's
forward and backward matrix products (3x the forward's ``2 M · fan_in ·
fan_out``, with ``M`` examples times positions or time steps), against RLS's
extra ``2 (fan_in+1)^2 (fan_out + 2)`` per step (``P ∇``, ``u = P x``, the
rank-one update of ``P``) and Adam's ~10 flops per parameter.
`table_one_ratios` is Table I's own formula, ``1 + N_{l-1}/M`` per layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.classifier import tasks
from experiments.classifier import training
import rls

ADAM_FLOPS_PER_PARAM = 10
# Section VI-B: RLS run time / Adam run time (PyTorch, one 1080Ti GPU).
PAPER_RATIOS = {"mnist": 1.1, "cifar10": 1.4, "imdb": 1.1}
Call = tuple[Callable[[Any], Any], Any]  # (jitted fn, its argument)


def synthetic_batch(task: tasks.Task, config, seed: int = 0):
  """`(inputs, labels)` of one minibatch with the network's input shape."""
  rng = np.random.default_rng(seed)
  spec = task.input_spec(config)
  shape = (config.batch_size,) + spec.shape
  if jnp.issubdtype(spec.dtype, jnp.integer):
    inputs = rng.integers(0, config.vocab_size, shape, dtype=np.int32)
  else:
    inputs = rng.random(shape, np.float32)
  labels = rng.integers(0, task.num_classes, config.batch_size)
  return jnp.asarray(inputs), jnp.asarray(labels)


def repeated(step: Callable[[Any], Any], steps: int) -> Callable[[Any], Any]:
  """`step(carry) -> carry`, run `steps` times in one jitted scan."""

  def run(carry):
    return jax.lax.scan(
      lambda c, _: (step(c), None), carry, None, length=steps
    )[0]

  return jax.jit(run)


def time_calls(
  calls: dict[str, Call], steps: int, repeats: int, statistic: Callable = min
) -> dict[str, float]:
  """Seconds per step of each `name: (fn, arg)`, timing `fn(arg)` (which
  runs `steps` steps) round-robin, `repeats` times; `statistic` of them."""
  for fn, arg in calls.values():
    jax.block_until_ready(fn(arg))  # Compile and warm up.
  times = {name: [] for name in calls}
  for _ in range(repeats):
    for name, (fn, arg) in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(arg))
      times[name].append((time.perf_counter() - start) / steps)
  return {name: statistic(t) for name, t in times.items()}


def _train_steps_call(model, config, inputs, labels, steps: int) -> Call:
  tx = training.make_optimizer(config)
  train_step = training.make_train_step(
    model,
    tx,
    config.loss,
    training.uses_layer_inputs(config),
    training.input_samples(config),
  )
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs[:1])["params"]
  step = lambda carry: train_step(*carry, inputs, labels)[:2]
  return repeated(step, steps), (params, tx.init(params))


def time_steps(
  task: tasks.Task,
  configs: dict[str, Any],
  steps: int = 5,
  repeats: int = 5,
  statistic: Callable = min,
) -> dict[str, float]:
  """Seconds per training step of each config.

  All configs must share the network (they are one task's presets).
  """
  first = next(iter(configs.values()))
  model = task.make_model(first)
  inputs, labels = synthetic_batch(task, first)
  calls = {
    name: _train_steps_call(model, config, inputs, labels, steps)
    for name, config in configs.items()
  }
  return time_calls(calls, steps, repeats, statistic)


def _kernels(params, prefix="") -> Iterator[tuple[str, Any]]:
  """`(path, kernel)` of every layer of `params`, in order."""
  for key, value in params.items():
    path = f"{prefix}{key}"
    if isinstance(value, dict) and "kernel" in value:
      yield path, value["kernel"]
    elif isinstance(value, dict):
      yield from _kernels(value, path + "/")


def _feed_back(carry, result):
  """`carry + 0 * result` leaf by leaf: keeps `result` from being pruned."""
  return jax.tree.map(lambda c, r: c + 0 * r, carry, result)


def _optimizer_only_call(tx, grads, params, extra: dict) -> tuple:
  """`(step, carry)` of `tx.update` alone on fixed gradients; the updates
  feed back into the carry so none is pruned."""

  def step(carry):
    opt_state, p = carry
    updates, opt_state = tx.update(grads, opt_state, p, **extra)
    return opt_state, _feed_back(p, updates)

  return step, (tx.init(params), params)


def _layer_parts(params) -> dict[str, tuple]:
  """`(step, carry)` of the two kinds of work inside the RLS update, per
  layer shape: ``P ∇`` and ``u = P x`` with the rank-one update of ``P``."""
  parts = {}
  for name, kernel in _kernels(params):
    size = int(np.prod(kernel.shape[:-1])) + 1  # Augmented with the bias.
    grad = jnp.ones((size, kernel.shape[-1]))
    x = jnp.full((size,), 0.1)
    parts[f"  P∇ matmul, {name} ({size}x{size} @ {size}x{grad.shape[1]})"] = (
      lambda q, g=grad: q + 0 * (q @ g)[:, :1],
      jnp.eye(size),
    )
    parts[f"  u = Px and rank-one P update, {name}"] = (
      lambda q, x=x: q - 1e-6 * jnp.outer(q @ x, q @ x),
      jnp.eye(size),
    )
  return parts


def time_breakdown(
  task: tasks.Task,
  config,
  steps: int = 5,
  repeats: int = 5,
  statistic: Callable = min,
) -> dict[str, float]:
  """Seconds per step of the parts of an RLS training step (`config`'s
  optimiser), each timed alone, next to Adam's update."""
  model = task.make_model(config)
  inputs, labels = synthetic_batch(task, config)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs[:1])["params"]
  loss_fn = training.LOSSES[config.loss]

  def with_capture(p):
    outputs, xbar = rls.layer_inputs(model.apply, {"params": p}, inputs)
    return loss_fn(outputs, labels), xbar

  def plain(p):
    return loss_fn(model.apply({"params": p}, inputs), labels)

  grad_with_capture = jax.grad(with_capture, has_aux=True)
  grads, layer_inputs = grad_with_capture(params)
  adam = optax.chain(
    optax.clip_by_global_norm(config.clip_norm),
    optax.adam(config.learning_rate),
  )
  parts = {
    "forward+backward (plain)": (
      lambda p: _feed_back(p, jax.grad(plain)(p)),
      params,
    ),
    "forward+backward + x̄ capture": (
      lambda p: _feed_back(p, grad_with_capture(p)[0]),
      params,
    ),
    "clip + RLS update (u, h, P∇, P update)": _optimizer_only_call(
      training.make_optimizer(config),
      grads,
      params,
      {"layer_inputs": layer_inputs},
    ),
    "clip + Adam update": _optimizer_only_call(adam, grads, params, {}),
    **_layer_parts(params),
  }
  calls = {
    name: (repeated(step, steps), carry)
    for name, (step, carry) in parts.items()
  }
  return time_calls(calls, steps, repeats, statistic)


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


def layer_shapes(task: tasks.Task, config) -> list[tuple[str, int, int, int]]:
  """`(name, fan_in, fan_out, rows)` of every RLS matrix; rows = examples x
  positions (conv) or x time steps (LSTM) in one minibatch."""
  model = task.make_model(config)
  example = tasks.example_input(task, config)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), example)
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
    shapes.append((name, fan_in, fan_out, rows))
  return shapes


def predicted_ratio(task: tasks.Task, config, hybrid: bool = False) -> dict:
  """Table I's FLOP counts: forward+backward, RLS extra, Adam extra, ratio.

  With `hybrid`, the output layer is Adam's (no RLS extra for it).
  """
  shapes = layer_shapes(task, config)
  fwd_bwd = sum(
    3 * 2 * rows * fan_in * fan_out for _, fan_in, fan_out, rows in shapes
  )
  num_params = sum((fan_in + 1) * fan_out for _, fan_in, fan_out, _ in shapes)
  rls_layers = shapes[:-1] if hybrid else shapes
  rls_extra = sum(
    2 * (fan_in + 1) ** 2 * (fan_out + 2)
    for _, fan_in, fan_out, _ in rls_layers
  )
  adam_extra = ADAM_FLOPS_PER_PARAM * num_params
  return {
    "forward_backward_gflop": fwd_bwd / 1e9,
    "rls_extra_gflop": rls_extra / 1e9,
    "ratio": (fwd_bwd + rls_extra) / (fwd_bwd + adam_extra),
  }


def table_one_ratios(task: tasks.Task, config) -> dict[str, float]:
  """RLS/SGD time from Table I's FLOP counts, per layer and for the net.

  Table I: SGD `N_{l-1} M N_l`, RLS `N_{l-1} (M + N_{l-1}) N_l`, so a layer's
  ratio is `1 + N_{l-1}/M` (`M` = the layer's rows); summed over layers for
  the whole net. Table I counts one `M`-row matmul per layer for SGD; a real
  step does three (forward, and two in the backward pass), so the same extra
  FLOPs over a whole step give `1 + N_{l-1}/(3M)`.
  """
  shapes = layer_shapes(task, config)
  sgd = sum(n_in * rows * n_out for _, n_in, n_out, rows in shapes)
  extra = [n_in * n_in * n_out for _, n_in, n_out, _ in shapes]
  ratios = {
    f"{name} {n_in}->{n_out}: 1 + N_(l-1)/M": 1 + n_in / rows
    for name, n_in, n_out, rows in shapes
  }
  ratios["whole net, Table I FLOPs"] = 1 + sum(extra) / sgd
  ratios["whole net, extra FLOPs over fwd+bwd (3 matmuls)"] = 1 + sum(extra) / (
    3 * sgd
  )
  ratios["hybrid (RLS on hidden only), over fwd+bwd"] = 1 + sum(extra[:-1]) / (
    3 * sgd
  )
  return ratios
