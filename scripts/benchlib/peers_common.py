"""What every peer of `scripts/bench_peers.py` shares: the data, our side
of a pair (the public trainer), the float64 gradient comparison, and the
interleaved timing of ours against theirs.

A peer module (`scripts/benchlib/peers_<name>.py`, imported only under the
peer's own venv) gives `versions() -> dict` and `pairs(args) -> [Pair]`.
A `Pair` names our estimator (`rtrl.estimators.make(name, cell,
**hparams)`) and cell (`rtrl.cells.make`), and brings two functions of
theirs: `check(args) -> dict` (float64, before any timing; `ok` decides)
and `build(params, inputs, targets, optimizer) -> Side` (their full online
step on our weights and data, one jitted or eager chunk per call).
"""

from __future__ import annotations

from collections.abc import Callable
import statistics
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import estimators
from rtrl import online
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import count_floats
from scripts.benchlib.timing import load_average
from scripts.benchlib.timing import run_timed


class Side(NamedTuple):
  """One side of a timed pair: `run()` trains one chunk and returns its
  seconds (blocking; `timed` makes one);
  `losses` are the first chunk's per-step batch-mean losses (None where
  random streams differ); `state_floats` the tangent state's size, all
  examples; `first_call_s` the untimed compile-and-run calls."""

  run: Callable[[], Any]
  losses: np.ndarray | None
  state_floats: int
  first_call_s: float


class Pair(NamedTuple):
  """One algorithm on one cell, ours against a peer's."""

  algorithm: str  # row label, e.g. 'exact', 'snap1'
  ours: Any  # rtrl.estimators name (or, in checks, a named factory)
  cell: str  # rtrl.cells name
  theirs: str  # what runs on their side, for the report
  check: Callable[[Any], dict]  # args -> {'ok': bool, ...}
  build: Callable[..., Side]  # (params, inputs, targets, optimizer, n)
  hparams: dict = {}
  cell_kwargs: dict = {}
  exponent: int = 2  # the step's time ~ n^exponent (skips large sizes)
  random: bool = False  # random estimator: no loss-trajectory check
  sizes: tuple = ()  # sizes it runs at (empty: all asked)


def data(key, steps, batch_size, vocab, dtype):
  """One-hot inputs and next-symbol-like integer targets, time-major."""
  symbols = jax.random.randint(key, (steps + 1, batch_size), 0, vocab)
  return jax.nn.one_hot(symbols[:-1], vocab, dtype=dtype), symbols[1:]


def max_relative(a, b) -> float:
  """max |a - b| / max |b| (0 when both are 0)."""
  a, b = np.asarray(a), np.asarray(b)
  scale = float(np.max(np.abs(b)))
  diff = float(np.max(np.abs(a - b)))
  return diff / scale if scale else diff


def our_step_grads(cell, estimator, params, inputs, targets, key):
  """Per-step `(cell W, readout)` gradients of the batch-mean loss with the
  parameters fixed (the trainer's own `online.estimate_step`), time-major."""
  batch_size = targets.shape[1]
  tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
    params["cell"], cell.initial_state(), jax.random.split(key, batch_size)
  )
  state = online.broadcast_state(cell.initial_state(), batch_size)

  def body(carry, xy):
    batch = online.StepBatch(
      xy[0], xy[1], jnp.ones(batch_size), jnp.zeros(batch_size, bool)
    )
    tstate, state, _, grads = online.estimate_step(
      cell, estimator, params, *carry, batch
    )
    return (tstate, state), (grads["cell"], grads["readout"])

  return jax.lax.scan(body, (tstate, state), (inputs, targets))[1]


def check_setting(pair: Pair, n: int, batch_size: int, steps: int, vocab):
  """Float64 weights (x2, so that influence propagates), inputs and our
  per-step gradients for a check; needs x64 on."""
  cell = cells.make(pair.cell, n, **pair.cell_kwargs)
  params = init_params(cell, jax.random.PRNGKey(0), vocab, vocab)
  params = jax.tree.map(lambda a: a.astype(jnp.float64), params)
  params["cell"]["W"] = params["cell"]["W"] * 2.0
  inputs, targets = data(
    jax.random.PRNGKey(1), steps, batch_size, vocab, jnp.float64
  )
  make = pair.ours if callable(pair.ours) else estimators.make
  name = () if callable(pair.ours) else (pair.ours,)
  estimator = make(*name, cell, **pair.hparams)
  ours = jax.jit(our_step_grads, static_argnums=(0, 1))(
    cell, estimator, params, inputs, targets, jax.random.PRNGKey(2)
  )
  return cell, params, inputs, targets, ours


