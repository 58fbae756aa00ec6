"""The LRU recurrence (`rtrl.cells.LRU`) and its exact element-wise RTRL."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rtrl_problems
from rtrl_problems import rel_err

import rtrl
from rtrl import cells
from rtrl import estimators
from rtrl import readout

M, INPUT, OUTPUTS, T, B = 5, 3, 4, 12, 3
RESETS = [(5, 1), (9, None)]


def make_problem(cell, seed=0):
  return rtrl_problems.cell_problem(cell, seed, T, B, INPUT, OUTPUTS, RESETS)


def test_step_is_the_complex_recurrence(x64):
  """`h' = λ h + γ (B x)` with `λ = exp(-exp(ν) + i exp(θ))`, `γ =
  exp(γ_log)`, `B = B_re + i B_im`, written out in NumPy."""
  cell = cells.LRU(M, r_min=0.5, r_max=0.9)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  rng = np.random.default_rng(1)
  h = rng.standard_normal(M) + 1j * rng.standard_normal(M)
  x = rng.standard_normal(INPUT)
  p = {k: np.asarray(v) for k, v in params.items()}
  lam = np.exp(-np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"]))
  expected = lam * h + np.exp(p["gamma_log"]) * (
    (p["B_re"] + 1j * p["B_im"]) @ x
  )
  new = cell.step(
    params, (jnp.asarray(h.real), jnp.asarray(h.imag)), jnp.asarray(x)
  )
  np.testing.assert_allclose(new[0] + 1j * new[1], expected, rtol=1e-13)
  np.testing.assert_array_equal(
    cell.output(new), np.concatenate([new[0], new[1]])
  )


def test_ring_initialisation(x64):
  """|λ| lies in [r_min, r_max] with |λ|² uniform there (a Kolmogorov-Smirnov
  bound at 1e-3 failure), phases in [0, max_phase], γ = sqrt(1 - |λ|²)."""
  r_min, r_max, phase = 0.4, 0.95, math.pi / 3
  cell = cells.LRU(4000, r_min=r_min, r_max=r_max, max_phase=phase)
  params = cell.init(jax.random.PRNGKey(2), INPUT)
  modulus = np.exp(-np.exp(np.asarray(params["nu_log"])))
  assert modulus.min() >= r_min - 1e-12 and modulus.max() <= r_max + 1e-12
  uniform = np.sort((modulus**2 - r_min**2) / (r_max**2 - r_min**2))
  ecdf = np.arange(1, uniform.size + 1) / uniform.size
  ks = np.abs(ecdf - uniform).max()
  assert ks < math.sqrt(-0.5 * math.log(1e-3 / 2) / uniform.size)
  phases = np.exp(np.asarray(params["theta_log"]))
  assert phases.min() > 0 and phases.max() <= phase + 1e-12
  np.testing.assert_allclose(
    np.exp(np.asarray(params["gamma_log"])), np.sqrt(1 - modulus**2), rtol=1e-10
  )


@pytest.mark.parametrize("name", ["rtrl", "snap1"])
def test_exact_rtrl_equals_bptt(name, x64):
  """Σ_t of the element-wise RTRL's per-step gradients == full BPTT of Σ_t
  L_t for every parameter (the logs of λ and γ, and complex B as B_re and
  B_im), rel. error < 1e-12, 12 steps with per-example resets; a strong
  ring (|λ| up to 0.99) so that long-lived sensitivities matter."""
  cell = cells.LRU(M, r_min=0.8, r_max=0.99)
  params, chunk = make_problem(cell)
  total, full = rtrl_problems.summed_online_and_bptt(
    cell, estimators.make(name, cell), params, chunk
  )
  assert set(total) == set(full) == set(cells.lru.PARAM_NAMES)
  for key in full:
    assert rel_err(total[key], full[key]) < 1e-12, key
    assert np.abs(full[key]).max() > 1e-3, key  # not a vacuous match


def test_memory_is_of_the_order_of_the_recurrence_parameters(x64):
  """One complex sensitivity per recurrence parameter of a unit: λ, γ and
  the unit's row of B; `m (input + 2)` complex numbers, no `m^2` term."""
  cell = cells.LRU(64)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  tstate = estimators.make("rtrl", cell).init(
    params, cell.initial_state(), jax.random.PRNGKey(1)
  )
  sizes = [a.size for a in jax.tree_util.tree_leaves(tstate.tangent)]
  assert sum(sizes) == 64 * (INPUT + 2)
  assert all(
    jnp.iscomplexobj(a) for a in jax.tree_util.tree_leaves(tstate.tangent)
  )


