r"""Second-order optimisers side by side on the RLS paper's MNIST FNN and the
small CIFAR-10 mini-VGG: Adam, Muon, every RLS form, the damped
second-moment RLS (`rls.damped_second_moment`, "RLS-D") and kfac-jax's
K-FAC, training loss per epoch and per wall-second, 3 seeds.

  # every optax optimiser (the project's environment):
  DATA_DIR=/work/shared/data .venv/bin/python -m scripts.compare_second_order \
    --workdir runs/second_order
  # K-FAC, in an environment of its own (kfac-jax is no dependency):
  python3 -m venv /work/venvs/kfac && /work/venvs/kfac/bin/pip install \
    kfac-jax jax==0.10.2 optax==0.2.8 flax==0.12.8 ml_collections
  DATA_DIR=/work/shared/data PYTHONPATH=. /work/venvs/kfac/bin/python \
    -m scripts.compare_second_order --workdir runs/second_order \
    --variants K-FAC --no-report
  # then the table and figure from every finished run:
  .venv/bin/python -m scripts.compare_second_order --workdir \
    runs/second_order --report-only

Same networks, data, loss (eq. 57's MSE, identity output), batch size (128)
and initialisation as `scripts/compare_rls_second_moment.py`; its optax
variants keep their configs (RLS-SM tuned per task), RLS-D has one setting
(`DAMPED`) for both tasks. Every run is one seed in its own loop (a jitted
`lax.scan` per epoch for optax; kfac-jax's own jitted step per minibatch),
full minibatches only, and is timed by the wall clock per epoch (compilation
excluded), so the per-second curves include everything an optimiser does.
A finished run (`WORKDIR/TASK/VARIANT/seed_N.json`) is reused.

K-FAC is `kfac_jax.Optimizer` as in kfac-jax's README example: adaptive
learning rate, momentum and damping, ``initial_damping=1``, no weight decay;
the loss is registered with `kfac_jax.register_squared_error_loss` (weight
0.5: eq. 57), layers by kfac-jax's automatic graph matcher, whose tags are
printed and stored (the CIFAR net uses ``nn.Conv``, `MiniVGG(conv_impl=
'flax')`, the same function as the default unfolded-patch convolution, which
the matcher would not see as a convolution).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.classifier import experiment
from experiments.classifier import models
from experiments.classifier import tasks
from experiments.classifier import training
import rls
from rls import damped_second_moment
from rls import grafting
from scripts import compare_rls_second_moment as previous

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# RLS-D, one setting for both tasks (tuned on 1-2 epochs of MNIST and
# CIFAR-10 small, one seed; the benchmark page lists what was tried).
DAMPED = dict(decay=0.9, damping=1.0, gradient_scale=0.1, update_every=20)
# How the direction becomes a step (`damped_rls`).
DAMPED_OPTIONS = dict(mode="plain", momentum=0.0)
DAMPED_SAMPLES = 256

# RLS-DA: `rls.damped_rls_adam` at its defaults (one setting for both
# tasks); "Adam 2e-3" is Adam at RLS-DA's learning rate, for fairness.
ADAM_2E3 = "Adam 2e-3"
OPTAX_VARIANTS = tuple(previous.VARIANTS) + ("RLS-D", "RLS-DA", ADAM_2E3)
VARIANTS = OPTAX_VARIANTS + ("K-FAC",)
EPOCHS = {"mnist": 2, "cifar10": 3}


def slug(label: str) -> str:
  return previous.slug(label)


def task_config(task: str, label: str):
  """The run's config: `compare_rls_second_moment`'s for its variants, the
  Adam preset's (data, model, loss, batch) for RLS-D and K-FAC."""
  base = label if label in previous.VARIANTS else "Adam"
  config = previous.load(task, base, 1, None)
  if label == ADAM_2E3:
    config.learning_rate = 2e-3
  config.data_dir = os.path.join(
    os.environ.get("DATA_DIR", os.path.join(REPO, "..", "shared", "data")),
    task,
  )
  return config