def compare_steps(ours, theirs, tolerance=1e-10) -> dict:
  """Max relative difference of per-step `(cell, readout)` gradient dicts,
  each leaf `(steps, ...)`, theirs already in our layout (a readout key
  they lack is left out)."""
  (our_cell, our_readout), (their_cell, their_readout) = ours, theirs
  cell = max(max_relative(their_cell[k], our_cell[k]) for k in their_cell)
  readout = max(
    [max_relative(their_readout[k], our_readout[k]) for k in their_readout],
    default=0.0,
  )
  return {
    "check": "per-step gradients, float64",
    "cell_max_rel": cell,
    "readout_max_rel": readout,
    "ok": bool(cell < tolerance and readout < tolerance),
  }


def mean_squared_z(group_means, exact) -> float:
  """Mean over entries of ((mean - exact) / standard error)^2, the standard
  error from the spread of the group means; entries whose exact gradient and
  spread are both zero (the GRU's masked weights) are left out."""
  mean = group_means.mean(0)
  se = group_means.std(0, ddof=1) / np.sqrt(group_means.shape[0])
  keep = se > 1e-12 * np.abs(exact).max()
  return float(np.mean(((mean - exact)[keep] / se[keep]) ** 2))


def in_distribution(ours, cell_name, their_samples, args, lanes=64, groups=16):
  """A random estimator, ours and theirs, unbiased for exact RTRL's
  per-step cell gradient (float64): one sequence repeated over `lanes`
  lanes with their own random streams makes a batch whose mean gradient is
  the mean of `lanes` samples; `groups` such batches give a standard error
  per entry, and the mean squared z-score of (mean - exact) is about
  (G-1)/(G-3) for an unbiased estimator (SnAp-1's bias, in the same units,
  for contrast). `their_samples(params, inputs, targets, groups)` gives
  their `(groups, steps, *W.shape)` batch-mean gradients in our layout."""
  steps = 5
  cell = cells.make(cell_name, args.check_n)
  params = init_params(cell, jax.random.PRNGKey(0), args.vocab, args.vocab)
  params = jax.tree.map(lambda a: a.astype(jnp.float64), params)
  params["cell"]["W"] = params["cell"]["W"] * 2.0
  one_input, one_target = data(
    jax.random.PRNGKey(1), steps, 1, args.vocab, jnp.float64
  )
  inputs = jnp.repeat(one_input, lanes, axis=1)
  targets = jnp.repeat(one_target, lanes, axis=1)
  grads = jax.jit(our_step_grads, static_argnums=(0, 1))

  def ours_w(name, key):
    estimator = estimators.make(name, cell)
    return np.asarray(
      grads(cell, estimator, params, inputs, targets, key)[0]["W"]
    )

  exact = ours_w("rtrl", jax.random.PRNGKey(0))
  snap1 = ours_w("snap1", jax.random.PRNGKey(0))
  our_means = np.stack(
    [ours_w(ours, jax.random.PRNGKey(100 + g)) for g in range(groups)]
  )
  their_means = np.asarray(their_samples(params, inputs, targets, groups))
  biased = mean_squared_z(our_means - our_means.mean(0) + snap1, exact)
  z_ours = mean_squared_z(our_means, exact)
  z_theirs = mean_squared_z(their_means, exact)
  expected = (groups - 1) / (groups - 3)
  return {
    "check": "unbiased for exact RTRL, float64",
    "ok": bool(max(z_ours, z_theirs) < 2.0 * expected),
    "summary": (
      f"mean z^2 of (mean of {lanes * groups} samples - exact) ours "
      f"{z_ours:.2f}, theirs {z_theirs:.2f} (unbiased: ~{expected:.2f}; "
      f"SnAp-1's bias would read {biased:.3g}); sample spread theirs/ours "
      f"{their_means.std(0).mean() / our_means.std(0).mean():.2f}"
    ),
    "mean_z2_ours": z_ours,
    "mean_z2_theirs": z_theirs,
    "mean_z2_expected": expected,
    "mean_z2_snap1_for_contrast": biased,
  }


