r"""Time per training step of RLS, the RLS+Adam hybrid and Adam on the MNIST FNN.

  python -m scripts.bench_rls            # batch 128, 7 repeats of 50 steps
  python -m scripts.bench_rls --batch_size=64 --steps=100 --repeats=11
  python -m scripts.bench_rls --forms_only --steps=20 --repeats=5  # short

Every optimiser trains the paper's FNN 784-512(ReLU)-10 on the same fixed
minibatch (synthetic pixels: the cost does not depend on the values) with
the `configs/mnist.py` presets (gradient clipping at 5.0). A timed call is
one jitted `lax.scan` of `--steps` training steps, compiled and run once
before timing; the reported time per step is the median over `--repeats`
calls. Next to the measured ratios to Adam it prints what the paper's Table I
predicts from FLOP counts, and where an RLS step's time goes. The timing
code: `experiments/classifier/timing.py`.

It also times each RLS form's bare preconditioner update (no model) on the
same layers' shapes in float32: the paper's update of ``P``
(`rls.scale_by_rls_conventional`), Potter's square-root form
(`rls.scale_by_rls_square_root`), the default `rls.scale_by_rls` (which
picks the square-root form for float32 ``P``) and the second-moment form
with ``--input_samples`` rows.
"""

from __future__ import annotations

import statistics
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

# pylint: disable=g-import-not-at-top
from experiments.classifier import tasks
from experiments.classifier import timing
from experiments.loop import config_files
import rls

_BATCH_SIZE = flags.DEFINE_integer("batch_size", 128, "Minibatch size M.")
_STEPS = flags.DEFINE_integer("steps", 50, "Training steps per timed call.")
_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls; the median counts.")
_HIDDEN = flags.DEFINE_integer("hidden_size", 512, "Hidden units.")
_FORMS_ONLY = flags.DEFINE_bool(
  "forms_only", False, "Time only the bare preconditioner of each RLS form."
)
_INPUT_SAMPLES = flags.DEFINE_integer(
  "input_samples", 128, "Sampled rows S per layer for the second-moment form."
)

# name -> (factory, whether it takes sampled rows); default hyper-parameters.
FORMS = {
  "paper: update of P (conventional)": (rls.scale_by_rls_conventional, False),
  "square root, P = S Sᵀ (Potter)": (rls.scale_by_rls_square_root, False),
  "default scale_by_rls (float32)": (rls.scale_by_rls, False),
  "second moment, S rows (square root)": (
    rls.scale_by_rls_second_moment,
    True,
  ),
}

# name -> (configs/mnist.py preset, overrides); each RLS variant is paired
# with Adam on its loss, the square-root form with the full form.
RUNS = {
  "adam (mse)": ("adam_mse", {}),
  "rls (mse)": ("rls", {}),
  "rls square-root P (mse)": ("rls", {"square_root": True}),
  "adam (cross-entropy)": ("adam_ce", {}),
  "rls_hybrid (cross-entropy)": ("rls_hybrid", {}),
}
PAIRS = {
  "rls (mse)": "adam (mse)",
  "rls square-root P (mse)": "rls (mse)",
  "rls_hybrid (cross-entropy)": "adam (cross-entropy)",
}


def print_step_times(seconds: dict[str, float]) -> None:
  print("\nTime per training step (clip 5.0 + optimiser, jitted):")
  for name, value in seconds.items():
    ratio = (
      f"{value / seconds[PAIRS[name]]:.2f}x {PAIRS[name]}"
      if name in PAIRS
      else "baseline"
    )
    print(f"  {name:28s} {value * 1e3:8.3f} ms   {ratio}")


def print_predictions(seconds: dict[str, float], config) -> None:
  print("\nPredicted RLS/Adam (paper Table I, FLOP counts) vs measured:")
  predictions = timing.table_one_ratios(tasks.MNIST, config)
  predictions["whole net, with Adam's ~10 flops per parameter"] = (
    timing.predicted_ratio(tasks.MNIST, config)["ratio"]
  )
  for name, ratio in predictions.items():
    print(f"  {name:50s} {ratio:6.2f}x")
  print(
    f"  {'paper, measured (PyTorch, 1080Ti GPU)':50s} "
    f"{timing.PAPER_RATIOS['mnist']:6.2f}x"
  )
  for rls_name, adam_name in PAIRS.items():
    label = f"here, measured {rls_name} / {adam_name}"
    print(f"  {label:50s} {seconds[rls_name] / seconds[adam_name]:6.2f}x")