def damped_rls(
  mode: str = "graft",
  learning_rate: float = 1e-3,
  momentum: float = 0.0,
  **overrides,
) -> optax.GradientTransformationExtraArgs:
  """RLS-D: clipping 5 (the paper's), then the damped second-moment RLS's
  direction ``P ∇``: at Adam's per-array step size (``mode='graft'``,
  `rls.grafting.graft`), or normalised by Adam (``'adam'``), descending at
  Adam's learning rate; or ``-η P ∇`` (``'plain'``)."""
  direction = damped_second_moment.scale_by_rls_damped_second_moment(
    **dict(DAMPED, **overrides)
  )
  if mode == "graft":
    inner = grafting.graft(optax.scale_by_adam(), direction)
  elif mode == "adam":
    inner = optax.chain(direction, optax.scale_by_adam())
  else:
    inner, learning_rate = direction, 1.0
  if momentum:
    inner = optax.chain(inner, optax.trace(momentum))
  return optax.chain(
    optax.clip_by_global_norm(5.0), inner, optax.scale(-learning_rate)
  )


def optimizer(label: str, config, damped_overrides: dict):
  """``(tx, needs layer inputs, input samples per layer)``."""
  if label == "RLS-D":
    options = dict(DAMPED_OPTIONS, **damped_overrides)
    return damped_rls(**options), True, DAMPED_SAMPLES
  if label == "RLS-DA":
    return rls.damped_rls_adam(**damped_overrides), True, DAMPED_SAMPLES
  return (
    training.make_optimizer(config),
    training.uses_layer_inputs(config),
    training.input_samples(config),
  )


def load_data(task_name: str, config):
  task = tasks.BY_NAME[task_name]
  arrays, preprocess = task.arrays(config, task.read(config))
  return task, arrays, preprocess


def init_params(task, config, model, seed: int):
  key = jax.random.PRNGKey(seed)
  params = model.init(key, tasks.example_input(task, config))["params"]
  if config.param_init == "pytorch":
    params = models.pytorch_default_init(params, key)
  return params


def epoch_order(seed: int, epoch: int, num_train: int, batch_size: int):
  """(batches, batch_size) indices of the epoch's shuffled full minibatches."""
  order = np.random.default_rng([seed, epoch]).permutation(num_train)
  batches = num_train // batch_size
  return order[: batches * batch_size].reshape(batches, batch_size)


def evaluate_fn(model, config, preprocess):
  return jax.jit(experiment.make_evaluate(model, "mse", 2000, preprocess))


def record(epoch, losses, seconds, params, evaluate, arrays) -> dict:
  train_loss, _ = evaluate(
    params, arrays["train_inputs"], arrays["train_labels"]
  )
  test_loss, test_accuracy = evaluate(
    params, arrays["test_inputs"], arrays["test_labels"]
  )
  losses = np.asarray(losses, np.float64)
  return {
    "epoch": epoch,
    "train_loss": float(losses.mean()),
    "train_eval_loss": float(train_loss),
    "test_loss": float(test_loss),
    "test_accuracy": float(test_accuracy),
    "seconds": seconds,
    "curve": [float(b.mean()) for b in np.array_split(losses, 10)],
  }


def prepare_optax(task_name, label, seed, damped_overrides=None):
  """``(run_epoch, params, opt_state, data, evaluate)`` of one seed:
  ``run_epoch(params, opt_state, order, train_x, train_y) -> (params,
  opt_state, losses)`` scans the minibatches of ``order``."""
  config = task_config(task_name, label)
  task, arrays, preprocess = load_data(task_name, config)
  model = task.make_model(config)
  tx, with_inputs, samples = optimizer(label, config, damped_overrides or {})
  step = training.make_train_step(model, tx, "mse", with_inputs, samples)
  params = init_params(task, config, model, seed)

  def run_epoch(params, opt_state, order, train_x, train_y):
    def body(carry, indices):
      params, opt_state = carry
      inputs = preprocess(train_x[indices])
      params, opt_state, loss = step(
        params, opt_state, inputs, train_y[indices]
      )
      return (params, opt_state), loss

    (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), order)
    return params, opt_state, losses

  data = (
    jnp.asarray(arrays["train_inputs"]),
    jnp.asarray(arrays["train_labels"]),
  )
  evaluate = evaluate_fn(model, config, preprocess)
  return run_epoch, params, tx.init(params), data, (evaluate, arrays, config)