def our_side(pair: Pair, n: int, params, inputs, targets, optimizer) -> Side:
  """Our public trainer (`rtrl.online.make_online_trainer` with
  `rtrl.estimators.make`) compiled on one chunk and run once."""
  cell = cells.make(pair.cell, n, **pair.cell_kwargs)
  trainer = online.make_online_trainer(
    cell, estimators.make(pair.ours, cell, **pair.hparams), optimizer
  )
  batch_size = targets.shape[1]
  chunk = online.StepBatch(
    inputs,
    targets,
    jnp.ones(targets.shape, jnp.float32),
    jnp.zeros(targets.shape, bool),
  )
  state = trainer.init(params, jax.random.PRNGKey(2), batch_size)
  entry = compiled(trainer.run, state, chunk)
  start = time.perf_counter()
  metrics = jax.block_until_ready(entry[0](*entry[1]))[1]
  return Side(
    run=lambda: run_timed(entry),
    losses=np.asarray(metrics.loss_sum) / batch_size,
    state_floats=count_floats(state.tstate),
    first_call_s=time.perf_counter() - start + entry[2][0],
  )


def timed(run: Callable[[], Any]) -> Callable[[], float]:
  """`run` as a timer: seconds of one blocking call."""

  def timer():
    start = time.perf_counter()
    jax.block_until_ready(run())
    return time.perf_counter() - start

  return timer


def setting(pair: Pair, n: int, batch_size: int, steps: int, args):
  """Float32 weights and one chunk of data for a timed pair."""
  cell = cells.make(pair.cell, n, **pair.cell_kwargs)
  params = init_params(cell, jax.random.PRNGKey(0), args.vocab, args.vocab)
  inputs, targets = data(
    jax.random.PRNGKey(1), steps, batch_size, args.vocab, jnp.float32
  )
  return params, inputs, targets


def build_both(pair: Pair, n: int, batch_size: int, args) -> dict:
  """Ours and theirs built and run once at (n, batch), with the float32
  loss-trajectory agreement."""
  steps = args.exact_steps if pair.exponent >= 4 else args.steps
  params, inputs, targets = setting(pair, n, batch_size, steps, args)
  optimizer = optax.adam(args.learning_rate)
  ours = our_side(pair, n, params, inputs, targets, optimizer)
  theirs = pair.build(params, inputs, targets, optimizer, n)
  trajectory = (
    None
    if pair.random or theirs.losses is None
    else max_relative(theirs.losses, ours.losses)
  )
  return {"ours": ours, "theirs": theirs, "steps": steps, "rel": trajectory}


def run_checks(pairs: list[Pair], args) -> dict:
  """Every pair's float64 check (x64 on for the duration)."""
  results = {}
  jax.config.update("jax_enable_x64", True)
  try:
    for pair in pairs:
      if (pair.algorithm, pair.cell) in results:
        continue  # another batching of theirs: one check per algorithm
      start = time.perf_counter()
      try:
        result = pair.check(args)
      except Exception as err:
        result = {"ok": False, "error": f"{type(err).__name__}: {err}"}
      result["seconds"] = time.perf_counter() - start
      results[(pair.algorithm, pair.cell)] = result
      print(f"  check {pair.algorithm} {pair.cell}: {summary(result)}")
  finally:
    jax.config.update("jax_enable_x64", False)
  return results


def summary(check: dict) -> str:
  if "error" in check:
    return f"FAILED to run: {check['error'][:300]}"
  verdict = "agree" if check["ok"] else "DISAGREE"
  if "summary" in check:
    return f"{verdict}: {check['summary']}"
  return (
    f"{verdict}: max relative difference cell "
    f"{check['cell_max_rel']:.1e}, readout "
    f"{check['readout_max_rel']:.1e}"
  )


