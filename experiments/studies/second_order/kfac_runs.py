"""kfac-jax's K-FAC on the same tasks (run in kfac-jax's own environment:
it is no dependency of this project)."""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments.classifier import training
from experiments.studies.second_order.common import epoch_order
from experiments.studies.second_order.common import evaluate_fn
from experiments.studies.second_order.common import init_params
from experiments.studies.second_order.common import load_data
from experiments.studies.second_order.common import record
from experiments.studies.second_order.common import task_config


def kfac_optimizer(kfac_jax, loss_fn):
  """kfac-jax's README settings: adaptive learning rate, momentum and
  damping from ``initial_damping=1``, no weight decay.

  Convolutions reach kfac-jax as dense layers repeated over positions (the
  ``patches_flat_kernel`` mini-VGG); unmasked, their block is the KFC
  factorisation kfac-jax's conv2d block computes (its ``use_masking`` would
  drop positions whose output tangents are all zero)."""
  repeated_dense = functools.partial(
    kfac_jax.RepeatedDenseKroneckerFactored, use_masking=False
  )
  return kfac_jax.Optimizer(
    layer_tag_to_block_ctor={"repeated_dense": repeated_dense},
    value_and_grad_func=jax.value_and_grad(loss_fn),
    l2_reg=0.0,
    value_func_has_aux=False,
    value_func_has_state=False,
    value_func_has_rng=False,
    use_adaptive_learning_rate=True,
    use_adaptive_momentum=True,
    use_adaptive_damping=True,
    initial_damping=1.0,
    num_burnin_steps=0,
    multi_device=False,
  )


def kfac_tags(kfac_opt) -> list[str]:
  """One line per curvature block: its class, layer tag and parameter
  shapes (kfac-jax keeps the estimator private: `_estimator`)."""
  lines = []
  for block in kfac_opt._estimator.blocks:  # pylint: disable=protected-access
    shapes = [tuple(v.aval.shape) for v in block.parameter_variables]
    lines.append(
      f"{type(block).__name__} {block.layer_tag_primitive.name} "
      f"{block.name} {shapes}"
    )
  return lines


def _patch_kfac_for_jax_0_10(kfac_jax) -> None:
  """kfac-jax 0.0.8 unpacks ``(subfuns, params)`` from
  ``Primitive.get_bind_params``, which JAX 0.10 returns as one dict (holding
  ``subfuns`` for call primitives, bound as keywords); its graph evaluation
  then fails. The same evaluation for either API."""
  del kfac_jax  # Imported; its private matcher module is patched.
  from kfac_jax._src import tag_graph_matcher as matcher  # pylint: disable=g-import-not-at-top

  user_context = matcher.jex.source_info_util.user_context

  def eval_jaxpr_eqn(eqn, in_values):
    bind_params = eqn.primitive.get_bind_params(eqn.params)
    subfuns = ()
    if isinstance(bind_params, tuple):  # kfac-jax's JAX: (subfuns, params).
      subfuns, bind_params = bind_params
    with user_context(eqn.source_info.traceback):
      output = eqn.primitive.bind(*subfuns, *in_values, **bind_params)
    return output if isinstance(output, list) else [output]

  matcher.eval_jaxpr_eqn = eval_jaxpr_eqn


def flatten_conv_kernels(params: dict) -> dict:
  """Conv kernels ``(3, 3, in, out)`` -> ``(9 * in, out)``, the
  ``patches_flat_kernel`` mini-VGG's layout (same weights, same outputs)."""
  return jax.tree.map(
    lambda x: x.reshape(-1, x.shape[-1]) if x.ndim == 4 else x, params
  )


def _import_kfac():
  try:
    import kfac_jax  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise SystemExit(
      "K-FAC needs kfac-jax, which is not a dependency of this project: "
      "install it in an environment of its own (see "
      "experiments/studies/compare_second_order.py's docstring) and run it there."
    ) from None
  _patch_kfac_for_jax_0_10(kfac_jax)
  return kfac_jax


def kfac_problem(task_name, seed, conv_impl="patches_flat_kernel", dtype=None):
  """``(kfac_opt, params, model, config, arrays, preprocess)`` of one seed,
  the others' initial weights; CIFAR's convolutions as ``conv_impl``
  ("patches_flat_kernel": repeated-dense blocks; "flax": conv2d blocks).
  ``dtype`` casts the parameters and the network's input (float64 checks)."""
  kfac_jax = _import_kfac()
  config = task_config(task_name, "K-FAC")
  task, arrays, preprocess = load_data(task_name, config)
  model = task.make_model(config)
  params = init_params(task, config, model, seed)
  if task_name == "cifar10":
    model = model.clone(conv_impl=conv_impl)
    if conv_impl == "patches_flat_kernel":
      params = flatten_conv_kernels(params)
  # Fresh buffers: kfac-jax's step donates its parameters.
  params = jax.tree.map(lambda p: jnp.array(p, dtype=dtype, copy=True), params)
  loss = training.LOSSES["mse"]

  def loss_fn(params, batch):
    inputs, labels = batch
    inputs = preprocess(inputs)
    outputs = model.apply(
      {"params": params}, inputs.astype(dtype or inputs.dtype)
    )
    targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
    kfac_jax.register_squared_error_loss(outputs, targets, weight=0.5)
    return loss(outputs, labels)

  kfac_opt = kfac_optimizer(kfac_jax, loss_fn)
  return kfac_opt, params, model, config, arrays, preprocess