def run_optax(task_name, label, seed, epochs, damped_overrides=None):
  """One seed of an optax optimiser; a list of per-epoch records."""
  run_epoch, params, opt_state, (train_x, train_y), extra = prepare_optax(
    task_name, label, seed, damped_overrides
  )
  evaluate, arrays, config = extra
  num_train = train_x.shape[0]
  order = epoch_order(seed, 1, num_train, config.batch_size)
  compiled = (
    jax.jit(run_epoch)
    .lower(params, opt_state, order, train_x, train_y)
    .compile()
  )
  records = []
  for epoch in range(1, epochs + 1):
    order = epoch_order(seed, epoch, num_train, config.batch_size)
    start = time.perf_counter()
    params, opt_state, losses = compiled(
      params, opt_state, order, train_x, train_y
    )
    losses = jax.block_until_ready(losses)
    seconds = time.perf_counter() - start
    records.append(record(epoch, losses, seconds, params, evaluate, arrays))
    print(f"  {label} seed {seed} epoch {epoch}: {records[-1]}", flush=True)
  return records, {}


def step_seconds(task_name, labels, steps=20, repeats=5) -> dict:
  """Seconds per training step of each optax optimiser: `steps` steps in
  one jitted scan, best of `repeats`, the optimisers interleaved so that
  the load of a shared machine hits them alike."""
  runs = {}
  for label in labels:
    run_epoch, params, opt_state, data, (_, _, config) = prepare_optax(
      task_name, label, 0
    )
    order = epoch_order(0, 1, data[0].shape[0], config.batch_size)[:steps]
    compiled = (
      jax.jit(run_epoch).lower(params, opt_state, order, *data).compile()
    )
    runs[label] = (compiled, (params, opt_state, order) + data)
  best = {label: float("inf") for label in labels}
  for _ in range(repeats):
    for label, (compiled, args) in runs.items():
      start = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      best[label] = min(best[label], (time.perf_counter() - start) / steps)
  return best


def kfac_optimizer(kfac_jax, loss_fn):
  """kfac-jax's README settings: adaptive learning rate, momentum and
  damping from ``initial_damping=1``, no weight decay."""
  return kfac_jax.Optimizer(
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


def run_kfac(task_name, seed, epochs):
  """One seed of kfac-jax's K-FAC; per-epoch records and the layer tags."""
  try:
    import kfac_jax  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise SystemExit(
      "K-FAC needs kfac-jax, which is not a dependency of this project: "
      "install it in an environment of its own (see this script's "
      "docstring) and run --variants K-FAC there."
    ) from None
  _patch_kfac_for_jax_0_10(kfac_jax)
  config = task_config(task_name, "K-FAC")
  task, arrays, preprocess = load_data(task_name, config)
  model = task.make_model(config)
  if task_name == "cifar10":
    model = model.clone(conv_impl="flax")  # Seen by kfac-jax as conv2d.
  loss = training.LOSSES["mse"]

  def loss_fn(params, batch):
    inputs, labels = batch
    outputs = model.apply({"params": params}, preprocess(inputs))
    targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
    kfac_jax.register_squared_error_loss(outputs, targets, weight=0.5)
    return loss(outputs, labels)

  kfac_opt = kfac_optimizer(kfac_jax, loss_fn)
  params = init_params(task, config, model, seed)
  num_train = len(arrays["train_labels"])
  rng = jax.random.PRNGKey(1000 + seed)

  def batch_at(indices):
    return (
      jnp.asarray(arrays["train_inputs"][indices]),
      jnp.asarray(arrays["train_labels"][indices]),
    )

  order = epoch_order(seed, 1, num_train, config.batch_size)
  rng, init_rng = jax.random.split(rng)
  state = kfac_opt.init(params, init_rng, batch_at(order[0]))
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
        batch=batch_at(indices),
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


def run(task_name, label, seed, epochs, workdir) -> dict:
  """Runs (or reads the finished) seed; its JSON dict."""
  path = os.path.join(workdir, task_name, slug(label), f"seed_{seed}.json")
  if os.path.exists(path):
    with open(path) as f:
      result = json.load(f)
    if len(result["records"]) >= epochs:
      return result
  print(f"== {task_name} {label} seed {seed}", flush=True)
  if label == "K-FAC":
    records, extra = run_kfac(task_name, seed, epochs)
  else:
    records, extra = run_optax(task_name, label, seed, epochs)
  result = dict(extra, label=label, task=task_name, seed=seed, records=records)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f)
  return result


