"""braintrace's adapter for `scripts/bench_peers.py`: its pairs (`pairs`,
`versions`) and their checks, run before any timing:
our per-step gradients against braintrace's in float64 (deterministic
pairs agree to rounding), and both UOROs unbiased for the exact gradient
(a z-score test over independent groups of samples: L identical copies of
one sequence with different keys form the batch, G such groups give a
standard error per entry, and the mean squared z-score of (mean - exact)
is ~(G-1)/(G-3) for an unbiased estimator). Imported only under the
peer's own venv (`scripts/peers/setup_braintrace.sh`).
"""

from __future__ import annotations

import brainstate
import jax
import jax.numpy as jnp
import numpy as np

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import estimators
from scripts.benchlib.peers_braintrace import ALGORITHMS
from scripts.benchlib.peers_braintrace import TheirLearner
from scripts.benchlib.peers_braintrace import their_grads_as_ours
from scripts.benchlib.peers_braintrace import their_side
from scripts.benchlib.peers_braintrace import versions  # noqa: F401 (the adapter's API)
from scripts.benchlib.peers_common import Pair
from scripts.benchlib.peers_common import data
from scripts.benchlib.peers_common import max_relative
from scripts.benchlib.peers_common import our_step_grads

# -- checks ------------------------------------------------------------------


def check_gradients(algorithm, cell_name, args) -> dict:
  """Check 1 (float64, small): max relative difference of the per-step cell
  and readout gradients."""
  n, batch_size, steps = args.check_n, 4, 6
  cell = cells.make(cell_name, n)
  params = init_params(cell, jax.random.PRNGKey(0), args.vocab, args.vocab)
  # Larger weights than the default init: a contracting net's influence
  # dies in a step or two, which would hide errors in the propagation.
  params["cell"]["W"] = params["cell"]["W"] * 2.0
  inputs, targets = data(
    jax.random.PRNGKey(1), steps, batch_size, args.vocab, jnp.float64
  )
  estimator = estimators.make(ALGORITHMS[algorithm][0], cell)
  ours_cell, ours_readout = jax.jit(our_step_grads, static_argnums=(0, 1))(
    cell, estimator, params, inputs, targets, jax.random.PRNGKey(2)
  )
  ours_W = ours_cell["W"]
  theirs = TheirLearner(
    algorithm,
    cell_name,
    params,
    args.vocab,
    batch_size,
    args.batching[algorithm][0],
  )
  cell_diff = readout_diff = 0.0
  for t in range(steps):
    grads, _ = theirs.step_grads(inputs[t], targets[t])
    cell_diff = max(
      cell_diff,
      max_relative(
        their_grads_as_ours(cell_name, grads["cell"], params["cell"]["W"]),
        ours_W[t],
      ),
    )
    readout_diff = max(
      readout_diff,
      max(
        max_relative(grads["readout"][k], ours_readout[k][t])
        for k in ("w", "b")
      ),
    )
  ok = cell_diff < 1e-10 and readout_diff < 1e-10
  return {
    "check": "per-step gradients, float64",
    "n": n,
    "batch": batch_size,
    "steps": steps,
    "cell_max_rel": cell_diff,
    "readout_max_rel": readout_diff,
    "ok": ok,
  }


def uoro_group_means_ours(cell, params, inputs, targets, groups):
  """`groups` independent means of UORO samples (one per lane) of our per-step
  cell gradient (the lanes are one sequence repeated, keys differ)."""
  estimator = estimators.make("uoro", cell)
  grads = jax.jit(our_step_grads, static_argnums=(0, 1))
  return np.stack(
    [
      np.asarray(
        grads(
          cell, estimator, params, inputs, targets, jax.random.PRNGKey(100 + g)
        )[0]["W"]
      )
      for g in range(groups)
    ]
  )


def uoro_group_means_theirs(cell_name, params, inputs, targets, lanes, groups):
  """The same from braintrace's UORO (vmap, one learner): between groups
  the hidden and trace states are zeroed and every lane gets its own key."""
  theirs = TheirLearner(
    "uoro", cell_name, params, inputs.shape[-1], lanes, "vmap"
  )
  module = theirs.module
  run = brainstate.transform.jit(
    lambda xs, ys: brainstate.transform.for_loop(
      lambda x, y: theirs.step_grads(x, y)[0]["cell"], xs, ys
    )
  )
  means = []
  for g in range(groups):
    for state in module.states().values():
      if isinstance(state, brainstate.HiddenState):
        state.value = jnp.zeros_like(state.value)
    for state in [
      *module.etrace_s.values(),
      *module.etrace_theta.values(),
      module.projection_step,
    ]:
      state.value = jax.tree.map(jnp.zeros_like, state.value)
    module.projection_rng.value = jax.random.split(
      jax.random.PRNGKey(1000 + g), lanes
    )
    per_step = run(inputs, targets)
    means.append(
      np.stack(
        [
          np.asarray(
            their_grads_as_ours(
              cell_name,
              jax.tree.map(lambda a, t=t: a[t], per_step),
              params["cell"]["W"],
            )
          )
          for t in range(inputs.shape[0])
        ]
      )
    )
  return np.stack(means)