def test_uoro_runs_by_autodiff_and_others_refuse():
  cell = cells.LRU(M)
  params, chunk = make_problem(cell)
  est = estimators.make("uoro", cell)
  steps, _ = rtrl.frozen_gradients(
    cell, est, params, chunk, jax.random.PRNGKey(0)
  )
  assert all(np.isfinite(a).all() for a in jax.tree_util.tree_leaves(steps))
  for name in ("ok", "kf", "rflo"):
    with pytest.raises(ValueError, match="does not serve an LRU"):
      estimators.make(name, cell)
  with pytest.raises(ValueError, match="no hyper-parameters"):
    estimators.make("rtrl", cell, rank=2)


def test_online_training_learns_a_delayed_echo():
  """float32, exact element-wise RTRL with Adam: echo the input class of 8
  steps ago (a memory the linear recurrence must hold), 4 classes, batch
  16. The per-step loss falls from log 4 = 1.386 to below 0.3 nats over the
  last 200 of 1500 steps (0.09 measured; fixed seed)."""
  classes, delay, steps, batch = 4, 8, 1500, 16
  cell = cells.LRU(16, r_min=0.5, r_max=0.95)
  est = estimators.make("rtrl", cell)
  trainer = rtrl.make_online_trainer(cell, est, optax.adam(3e-3))
  key = jax.random.PRNGKey(0)
  params = {
    "cell": cell.init(key, classes),
    "readout": readout.linear().init(
      jax.random.fold_in(key, 1), cell.hidden_size, classes
    ),
  }
  symbols = jax.random.randint(
    jax.random.PRNGKey(3), (steps + delay, batch), 0, classes
  )
  chunk = rtrl.StepBatch(
    inputs=jax.nn.one_hot(symbols[delay:], classes),
    targets=symbols[:-delay],
    weights=jnp.ones((steps, batch)),
    resets=jnp.zeros((steps, batch), bool),
  )
  state, metrics = trainer.run(trainer.init(params, key, batch), chunk)
  losses = np.asarray(metrics.loss_sum / metrics.weight_sum)
  assert losses[:50].mean() > 1.0
  assert losses[-200:].mean() < 0.3, losses[-200:].mean()
  del state


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(state_size=0), "state_size"),
    (dict(state_size=4, r_min=0.5, r_max=0.4), "r_min and r_max"),
    (dict(state_size=4, r_max=1.0), "r_min and r_max"),
    (dict(state_size=4, max_phase=0.0), "max_phase"),
  ],
)
def test_bad_construction_is_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    cells.LRU(**kwargs)


def test_bad_params_are_named():
  cell = cells.LRU(M)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  est = estimators.make("rtrl", cell)
  state = cell.initial_state()
  complex_b = {**params, "B_re": params["B_re"] + 0j}
  with pytest.raises(ValueError, match=r"params\['B_re'\] must be real"):
    est.init(complex_b, state, jax.random.PRNGKey(0))
  unstable = {**params, "nu_log": params["nu_log"].at[2].set(-jnp.inf)}
  with pytest.raises(ValueError, match="unstable or undefined.*unit 2"):
    est.init(unstable, state, jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="keys"):
    est.init({"W": params["B_re"]}, state, jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="x must have shape"):
    cell.step(params, state, jnp.zeros(INPUT + 1))