def _batch_at(arrays, indices):
  return (
    jnp.asarray(arrays["train_inputs"][indices]),
    jnp.asarray(arrays["train_labels"][indices]),
  )


def run_kfac(task_name, seed, epochs):
  """One seed of kfac-jax's K-FAC; per-epoch records and the layer tags.
  CIFAR's convolutions reach it as repeated-dense blocks: kfac-jax's conv2d
  blocks take ~45 s a step on this CPU (`compare_conv_blocks`)."""
  kfac_opt, params, model, config, arrays, preprocess = kfac_problem(
    task_name, seed
  )
  num_train = len(arrays["train_labels"])
  rng = jax.random.PRNGKey(1000 + seed)
  order = epoch_order(seed, 1, num_train, config.batch_size)
  rng, init_rng = jax.random.split(rng)
  state = kfac_opt.init(params, init_rng, _batch_at(arrays, order[0]))
  tags = kfac_tags(kfac_opt)
  print("  kfac-jax blocks:\n    " + "\n    ".join(tags), flush=True)
  evaluate = evaluate_fn(model, config, preprocess)
  records, step_count = [], 0
  for epoch in range(1, epochs + 1):
    order = epoch_order(seed, epoch, num_train, config.batch_size)
    losses, start = [], None
    for indices in order:
      rng, step_rng = jax.random.split(rng)
      params, state, stats = kfac_opt.step(
        params,
        state,
        step_rng,
        batch=_batch_at(arrays, indices),
        global_step_int=step_count,
      )
      losses.append(stats["loss"])
      step_count += 1
      if start is None:  # The first step compiles; time the others.
        jax.block_until_ready(params)
        start = time.perf_counter()
    jax.block_until_ready(params)
    seconds = (time.perf_counter() - start) * len(order) / (len(order) - 1)
    losses = np.asarray(jax.device_get(losses), np.float64)
    records.append(record(epoch, losses, seconds, params, evaluate, arrays))
    print(f"  K-FAC seed {seed} epoch {epoch}: {records[-1]}", flush=True)
  return records, {"kfac_blocks": tags}


def compare_conv_blocks(steps: int = 1, seed: int = 0) -> dict:
  """CIFAR-10's first K-FAC ``steps`` in float64 with the convolutions as
  kfac-jax's conv2d blocks (``nn.Conv``) and as repeated-dense blocks (the
  runs'), from the same weights, minibatches and keys: each path's seconds
  per step and learning rates and, after every step, the largest difference
  of each parameter array relative to its largest entry
  (``relative_differences``) and to its largest change from the shared
  initial weights (``relative_to_change``: the measure that does not blow
  up where an update nearly cancels the last, as zero-initialised biases
  can). Needs ``jax_enable_x64``."""
  out = {}
  for conv_impl in ("patches_flat_kernel", "flax"):
    kfac_opt, params, _, config, arrays, _ = kfac_problem(
      "cifar10", seed, conv_impl, dtype=jnp.float64
    )
    order = epoch_order(seed, 1, len(arrays["train_labels"]), config.batch_size)
    rng = jax.random.PRNGKey(seed)
    state = kfac_opt.init(params, rng, _batch_at(arrays, order[0]))
    # Copies: kfac-jax's step donates the parameters it is given.
    trail = [jax.tree.map(np.array, flatten_conv_kernels(params))]
    seconds, rates = [], []
    for step in range(steps):
      start = time.perf_counter()
      params, state, stats = kfac_opt.step(
        params,
        state,
        rng,
        batch=_batch_at(arrays, order[step]),
        global_step_int=step,
      )
      jax.block_until_ready(params)
      seconds.append(time.perf_counter() - start)
      rates.append(float(stats["learning_rate"]))
      trail.append(jax.tree.map(np.array, flatten_conv_kernels(params)))
    out[conv_impl] = dict(seconds=seconds, learning_rates=rates, trail=trail)
  dense, conv = out["patches_flat_kernel"], out["flax"]
  dense_trail, conv_trail = dense.pop("trail"), conv.pop("trail")
  initial = conv_trail[0]
  relative, to_change = [], []
  for a_step, b_step in zip(dense_trail[1:], conv_trail[1:]):
    relative.append(
      jax.tree.map(
        lambda a, b: float(np.max(np.abs(a - b)) / np.max(np.abs(b))),
        a_step,
        b_step,
      )
    )
    to_change.append(
      jax.tree.map(
        lambda a, b, b0: float(np.max(np.abs(a - b)) / np.max(np.abs(b - b0))),
        a_step,
        b_step,
        initial,
      )
    )
  return dict(
    repeated_dense=dense,
    conv2d=conv,
    relative_differences=relative,
    relative_to_change=to_change,
  )
