"""Does `rls.rls()` with its defaults train ordinary small networks?

A handful of standard small problems (MLPs with tanh and ReLU in Linen and
NNX, a deeper MLP, unnormalised inputs, a classifier with MSE and with
cross-entropy, linear regression, a small CNN, an LSTM), each trained with
minibatches of 32 by several RLS settings and, for scale, Adam(1e-3). For
each problem and setting it prints how many seeds reached a non-finite loss
(and the first such step) and the median over seeds of the last tenth of the
losses over the first minibatch's loss. The numbers of
docs/concepts/rls_as_optax.md ("Safe defaults") come from

    python -m experiments.studies.rls_default_stability --steps 1000 --seeds 5

and `tests/rls/test_rls_defaults.py` trains `rls.rls()` on the same
problems (fewer steps). Every run is one `lax.scan` over steps, vmapped over
seeds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple

from flax import nnx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import rls

NUM_EXAMPLES = 2048


class Problem(NamedTuple):
  """`data(key) -> (inputs (N, ...), targets (N, ...))`; `init(key, x) ->
  params`; `apply(params, x) -> (outputs, layer inputs)`; `loss(outputs,
  targets) -> scalar` (a batch mean)."""

  data: Callable[[jax.Array], tuple[jax.Array, jax.Array]]
  init: Callable[[jax.Array, jax.Array], Any]
  apply: Callable[[Any, jax.Array], tuple[jax.Array, Any]]
  loss: Callable[[jax.Array, jax.Array], jax.Array]


def mse(outputs, targets):
  """The paper's eq. (57): half the squared error, summed over outputs,
  averaged over the batch."""
  return 0.5 * jnp.mean(jnp.sum((outputs - targets) ** 2, axis=-1))


def cross_entropy(logits, targets):
  return optax.softmax_cross_entropy(logits, targets).mean()


def regression_data(input_size=6, outputs=2, scale=1.0, offset=0.0):
  """`y = sin(x W) + noise` for standard normal `x`, then `x * scale +
  offset` (an unnormalised feature's common offset)."""

  def data(key):
    k_x, k_w, k_noise = jax.random.split(key, 3)
    x = jax.random.normal(k_x, (NUM_EXAMPLES, input_size))
    w = jax.random.normal(k_w, (input_size, outputs))
    noise = 0.1 * jax.random.normal(k_noise, (NUM_EXAMPLES, outputs))
    return x * scale + offset, jnp.sin(x @ w) + noise

  return data


def linear_data(key):
  """`y = x W + b + noise`: what a single RLS layer solves."""
  k_x, k_w, k_noise = jax.random.split(key, 3)
  x = jax.random.normal(k_x, (NUM_EXAMPLES, 6))
  w = jax.random.normal(k_w, (7, 2))
  noise = 0.1 * jax.random.normal(k_noise, (NUM_EXAMPLES, 2))
  return x, x @ w[:6] + w[6] + noise


def classes_data(key):
  """The how-to's task: 10 features, 3 classes by a random linear map,
  one-hot targets."""
  k_x, k_w = jax.random.split(key)
  x = jax.random.normal(k_x, (NUM_EXAMPLES, 10))
  labels = jnp.argmax(x @ jax.random.normal(k_w, (10, 3)), axis=-1)
  return x, jax.nn.one_hot(labels, 3)


def image_data(key):
  """8x8 one-channel images: a bright 3x3 patch in one of four quadrants
  (the class), on noise."""
  k_class, k_noise, k_pos = jax.random.split(key, 3)
  labels = jax.random.randint(k_class, (NUM_EXAMPLES,), 0, 4)
  pos = jax.random.randint(k_pos, (NUM_EXAMPLES, 2), 0, 2)
  rows = (labels // 2) * 4 + pos[:, 0]
  cols = (labels % 2) * 4 + pos[:, 1]
  grid = jnp.arange(8)
  in_rows = (grid[None, :] >= rows[:, None]) & (
    grid[None, :] < rows[:, None] + 3
  )
  in_cols = (grid[None, :] >= cols[:, None]) & (
    grid[None, :] < cols[:, None] + 3
  )
  patch = in_rows[:, :, None] & in_cols[:, None, :]
  noise = 0.5 * jax.random.normal(k_noise, (NUM_EXAMPLES, 8, 8))
  return (patch + noise)[..., None], jax.nn.one_hot(labels, 4)


def sequence_data(key):
  """Sequences of 10 steps of 2 features; the target is the running mean
  of the first feature minus the second (a memory of the whole sequence)."""
  x = jax.random.normal(key, (NUM_EXAMPLES, 10, 2))
  target = jnp.cumsum(x[..., 0] - x[..., 1], axis=1) / jnp.arange(1, 11)
  return x, target[..., None]


class Linen(nn.Module):
  """`hidden` sizes with `activation`, then a dense output (or, with
  `conv`, two 3x3 convolutions of 8 channels first; with `lstm`, an
  `rls.LSTM(16)` and a dense output at every step)."""

  hidden: tuple[int, ...] = (64,)
  outputs: int = 2
  activation: str = "tanh"
  kind: str = "mlp"

  @nn.compact
  def __call__(self, x):
    act = {"tanh": jnp.tanh, "relu": nn.relu}[self.activation]
    if self.kind == "lstm":
      return nn.Dense(self.outputs)(rls.LSTM(16)(x))
    if self.kind == "conv":
      x = act(nn.Conv(8, (3, 3))(x))
      x = act(nn.Conv(8, (3, 3), strides=(2, 2))(x))
      x = x.reshape(x.shape[0], -1)
    for width in self.hidden:
      x = act(nn.Dense(width)(x))
    return nn.Dense(self.outputs)(x)


def linen_problem(data, model: nn.Module, loss=mse) -> Problem:
  def init(key, x):
    return model.init(key, x[:1])["params"]

  def apply(params, x):
    return rls.layer_inputs(model.apply, {"params": params}, x)

  return Problem(data, init, apply, loss)


class NnxMLP(nnx.Module):
  """6-64-2 with `activation`, in NNX."""

  def __init__(self, activation: str, *, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(6, 64, rngs=rngs)
    self.output = nnx.Linear(64, 2, rngs=rngs)
    self.activation = {"tanh": jnp.tanh, "relu": nnx.relu}[activation]

  def __call__(self, x):
    return self.output(self.activation(self.hidden(x)))


def nnx_problem(activation: str) -> Problem:
  """The 6-64-2 MLP as an NNX module, captured by `rls.layer_inputs(model,
  x)`; its params a pure dict (`nnx.to_pure_dict`)."""

  def make(rngs):
    return NnxMLP(activation, rngs=rngs)

  def init(key, x):
    del x
    return nnx.to_pure_dict(nnx.state(make(nnx.Rngs(key)), nnx.Param))

  def apply(params, x):
    graphdef, state = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))))
    nnx.replace_by_pure_dict(state, params)
    return rls.layer_inputs(nnx.merge(graphdef, state), x)

  return Problem(regression_data(), init, apply, mse)


