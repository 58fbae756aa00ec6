"""Small fixed problems for the rtrl tests (float64 under the `x64` fixture):
parameters, time-major chunks, per-example inputs, and the relative error.

`tests/` is on `sys.path` (pyproject's pytest `pythonpath`): import this
module as `rtrl_problems`.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import online
from rtrl import readout


def rel_err(a, b) -> float:
  """`|a - b| / |b|` (Frobenius)."""
  a, b = np.asarray(a), np.asarray(b)
  return np.linalg.norm(a - b) / np.linalg.norm(b)


def with_random_bias(w: jax.Array, rng: np.random.Generator) -> jax.Array:
  """`W` `(P, K n)` with N(0, 0.25) added to its bias row (the last): a
  fresh cell's zero biases would hide bias bugs."""
  return w.at[-1].add(jnp.asarray(0.5 * rng.standard_normal(w.shape[1])))


def make_params(
  cell,
  key: jax.Array,
  input_size: int,
  num_outputs: int,
  rng: np.random.Generator | None = None,
) -> dict:
  """`{'cell', 'readout'}` params; with `rng`, random cell and readout
  biases (drawn from `rng` in that order)."""
  cell_key, readout_key = jax.random.split(key)
  w = cell.init(cell_key, input_size)["W"]
  r = readout.linear().init(readout_key, cell.hidden_size, num_outputs)
  if rng is not None:
    w = with_random_bias(w, rng)
    r["b"] = jnp.asarray(0.3 * rng.standard_normal(num_outputs))
  return {"cell": {"W": w}, "readout": r}


def make_chunk(
  rng: np.random.Generator,
  steps: int,
  batch: int,
  input_size: int,
  num_outputs: int,
  resets: Iterable[tuple[int, int | None]],
  keep_probability: float | None = None,
) -> online.StepBatch:
  """A time-major `StepBatch` (leaves `(steps, batch, ...)`): normal inputs,
  uniform targets, weights 1 or Bernoulli(`keep_probability`), and a reset
  at each `(t, b)` of `resets` (`b=None`: every example)."""
  reset_mask = np.zeros((steps, batch), bool)
  for t, b in resets:
    reset_mask[t, slice(None) if b is None else b] = True
  inputs = rng.standard_normal((steps, batch, input_size))
  targets = rng.integers(0, num_outputs, (steps, batch))
  if keep_probability is None:
    weights = np.ones((steps, batch))
  else:
    weights = (rng.random((steps, batch)) < keep_probability).astype(np.float64)
  return online.StepBatch(
    inputs=jnp.asarray(inputs),
    targets=jnp.asarray(targets),
    weights=jnp.asarray(weights),
    resets=jnp.asarray(reset_mask),
  )


def make_problem(
  cell,
  *,
  input_size: int,
  num_outputs: int,
  batch: int,
  steps: int,
  resets: Iterable[tuple[int, int | None]],
  seed: int = 0,
  keep_probability: float | None = None,
  random_biases: bool = False,
):
  """`(params, chunk)`: `make_params` and `make_chunk` from one seed."""
  rng = np.random.default_rng(seed)
  params = make_params(
    cell,
    jax.random.PRNGKey(seed),
    input_size,
    num_outputs,
    rng if random_biases else None,
  )
  chunk = make_chunk(
    rng, steps, batch, input_size, num_outputs, resets, keep_probability
  )
  return params, chunk


def pattern_problem(cell, seed: int = 0):
  """`make_problem` at the size of the SnAp-n / SnAp-1 / RFLO tests: 3
  inputs, 4 outputs, batch 2, 8 steps, example 1 reset at step 5, random
  biases."""
  return make_problem(
    cell,
    input_size=3,
    num_outputs=4,
    batch=2,
    steps=8,
    resets=[(0, None), (5, 1)],
    seed=seed,
    random_biases=True,
  )


def frozen_cell_gradients(cell, estimator, params, chunk) -> np.ndarray:
  """Per-step estimates of `dL_t/dW` `(T, B, ...)` with the parameters
  fixed (`online.frozen_gradients`, key 1)."""
  grads, _ = online.frozen_gradients(
    cell, estimator, params, chunk, jax.random.PRNGKey(1)
  )
  return np.asarray(grads["W"])


def make_example_problem(cell, input_size: int, steps: int, seed: int = 0):
  """One example's `(params, xs (T, I), gs (T, S, n))`: cell params with a
  random bias, inputs, and a `dL/dstate` covector at every step."""
  rng = np.random.default_rng(seed)
  w = with_random_bias(
    cell.init(jax.random.PRNGKey(seed), input_size)["W"], rng
  )
  xs = jnp.asarray(rng.standard_normal((steps, input_size)))
  gs = jnp.asarray(
    rng.standard_normal((steps, cell.num_state_rows, cell.hidden_size))
  )
  return {"W": w}, xs, gs


def cell_problem(
  cell,
  seed: int,
  steps: int,
  batch: int,
  input_size: int,
  num_outputs: int,
  resets,
) -> tuple[dict, online.StepBatch]:
  """`{'cell', 'readout'}` params (the cell's and the linear readout's own
  initialisation) and a chunk with resets and a 0.75-Bernoulli loss mask."""
  rng = np.random.default_rng(seed)
  kc, kr = jax.random.split(jax.random.PRNGKey(seed))
  params = {
    "cell": cell.init(kc, input_size),
    "readout": readout.linear().init(kr, cell.hidden_size, num_outputs),
  }
  chunk = make_chunk(
    rng, steps, batch, input_size, num_outputs, resets, keep_probability=0.75
  )
  return params, chunk


def summed_online_and_bptt(
  cell, estimator, params: dict, chunk: online.StepBatch
) -> tuple:
  """`(Σ_t of the estimator's per-step cell gradients, full BPTT's cell
  gradient)` over `chunk` from the initial state, parameters fixed (jitted):
  equal for an exact estimator."""
  import rtrl  # pylint: disable=g-import-not-at-top

  batch = chunk.targets.shape[1]
  state0 = online.broadcast_state(cell.initial_state(), batch)

  @jax.jit
  def compute(params, chunk):
    steps, _ = rtrl.frozen_gradients(
      cell, estimator, params, chunk, jax.random.PRNGKey(1)
    )
    total = jax.tree_util.tree_map(lambda a: a.sum(0), steps)
    return total, rtrl.bptt_gradient(cell, params, state0, chunk)["cell"]

  return compute(params, chunk)
