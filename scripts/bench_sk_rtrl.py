"""SK-RTRL's pre-projection: subspace iteration against the paper's SVD.

For each cell and rank, the per-step cell gradient of SK-RTRL with
`preprojection='subspace_iteration'` at several `subspace_iterations`,
against the same rank with `preprojection='svd'` (the paper's exact step)
and against exact RTRL, on one chunk with the weights frozen
(`rtrl.frozen_gradients`: an untrained cell, one-hot inputs, float32);
printed as the mean cosine over steps 2..T and the smallest over steps.
Then the step time of each (jitted tangent step, `vmap` over the batch,
`lax.scan` over steps; best of `--repeats`, interleaved over the rows) and
its ratio to exact RTRL's in the same run. docs/benchmarks/sk_rtrl.md
quotes

    python -m scripts.bench_sk_rtrl --cells rnn-32,rhn-32,rhn-64 \\
        --ranks 4,16 --iterations 0,1,2,4,8,32,128 \\
        --timing-iterations 0,2,8,32
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import rtrl


def chunk_and_params(cell, steps: int, batch: int, vocab: int = 8):
  """An untrained cell's params and a one-hot chunk (next-symbol targets,
  one reset at step 0)."""
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  params = {
    "cell": cell.init(keys[0], vocab),
    "readout": rtrl.readout.linear().init(keys[1], cell.hidden_size, vocab),
  }
  symbols = jax.random.randint(keys[2], (steps + 1, batch), 0, vocab)
  chunk = rtrl.StepBatch(
    inputs=jax.nn.one_hot(symbols[:-1], vocab),
    targets=symbols[1:],
    weights=jnp.ones((steps, batch)),
    resets=jnp.zeros((steps, batch), bool).at[0].set(True),
  )
  return params, chunk


def per_step_gradients(cell, estimator, params, chunk) -> np.ndarray:
  """`(steps, |W|)`, the batch-mean cell gradient at each step."""
  grads, _ = jax.jit(
    lambda p, c: rtrl.frozen_gradients(
      cell, estimator, p, c, jax.random.PRNGKey(1)
    )
  )(params, chunk)
  return np.asarray(grads["W"]).reshape(chunk.inputs.shape[0], -1)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Per-step cosine of two `(steps, d)` gradients, steps 2..T."""
  a, b = a[1:], b[1:]
  return np.sum(a * b, 1) / (
    np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
  )


def step_timer(cell, estimator, batch=8, steps=10, inputs=16):
  """`() -> ms per step` of the jitted, compiled tangent step."""
  key = jax.random.PRNGKey(0)
  params = cell.init(key, inputs)
  state0 = cell.initial_state()
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    params, state0, jax.random.split(key, batch)
  )
  states = jax.tree_util.tree_map(
    lambda a: jnp.broadcast_to(a, (batch,) + a.shape), state0
  )
  xs = jax.random.normal(key, (steps, batch, inputs))
  step = jax.vmap(estimator.step(params))

  @jax.jit
  def run(tstate, states, xs):
    body = lambda carry, x: (step(*carry, x), None)
    return jax.lax.scan(body, (tstate, states), xs)[0]

  jax.block_until_ready(run(tstate, states, xs))

  def timed() -> float:
    start = time.perf_counter()
    jax.block_until_ready(run(tstate, states, xs))
    return 1e3 * (time.perf_counter() - start) / steps

  return timed


def variants(rank: int, iterations: list[int]) -> dict[str, dict]:
  """Row label -> `sk_rtrl` hyper-parameters (the default `c`)."""
  rows = {f"k={k}": dict(rank=rank, subspace_iterations=k) for k in iterations}
  rows["svd"] = dict(rank=rank, preprojection="svd")
  return rows


def alignment(cell_name: str, ranks, iterations, steps: int, batch: int):
  """Prints the cosine table of one cell."""
  name, size = cell_name.split("-")
  cell = rtrl.cells.make(name, int(size))
  params, chunk = chunk_and_params(cell, steps, batch)
  exact = per_step_gradients(
    cell, rtrl.estimators.exact_rtrl(cell), params, chunk
  )
  for rank in ranks:
    rows = variants(rank, iterations)
    grads = {
      label: per_step_gradients(
        cell, rtrl.estimators.sk_rtrl(cell, **hparams), params, chunk
      )
      for label, hparams in rows.items()
    }
    for label, g in grads.items():
      to_svd, to_exact = cosines(g, grads["svd"]), cosines(g, exact)
      print(
        f"| {cell_name} | {rank} | {label} | {to_svd.mean():.4f} | "
        f"{to_svd.min():.4f} | {to_exact.mean():.4f} |",
        flush=True,
      )


def timing(cell_name: str, ranks, iterations, repeats: int):
  """Prints the step-time table of one cell (ratios to exact RTRL)."""
  name, size = cell_name.split("-")
  cell = rtrl.cells.make(name, int(size))
  rows = {"exact RTRL": rtrl.estimators.exact_rtrl(cell)}
  for rank in ranks:
    for label, hparams in variants(rank, iterations).items():
      rows[f"r={rank} {label}"] = rtrl.estimators.sk_rtrl(cell, **hparams)
  timers = {label: step_timer(cell, e) for label, e in rows.items()}
  best = {label: float("inf") for label in rows}
  for _ in range(repeats):
    for label, timed in timers.items():
      best[label] = min(best[label], timed())
  for label, ms in best.items():
    ratio = ms / best["exact RTRL"]
    print(f"| {cell_name} | {label} | {ms:.2f} | {ratio:.2f} |", flush=True)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--cells", default="rnn-32,rhn-32")
  parser.add_argument("--ranks", default="4,16")
  parser.add_argument("--iterations", default="0,1,2,4,8,32,128")
  parser.add_argument(
    "--timing-iterations", default="", help="(default: --iterations)"
  )
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--batch", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--no-timing", action="store_true")
  args = parser.parse_args(argv)
  cells = args.cells.split(",")
  ranks = [int(r) for r in args.ranks.split(",")]
  iterations = [int(k) for k in args.iterations.split(",")]
  print(
    "| cell | rank | pre-projection | cos to svd (mean) | (min) | cos to RTRL |"
  )
  print("|---|---|---|---|---|---|")
  for cell_name in cells:
    alignment(cell_name, ranks, iterations, args.steps, args.batch)
  if args.no_timing:
    return
  print("\n| cell | estimator | ms / step | / exact RTRL |")
  print("|---|---|---|---|")
  timed = args.timing_iterations or args.iterations
  for cell_name in cells:
    timing(cell_name, ranks, [int(k) for k in timed.split(",")], args.repeats)


if __name__ == "__main__":
  main()