PROBLEMS: dict[str, Problem] = {
  "mlp_tanh": linen_problem(regression_data(), Linen(activation="tanh")),
  "mlp_relu": linen_problem(regression_data(), Linen(activation="relu")),
  "nnx_mlp_tanh": nnx_problem("tanh"),
  "nnx_mlp_relu": nnx_problem("relu"),
  "deep_mlp_relu": linen_problem(
    regression_data(), Linen(hidden=(64, 64, 64), activation="relu")
  ),
  "unnormalised_tanh": linen_problem(
    regression_data(scale=10.0, offset=5.0), Linen(activation="tanh")
  ),
  "classifier_mse": linen_problem(
    classes_data, Linen(hidden=(32,), outputs=3, activation="relu")
  ),
  "classifier_ce": linen_problem(
    classes_data,
    Linen(hidden=(32,), outputs=3, activation="relu"),
    cross_entropy,
  ),
  "linear": linen_problem(linear_data, Linen(hidden=())),
  "cnn": linen_problem(
    image_data, Linen(hidden=(), outputs=4, activation="relu", kind="conv")
  ),
  "lstm": linen_problem(sequence_data, Linen(outputs=1, kind="lstm")),
}


def train(
  problem: Problem, tx, seeds: int, steps: int, batch: int = 32
) -> np.ndarray:
  """`(seeds, steps)` minibatch losses; seed `s` draws the data and the
  initial weights from `PRNGKey(s)`; minibatches cycle through the data."""

  def loss_fn(params, x, y):
    outputs, xbar = problem.apply(params, x)
    return problem.loss(outputs, y), xbar

  def one_seed(key):
    data_key, init_key = jax.random.split(key)
    x, y = problem.data(data_key)
    params = problem.init(init_key, x)

    def step(carry, i):
      params, state = carry
      start = (i * batch) % NUM_EXAMPLES
      xb = jax.lax.dynamic_slice_in_dim(x, start, batch)
      yb = jax.lax.dynamic_slice_in_dim(y, start, batch)
      (loss, xbar), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, xb, yb
      )
      updates, state = tx.update(grads, state, params, layer_inputs=xbar)
      return (optax.apply_updates(params, updates), state), loss

    _, losses = jax.lax.scan(step, (params, tx.init(params)), jnp.arange(steps))
    return losses

  keys = jax.vmap(jax.random.PRNGKey)(jnp.arange(seeds))
  return np.asarray(jax.jit(jax.vmap(one_seed))(keys))


