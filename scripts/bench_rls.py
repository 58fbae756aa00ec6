r"""Time per training step of RLS, the RLS+Adam hybrid and Adam on the MNIST FNN.

  python scripts/bench_rls.py            # batch 128, 7 repeats of 50 steps
  python scripts/bench_rls.py --batch_size=64 --steps=100 --repeats=11

Every optimiser trains the paper's FNN 784-512(ReLU)-10 on the same fixed
minibatch (synthetic pixels: the cost does not depend on the values) with
gradient clipping at 5.0, as in `experiments/mnist.py`. A timed call is one
jitted `lax.scan` of `--steps` training steps, compiled and run once before
timing; the reported time per step is the median over `--repeats` calls.

Next to the measured ratios to Adam it prints what the paper's Table I
predicts from FLOP counts, and a breakdown of where an RLS step's time goes.
"""

from __future__ import annotations

import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
import optax

import rls
from experiments.classifier import mnist_task as mnist_experiment

_BATCH_SIZE = flags.DEFINE_integer("batch_size", 128, "Minibatch size M.")
_STEPS = flags.DEFINE_integer("steps", 50, "Training steps per timed call.")
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls; the median counts.")
_HIDDEN = flags.DEFINE_integer("hidden_size", 512, "Hidden units.")

INPUT_SIZE = 784
PAPER_MEASURED_RATIO = 1.1  # Section VI-B: RLS time / Adam time for the FNN.
# name -> (optimizer, loss); each RLS variant is paired with Adam on its loss.
RUNS = {
    "adam (mse)": ("adam", "mse"),
    "rls (mse)": ("rls", "mse"),
    "adam (cross-entropy)": ("adam", "cross_entropy"),
    "rls_hybrid (cross-entropy)": ("rls_hybrid", "cross_entropy"),
}
PAIRS = {"rls (mse)": "adam (mse)",
         "rls_hybrid (cross-entropy)": "adam (cross-entropy)"}


def median_seconds_per_step(runs: dict) -> dict[str, float]:
  """Median time per step of each `name: (fn, arg)`, timing `fn(arg)`.

  Each `fn` runs `--steps` steps. The repeats go round-robin over the runs,
  so a slow spell of a shared machine hits every run alike.
  """
  for fn, arg in runs.values():
    jax.block_until_ready(fn(arg))  # Compile and warm up.
  times = {name: [] for name in runs}
  for _ in range(_REPEATS.value):
    for name, (fn, arg) in runs.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(arg))
      times[name].append((time.perf_counter() - start) / _STEPS.value)
  return {name: statistics.median(t) for name, t in times.items()}


def repeat_steps(step):
  """`step(carry) -> carry`, run `--steps` times in one jitted scan."""
  def run(carry):
    return jax.lax.scan(lambda c, _: (step(c), None), carry, None,
                        length=_STEPS.value)[0]
  return jax.jit(run)


def make_config(optimizer: str, loss: str) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      optimizer=optimizer, loss=loss, hidden_size=_HIDDEN.value,
      learning_rate=1e-3, forgetting_factor=1.0, ratio=0.1,
      gradient_scale=1.0, init_scale=1.0, momentum=None, l1=None,
      clip_norm=5.0))


def time_training_steps(images, labels) -> dict[str, float]:
  """Seconds per full training step (forward, backward, optimiser)."""
  runs = {}
  for name, (optimizer, loss) in RUNS.items():
    config = make_config(optimizer, loss)
    model, state, tx = mnist_experiment.create_train_state(
        config, jax.random.key(0))
    train_step = mnist_experiment.make_train_step(
        model, tx, loss, uses_layer_inputs=optimizer != "adam")
    runs[name] = (repeat_steps(
        lambda s, step=train_step: step(s, images, labels)[0]), state)
  return median_seconds_per_step(runs)


def _feed_back(carry, result):
  """`carry + 0 * result` leaf by leaf: keeps `result` from being pruned."""
  return jax.tree.map(lambda c, r: c + 0 * r, carry, result)