def admitted(pair, n, batch_size, args, checks, history, skipped) -> bool:
  """Whether a pair is timed at (n, batch): its check passed, the size is
  one it runs at, and its predicted cost is within --max_seconds."""
  key = (pair.algorithm, pair.cell, n, batch_size)
  check = checks.get((pair.algorithm, pair.cell))
  if check is not None and not check["ok"]:
    skipped[key] = f"not timed: the check failed ({summary(check)[:200]})"
    return False
  if pair.sizes and n not in pair.sizes:
    return False
  last = history.get((pair.algorithm, pair.cell, batch_size))
  if last is not None:
    n0, seconds_per_step = last
    steps = args.exact_steps if pair.exponent >= 4 else args.steps
    predicted = (
      seconds_per_step * (n / n0) ** pair.exponent * steps * (args.repeats + 2)
    )
    if predicted > args.max_seconds:
      skipped[key] = (
        f"predicted {predicted:.0f}s > --max_seconds {args.max_seconds:.0f}"
      )
      return False
  return True


def measure(pairs, n, batch_size, args, checks, history, skipped) -> list:
  """Builds every admitted pair at (n, batch), then times them in
  interleaved rounds (ours, theirs, next pair, ...)."""
  built = {}  # index in pairs -> both sides
  for i, pair in enumerate(pairs):
    if not admitted(pair, n, batch_size, args, checks, history, skipped):
      continue
    key = (pair.algorithm, pair.cell, n, batch_size)
    try:
      built[i] = build_both(pair, n, batch_size, args)
    except Exception as err:
      skipped[key] = f"failed to build: {type(err).__name__}: {str(err)[:300]}"
      continue
    rel = built[i]["rel"]
    if rel is not None and rel > args.trajectory_tolerance:
      skipped[key] = (
        f"not timed: float32 loss trajectories differ by {rel:.1e} > "
        f"{args.trajectory_tolerance:g}"
      )
      del built[i]
  samples = {i: {"ours": [], "theirs": []} for i in built}
  for _ in range(args.repeats):
    for i, b in built.items():
      for side in ("ours", "theirs"):
        seconds = b[side].run()
        samples[i][side].append(seconds / b["steps"])
  return [
    row(pairs[i], n, batch_size, built[i], samples[i], history) for i in built
  ]


def row(pair, n, batch_size, b, samples, history) -> dict:
  ours, theirs = samples["ours"], samples["theirs"]
  history[(pair.algorithm, pair.cell, batch_size)] = (
    n,
    statistics.median(ours) + statistics.median(theirs),
  )
  result = {
    "algorithm": pair.algorithm,
    "cell": pair.cell,
    "theirs": pair.theirs,
    "n": n,
    "batch": batch_size,
    "steps_per_call": b["steps"],
    "ours_ms": 1e3 * statistics.median(ours),
    "theirs_ms": 1e3 * statistics.median(theirs),
    "ours_min_ms": 1e3 * min(ours),
    "theirs_min_ms": 1e3 * min(theirs),
    "ratio_median": statistics.median(theirs) / statistics.median(ours),
    "ratio_min": min(theirs) / min(ours),
    "ours_state_mib": 4 * b["ours"].state_floats / 2**20,
    "theirs_state_mib": 4 * b["theirs"].state_floats / 2**20,
    "loss_trajectory_max_rel": b["rel"],
    "first_call_s": {
      "ours": b["ours"].first_call_s,
      "theirs": b["theirs"].first_call_s,
    },
    "samples_ms": {
      "ours": [1e3 * s for s in ours],
      "theirs": [1e3 * s for s in theirs],
    },
    "load": load_average(),
  }
  print(
    f"  {pair.algorithm} {pair.cell} n={n} B={batch_size}: ours "
    f"{result['ours_ms']:.3g} ms, theirs {result['theirs_ms']:.3g} ms, "
    f"theirs/ours {result['ratio_median']:.2f} (min "
    f"{result['ratio_min']:.2f}); state {result['ours_state_mib']:.3g} / "
    f"{result['theirs_state_mib']:.3g} MiB; {load_average()}",
    flush=True,
  )
  return result