class Outcome(NamedTuple):
  """`diverged` seeds out of `seeds`, the earliest non-finite step (None if
  none), and the median over the finite seeds of mean(last tenth) / first
  loss (None if every seed diverged)."""

  diverged: int
  seeds: int
  first_nonfinite: int | None
  final_over_initial: float | None


def summarise(losses: np.ndarray) -> Outcome:
  finite = np.isfinite(losses)
  bad = ~finite.all(axis=1)
  steps = [int(np.argmin(row)) for row in finite[bad]]
  tail = max(1, losses.shape[1] // 10)
  ratios = [float(row[-tail:].mean() / row[0]) for row in losses[~bad]]
  return Outcome(
    int(bad.sum()),
    losses.shape[0],
    min(steps) if steps else None,
    float(np.median(ratios)) if ratios else None,
  )


SETTINGS: dict[str, Callable[[], Any]] = {
  "rls()": lambda: rls.rls(),
  "rls(clip_norm=None)": lambda: rls.rls(clip_norm=None),
  "rls(clip_norm=None, square_root=True)": lambda: rls.rls(
    clip_norm=None, square_root=True
  ),
  "rls(clip_norm=None, ratio=0.01)": lambda: rls.rls(
    clip_norm=None, ratio=0.01
  ),
  "rls(clip_norm=1.0)": lambda: rls.rls(clip_norm=1.0),
  "rls(clip_norm=10.0)": lambda: rls.rls(clip_norm=10.0),
  "rls(square_root=True)": lambda: rls.rls(square_root=True),
  "rls(ratio=0.01)": lambda: rls.rls(ratio=0.01),
  "rls(momentum=0.5)": lambda: rls.rls(momentum=0.5),
  "rls(momentum=0.5, l1=1e-5)": lambda: rls.rls(momentum=0.5, l1=1e-5),
  "rls(forgetting_factor=0.99)": lambda: rls.rls(forgetting_factor=0.99),
  "adam(1e-3)": lambda: optax.adam(1e-3),
}


def cell(outcome: Outcome) -> str:
  text = (
    "-"
    if outcome.final_over_initial is None
    else f"{outcome.final_over_initial:.3f}"
  )
  if outcome.diverged:
    text += f" ({outcome.diverged}/{outcome.seeds} NaN, step {outcome.first_nonfinite})"
  return text


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--steps", type=int, default=1000)
  parser.add_argument("--seeds", type=int, default=5)
  parser.add_argument(
    "--settings", default="", help="comma-separated SETTINGS keys (all)"
  )
  parser.add_argument(
    "--problems", default="", help="comma-separated PROBLEMS keys (all)"
  )
  args = parser.parse_args(argv)
  settings = args.settings.split(";") if args.settings else list(SETTINGS)
  problems = args.problems.split(",") if args.problems else list(PROBLEMS)
  print(
    f"final/initial loss (median over {args.seeds} seeds, last tenth of "
    f"{args.steps} steps, batch 32); NaN: seeds with a non-finite loss"
  )
  print("| setting | " + " | ".join(problems) + " |")
  print("|---" * (len(problems) + 1) + "|")
  for name in settings:
    row = []
    for problem in problems:
      losses = train(
        PROBLEMS[problem], SETTINGS[name](), args.seeds, args.steps
      )
      row.append(cell(summarise(losses)))
    print(f"| `{name}` | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
  main()