def time_breakdown(images, labels) -> dict[str, float]:
  """Seconds per step of the parts of a full-RLS step, each timed alone."""
  config = make_config("rls", "mse")
  model, state, tx = mnist_experiment.create_train_state(
      config, jax.random.key(0))
  loss_fn = mnist_experiment.LOSSES["mse"]
  params = state.params

  def with_capture(p):
    outputs, inputs = rls.layer_inputs(model.apply, {"params": p}, images)
    return loss_fn(outputs, labels), inputs

  def plain(p):
    return loss_fn(model.apply({"params": p}, images), labels)

  grad_with_capture = jax.grad(with_capture, has_aux=True)
  grads, layer_inputs = grad_with_capture(params)

  def optimizer_only(optimizer, extra):
    # Carry (opt_state, params); the updates feed back so none is pruned.
    def step(carry):
      opt_state, p = carry
      updates, opt_state = optimizer.update(grads, opt_state, p, **extra)
      return opt_state, _feed_back(p, updates)
    return step, (optimizer.init(params), params)

  adam = optax.chain(optax.clip_by_global_norm(5.0), optax.adam(1e-3))
  parts = {
      "forward+backward (plain)": (
          lambda p: _feed_back(p, jax.grad(plain)(p)), params),
      "forward+backward + x̄ capture": (
          lambda p: _feed_back(p, grad_with_capture(p)[0]), params),
      "clip + RLS update (u, h, P∇, P update)": optimizer_only(
          tx, {"layer_inputs": layer_inputs}),
      "clip + Adam update": optimizer_only(adam, {}),
  }
  # The two kinds of work inside the RLS update, per layer shape.
  for name, layer in params.items():
    size = layer["kernel"].shape[0] + 1  # Augmented with the bias.
    grad = jnp.ones((size, layer["kernel"].shape[1]))
    x = jnp.full((size,), 0.1)
    parts[f"  P∇ matmul, {name} ({size}x{size} @ {size}x{grad.shape[1]})"] = (
        lambda q, g=grad: q + 0 * (q @ g)[:, :1], jnp.eye(size))
    parts[f"  u = Px and rank-one P update, {name}"] = (
        lambda q, x=x: q - 1e-6 * jnp.outer(q @ x, q @ x), jnp.eye(size))
  return median_seconds_per_step(
      {name: (repeat_steps(step), carry)
       for name, (step, carry) in parts.items()})


def table_one_ratios(batch_size: int, layer_sizes) -> dict[str, float]:
  """RLS/SGD time from Table I's FLOP counts for FC layers (FNN column).

  Table I: SGD `N_{l-1} M N_l`, RLS `N_{l-1} (M + N_{l-1}) N_l`, so a layer's
  ratio is `1 + N_{l-1}/M`; summed over layers for the whole net. Table I
  counts one `M`-row matmul per layer for SGD; a real step does three
  (forward, and two in the backward pass), so the same extra FLOPs over a
  whole step give `1 + N_{l-1}/(3M)`.
  """
  pairs = list(zip(layer_sizes[:-1], layer_sizes[1:]))
  sgd = sum(n_in * batch_size * n_out for n_in, n_out in pairs)
  extra = sum(n_in * n_in * n_out for n_in, n_out in pairs)
  ratios = {f"FC {n_in}->{n_out}: 1 + N_(l-1)/M": 1 + n_in / batch_size
            for n_in, n_out in pairs}
  ratios["whole FNN, Table I FLOPs"] = 1 + extra / sgd
  ratios["whole FNN, extra FLOPs over fwd+bwd (3 matmuls)"] = (
      1 + extra / (3 * sgd))
  hidden_in, hidden_out = pairs[0]
  ratios["hybrid (RLS on hidden only), over fwd+bwd"] = (
      1 + hidden_in * hidden_in * hidden_out / (3 * sgd))
  return ratios


def main(argv):
  del argv
  batch_size = _BATCH_SIZE.value
  keys = jax.random.split(jax.random.key(0))
  images = jax.random.uniform(keys[0], (batch_size, INPUT_SIZE))
  labels = jax.random.randint(keys[1], (batch_size,), 0, 10)
  print(f"MNIST FNN {INPUT_SIZE}-{_HIDDEN.value}-10, batch {batch_size}, "
        f"{jax.devices()[0].platform} ({jax.device_count()} device), "
        f"median of {_REPEATS.value} x {_STEPS.value} scanned steps")

  steps = time_training_steps(images, labels)
  print("\nTime per training step (clip 5.0 + optimiser, jitted):")
  for name, seconds in steps.items():
    ratio = (f"{seconds / steps[PAIRS[name]]:.2f}x {PAIRS[name]}"
             if name in PAIRS else "baseline")
    print(f"  {name:28s} {seconds * 1e3:8.3f} ms   {ratio}")

  print("\nPredicted RLS/Adam (paper Table I, FLOP counts) vs measured:")
  for name, ratio in table_one_ratios(
      batch_size, (INPUT_SIZE, _HIDDEN.value, 10)).items():
    print(f"  {name:50s} {ratio:6.2f}x")
  print(f"  {'paper, measured (PyTorch, 1080Ti GPU)':50s} "
        f"{PAPER_MEASURED_RATIO:6.2f}x")
  print(f"  {'here, measured rls / adam (mse)':50s} "
        f"{steps['rls (mse)'] / steps['adam (mse)']:6.2f}x")
  print(f"  {'here, measured rls_hybrid / adam (cross-entropy)':50s} "
        f"{steps['rls_hybrid (cross-entropy)'] / steps['adam (cross-entropy)']:6.2f}x")

  print("\nWhere the time of a full-RLS step goes (each part timed alone):")
  total = steps["rls (mse)"]
  for name, seconds in time_breakdown(images, labels).items():
    print(f"  {name:52s} {seconds * 1e3:8.3f} ms  "
          f"({100 * seconds / total:5.1f}% of an rls step)")


if __name__ == "__main__":
  app.run(main)