def print_breakdown(breakdown: dict[str, float], rls_step: float) -> None:
  print("\nWhere the time of a full-RLS step goes (each part timed alone):")
  for name, seconds in breakdown.items():
    print(
      f"  {name:52s} {seconds * 1e3:8.3f} ms  "
      f"({100 * seconds / rls_step:5.1f}% of an rls step)"
    )


def time_forms(hidden_size: int, num_samples: int, steps: int, repeats: int):
  """Median seconds per update of each form's bare preconditioner on the FNN
  784-hidden-10 layers (float32; one jitted scan of `steps` updates)."""
  rng = np.random.default_rng(0)
  shapes = {"Dense_0": (784, hidden_size), "Dense_1": (hidden_size, 10)}
  params = {
    name: {"kernel": jnp.zeros(shape), "bias": jnp.zeros(shape[1])}
    for name, shape in shapes.items()
  }
  grads = jax.tree.map(
    lambda p: jnp.asarray(rng.normal(size=(steps,) + p.shape), jnp.float32),
    params,
  )
  rows = {
    name: jnp.asarray(
      rng.uniform(size=(steps, num_samples, shape[0])), jnp.float32
    )
    for name, shape in shapes.items()
  }
  seconds = {}
  for name, (factory, sampled) in FORMS.items():
    tx = factory()

    def run(state, grads, rows, tx=tx, sampled=sampled):
      def step(state, xs):
        grad, row = xs
        inputs = row if sampled else jax.tree.map(lambda r: r.mean(0), row)
        direction, state = tx.update(grad, state, layer_inputs=inputs)
        return state, jax.tree.map(jnp.sum, direction)

      return jax.lax.scan(step, state, (grads, rows))

    compiled = jax.jit(run).lower(tx.init(params), grads, rows).compile()
    jax.block_until_ready(compiled(tx.init(params), grads, rows))
    times = []
    for _ in range(repeats):
      state = tx.init(params)
      start = time.perf_counter()
      jax.block_until_ready(compiled(state, grads, rows))
      times.append((time.perf_counter() - start) / steps)
    seconds[name] = statistics.median(times)
  return seconds


def print_forms(seconds: dict[str, float], num_samples: int) -> None:
  print(
    "\nBare preconditioner update per step, float32, second moment with "
    f"S = {num_samples}:"
  )
  paper = seconds["paper: update of P (conventional)"]
  for name, value in seconds.items():
    print(f"  {name:38s} {value * 1e3:8.3f} ms   {value / paper:5.2f}x paper")


def main(argv):
  del argv
  print(
    f"FNN 784-{_HIDDEN.value}-10 layers, {jax.devices()[0].platform}, "
    f"median of {_REPEATS.value} x {_STEPS.value} scanned updates"
  )
  print_forms(
    time_forms(
      _HIDDEN.value, _INPUT_SAMPLES.value, _STEPS.value, _REPEATS.value
    ),
    _INPUT_SAMPLES.value,
  )
  if _FORMS_ONLY.value:
    return
  configs = {
    name: config_files.load_config(
      "mnist",
      preset,
      hidden_size=_HIDDEN.value,
      batch_size=_BATCH_SIZE.value,
      **overrides,
    )
    for name, (preset, overrides) in RUNS.items()
  }
  print(
    f"MNIST FNN 784-{_HIDDEN.value}-10, batch {_BATCH_SIZE.value}, "
    f"{jax.devices()[0].platform} ({jax.device_count()} device), "
    f"median of {_REPEATS.value} x {_STEPS.value} scanned steps"
  )
  timed = dict(
    steps=_STEPS.value, repeats=_REPEATS.value, statistic=statistics.median
  )
  seconds = timing.time_steps(tasks.MNIST, configs, **timed)
  print_step_times(seconds)
  print_predictions(seconds, configs["rls (mse)"])
  print_breakdown(
    timing.time_breakdown(tasks.MNIST, configs["rls (mse)"], **timed),
    seconds["rls (mse)"],
  )


if __name__ == "__main__":
  app.run(main)