def mean_squared_z(group_means, exact) -> float:
  """Mean over entries of ((mean - exact) / standard error)^2, the standard
  error from the spread of the group means; entries whose exact gradient and
  spread are both zero (the GRU's masked weights) are left out."""
  mean = group_means.mean(0)
  se = group_means.std(0, ddof=1) / np.sqrt(group_means.shape[0])
  keep = se > 1e-12 * np.abs(exact).max()
  return float(np.mean(((mean - exact)[keep] / se[keep]) ** 2))


def check_uoro(cell_name, args) -> dict:
  """Check 2: both UOROs unbiased for the exact per-step gradient."""
  n, steps, lanes, groups = args.check_n, 5, 64, 16
  cell = cells.make(cell_name, n)
  params = init_params(cell, jax.random.PRNGKey(0), args.vocab, args.vocab)
  params["cell"]["W"] = params["cell"]["W"] * 2.0
  one_input, one_target = data(
    jax.random.PRNGKey(1), steps, 1, args.vocab, jnp.float64
  )
  inputs = jnp.repeat(one_input, lanes, axis=1)
  targets = jnp.repeat(one_target, lanes, axis=1)
  step_grads = jax.jit(our_step_grads, static_argnums=(0, 1))
  exact, snap1 = (
    np.asarray(
      step_grads(
        cell,
        estimators.make(name, cell),
        params,
        inputs,
        targets,
        jax.random.PRNGKey(0),
      )[0]["W"]
    )
    for name in ("rtrl", "snap1")
  )
  ours = uoro_group_means_ours(cell, params, inputs, targets, groups)
  theirs = uoro_group_means_theirs(
    cell_name, params, inputs, targets, lanes, groups
  )
  # For contrast: SnAp-1's bias in units of UORO's (ours) standard error.
  biased = mean_squared_z(ours - ours.mean(0) + snap1, exact)
  z_ours, z_theirs = mean_squared_z(ours, exact), mean_squared_z(theirs, exact)
  expected = (groups - 1) / (groups - 3)
  ok = max(z_ours, z_theirs) < 2.0 * expected
  rel = lambda m: float(np.abs(m.mean(0) - exact).max() / np.abs(exact).max())
  summary = (
    f"mean z^2 of (mean of {lanes * groups} samples - exact) ours "
    f"{z_ours:.2f}, braintrace {z_theirs:.2f} (unbiased: ~{expected:.2f}; "
    f"SnAp-1's bias would read {biased:.3g})"
  )
  return {
    "summary": summary,
    "check": "UORO unbiased, float64",
    "n": n,
    "steps": steps,
    "samples": lanes * groups,
    "mean_z2_ours": z_ours,
    "mean_z2_theirs": z_theirs,
    "mean_z2_expected": expected,
    "mean_z2_snap1_for_contrast": biased,
    "mean_rel_err_ours": rel(ours),
    "mean_rel_err_theirs": rel(theirs),
    "spread_ratio_theirs_over_ours": float(
      theirs.std(0).mean() / ours.std(0).mean()
    ),
    "ok": ok,
  }


def pairs(args) -> list:
  """Every algorithm on the tanh RNN and our GRU, each batching of theirs
  that computes our estimator."""
  args.batching = {a: spec[3] for a, spec in ALGORITHMS.items()}

  def check(algorithm, cell_name):
    def run(args):
      brainstate.environ.set(precision=64)
      try:
        if algorithm == "uoro":
          return check_uoro(cell_name, args)
        return check_gradients(algorithm, cell_name, args)
      finally:
        brainstate.environ.set(precision=32)

    return run

  def build(algorithm, cell_name, batching):
    return lambda params, inputs, targets, opt, n: their_side(
      algorithm, cell_name, batching, params, inputs, targets, opt
    )

  return [
    Pair(
      algorithm=algorithm,
      ours=spec[0],
      cell=cell_name,
      theirs=f"{spec[4]}, {batching}",
      check=check(algorithm, cell_name),
      build=build(algorithm, cell_name, batching),
      exponent=4 if algorithm == "exact" else 2,
      random=algorithm == "uoro",
    )
    for cell_name in ("rnn", "gru")
    for algorithm, spec in ALGORITHMS.items()
    for batching in spec[3]
  ]