def read_results(workdir, task_name, labels, seeds, epochs) -> dict:
  """label -> list over seeds of per-epoch records (finished runs only)."""
  found = {}
  for label in labels:
    runs = []
    for seed in range(seeds):
      path = os.path.join(workdir, task_name, slug(label), f"seed_{seed}.json")
      if os.path.exists(path):
        with open(path) as f:
          records = json.load(f)["records"]
        if len(records) >= epochs:
          runs.append(records[:epochs])
    if runs:
      found[label] = runs
  return found


def _stat(runs, key, epoch) -> np.ndarray:
  return np.asarray([r[epoch][key] for r in runs], np.float64)


def _mean_std(values: np.ndarray) -> str:
  return f"{values.mean():.4f} ± {values.std():.4f}"


def steps_per_epoch(task_name) -> int:
  config = task_config(task_name, "Adam")
  num_train = {"mnist": 60_000, "cifar10": config.train_limit}[task_name]
  return num_train // config.batch_size


def seconds_per_step(task_name, results, timing) -> dict:
  """label -> seconds per step: the interleaved timing for optax
  optimisers, the median measured epoch over steps for K-FAC."""
  seconds = dict(timing)
  for label, runs in results.items():
    if label not in seconds:
      epoch = np.median([[e["seconds"] for e in r] for r in runs])
      seconds[label] = float(epoch) / steps_per_epoch(task_name)
  return seconds


def table(task_name, results, seconds) -> list[str]:
  """Markdown: epoch-mean train loss per epoch, the end losses, accuracy,
  time per step and relative to Adam, measured seconds per epoch."""
  epochs = EPOCHS[task_name]
  title = previous.TASKS[task_name][2]
  header = (
    ["optimiser"]
    + [f"train loss ep {e + 1}" for e in range(epochs)]
    + [
      "end full-train loss",
      "test acc",
      "ms/step",
      "x Adam time",
      "s/epoch (run)",
    ]
  )
  lines = [f"## {title}", "", "| " + " | ".join(header) + " |"]
  lines.append("|" + "---|" * len(header))
  adam = seconds.get("Adam")
  for label, runs in results.items():
    row = [label]
    row += [_mean_std(_stat(runs, "train_loss", e)) for e in range(epochs)]
    row.append(_mean_std(_stat(runs, "train_eval_loss", epochs - 1)))
    row.append(_mean_std(_stat(runs, "test_accuracy", epochs - 1)))
    row.append(f"{1e3 * seconds[label]:.1f}")
    row.append(f"{seconds[label] / adam:.2f}" if adam else "")
    row.append(f"{np.median([[e['seconds'] for e in r] for r in runs]):.1f}")
    lines.append("| " + " | ".join(row) + " |")
  return lines + [""]


def plot(all_results, all_seconds, path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, axes = plt.subplots(
    len(all_results), 2, figsize=(11, 3.8 * len(all_results)), squeeze=False
  )
  for row, (task_name, results) in enumerate(all_results.items()):
    steps = steps_per_epoch(task_name)
    for label, runs in results.items():
      epochs = len(runs[0])
      losses = np.asarray([[e["train_loss"] for e in r] for r in runs])
      line = axes[row, 0].errorbar(
        np.arange(1, epochs + 1),
        losses.mean(0),
        yerr=losses.std(0),
        marker="o",
        capsize=3,
        label=label,
      )
      # Per second: each epoch's 10 block means (seed mean) at the end of
      # their block, at the optimiser's seconds per step.
      curve = np.asarray([sum((e["curve"] for e in r), []) for r in runs])
      block_ends = (np.arange(curve.shape[1]) + 1) * steps / 10
      axes[row, 1].plot(
        block_ends * all_seconds[task_name][label],
        curve.mean(0),
        color=line[0].get_color(),
        label=label,
      )
    axes[row, 0].set(
      xlabel="epoch",
      ylabel="train loss (epoch mean, eq. 57 MSE)",
      yscale="log",
      title=previous.TASKS[task_name][2],
    )
    axes[row, 1].set(
      xlabel="seconds (steps x s/step, one seed, 2 shared CPU cores)",
      ylabel="train loss (mean over a tenth of an epoch)",
      xscale="log",
      yscale="log",
    )
    axes[row, 0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def timing_for(workdir, task_name, labels) -> dict:
  """`step_seconds` of the optax labels, measured once and cached in
  WORKDIR/TASK/step_seconds.json."""
  path = os.path.join(workdir, task_name, "step_seconds.json")
  cached = {}
  if os.path.exists(path):
    with open(path) as f:
      cached = json.load(f)
  missing = [l for l in labels if l != "K-FAC" and l not in cached]
  if missing:
    print(f"== timing {task_name}: {missing}", flush=True)
    # A CIFAR step is ~100x an MNIST one: fewer steps keep this short.
    steps = 20 if task_name == "mnist" else 5
    cached.update(step_seconds(task_name, missing, steps=steps, repeats=3))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(cached, f)
  return {l: cached[l] for l in labels if l in cached}


def report(workdir, task_names, labels, seeds, table_path, figure_path):
  all_results, all_seconds, lines = {}, {}, []
  for task_name in task_names:
    results = read_results(workdir, task_name, labels, seeds, EPOCHS[task_name])
    if results:
      timing = timing_for(workdir, task_name, list(results))
      all_seconds[task_name] = seconds_per_step(task_name, results, timing)
      all_results[task_name] = results
      lines += table(task_name, results, all_seconds[task_name])
  for task_name in task_names:
    path = os.path.join(workdir, task_name, "k_fac", "seed_0.json")
    if os.path.exists(path):
      with open(path) as f:
        tags = json.load(f).get("kfac_blocks", [])
      lines += [f"kfac-jax curvature blocks, {task_name}:", ""]
      lines += [f"    {t}" for t in tags] + [""]
  with open(table_path, "w") as f:
    f.write("\n".join(lines))
  if all_results:
    plot(all_results, all_seconds, figure_path)
  print("\n".join(lines))


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
    "--workdir", default=os.path.join(REPO, "runs", "second_order")
  )
  parser.add_argument("--tasks", default="mnist,cifar10")
  parser.add_argument("--variants", default=",".join(VARIANTS))
  parser.add_argument("--num-seeds", type=int, default=3)
  parser.add_argument("--no-report", action="store_true")
  parser.add_argument("--report-only", action="store_true")
  parser.add_argument(
    "--table", default=os.path.join(REPO, "runs", "second_order_table.md")
  )
  parser.add_argument(
    "--figure",
    default=os.path.join(REPO, "docs", "figures", "second_order.png"),
  )
  args = parser.parse_args(argv)
  task_names = [t for t in args.tasks.split(",") if t]
  labels = [v for v in args.variants.split(",") if v]
  unknown = set(labels) - set(VARIANTS)
  if unknown:
    parser.error(
      f"unknown --variants {sorted(unknown)}; choose from {VARIANTS}"
    )
  if not args.report_only:
    for task_name in task_names:
      for label in labels:
        for seed in range(args.num_seeds):
          run(task_name, label, seed, EPOCHS[task_name], args.workdir)
  if not args.no_report:
    report(
      args.workdir,
      task_names,
      labels,
      args.num_seeds,
      args.table,
      args.figure,
    )


if __name__ == "__main__":
  main()
