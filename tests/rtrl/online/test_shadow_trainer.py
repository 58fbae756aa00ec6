"""`make_online_trainer(..., shadow_every=K)`: the exact-RTRL shadow reports
the cosine of the estimator's gradient to exact RTRL's on the learner's own
trajectory every K steps, and never changes training."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rtrl_problems

from rtrl import cells
from rtrl import estimators
from rtrl import online

N, INPUT, OUTPUTS, B, T = 4, 3, 4, 3, 9


def make_problem(cell):
  return rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=[(0, None), (4, 0), (6, 2)],
    seed=1,
    keep_probability=0.8,
  )


def run(cell, estimator, **kwargs):
  trainer = online.make_online_trainer(
    cell, estimator, optax.adam(3e-2), **kwargs
  )
  params, chunk = make_problem(cell)
  state = trainer.init(params, jax.random.PRNGKey(0), B)
  return trainer.run(state, chunk)


def assert_bitwise_equal(a, b):
  jax.tree_util.tree_map(
    lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)),
    a,
    b,
  )


@pytest.mark.parametrize("cls", [cells.RNN, cells.GRU], ids=["rnn", "gru"])
def test_exact_rtrl_has_cosine_one_at_every_reported_step(cls, x64):
  cell = cls(hidden_size=N)
  _, metrics = run(cell, estimators.make("rtrl", cell), shadow_every=2)
  assert isinstance(metrics, online.ShadowStepMetrics)
  reported = np.asarray(metrics.reported)
  np.testing.assert_array_equal(reported, (np.arange(T) + 1) % 2 == 0)
  cosine = np.asarray(metrics.cosine)
  assert cosine.dtype == np.float64
  np.testing.assert_allclose(cosine[reported], 1.0, rtol=0, atol=1e-12)
  assert np.isnan(cosine[~reported]).all()
  np.testing.assert_allclose(
    np.asarray(metrics.estimate_norm)[reported],
    np.asarray(metrics.exact_norm)[reported],
    rtol=1e-12,
  )
  assert metrics.estimator_metrics == {}


def test_shadow_off_is_the_trainer_without_it(x64):
  cell = cells.GRU(hidden_size=N)
  estimator = estimators.make("ok", cell, rank=2)
  state, metrics = run(cell, estimator)
  for off in (None, 0):
    state_off, metrics_off = run(cell, estimator, shadow_every=off)
    assert type(state_off) is online.OnlineState
    assert type(metrics_off) is online.StepMetrics
    assert_bitwise_equal(state_off, state)
    assert_bitwise_equal(metrics_off, metrics)
  # ... and that trainer is estimate_step + the optimiser, step by step.
  params, chunk = make_problem(cell)
  optimizer = optax.adam(3e-2)
  tstate = online.make_online_trainer(cell, estimator, optimizer).init(
    params, jax.random.PRNGKey(0), B
  )

  @jax.jit
  def by_hand(params, tstate, chunk):
    def body(carry, batch):
      params, opt_state, tstate, cell_state = carry
      tstate, cell_state, _, grads = online.estimate_step(
        cell, estimator, params, tstate, cell_state, batch
      )
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return (
        optax.apply_updates(params, updates),
        opt_state,
        tstate,
        cell_state,
      ), None

    carry = (params, optimizer.init(params), tstate.tstate, tstate.cell_state)
    return jax.lax.scan(body, carry, chunk)[0]

  final_params, _, final_tstate, _ = by_hand(params, tstate, chunk)
  chex.assert_trees_all_close(final_params, state.params, rtol=1e-12)
  chex.assert_trees_all_close(final_tstate, state.tstate, rtol=1e-12)


def test_uoro_cosine_in_open_interval_and_training_unchanged(x64):
  cell = cells.RNN(hidden_size=N)
  estimator = estimators.make("uoro", cell)
  state_off, metrics_off = run(cell, estimator)
  state_on, metrics_on = run(cell, estimator, shadow_every=1)
  assert isinstance(state_on.tstate, online.ShadowTangents)
  assert_bitwise_equal(state_on.params, state_off.params)
  assert_bitwise_equal(state_on.opt_state, state_off.opt_state)
  assert_bitwise_equal(state_on.cell_state, state_off.cell_state)
  assert_bitwise_equal(state_on.tstate.learner, state_off.tstate)
  assert_bitwise_equal(metrics_on.loss_sum, metrics_off.loss_sum)
  cosine = np.asarray(metrics_on.cosine)
  assert np.asarray(metrics_on.reported).all()
  finite = np.isfinite(cosine)
  assert finite.sum() >= T - 2  # NaN only where the step has no loss
  assert ((cosine[finite] > -1) & (cosine[finite] < 1)).all()
  assert np.abs(cosine[finite] - 1).max() > 1e-3  # UORO is not exact


def test_estimator_metrics_are_batch_means_at_reported_steps(x64):
  cell = cells.RNN(hidden_size=N)
  base = estimators.make("snap1", cell)
  norm = lambda tstate: {
    "tangent_norm": jnp.sqrt(
      sum(jnp.sum(t**2) for t in jax.tree_util.tree_leaves(tstate.tangent))
    )
  }
  state, metrics = run(cell, _with_metrics(base, norm), shadow_every=3)
  values = np.asarray(metrics.estimator_metrics["tangent_norm"])
  reported = np.asarray(metrics.reported)
  assert reported.sum() == T // 3 and reported[-1]
  assert (values[reported] > 0).all() and np.isnan(values[~reported]).all()
  last = np.mean(
    np.asarray(jax.vmap(norm)(state.tstate.learner)["tangent_norm"])
  )
  np.testing.assert_allclose(values[-1], last, rtol=1e-12)


def _with_metrics(estimator, metrics):
  """The estimator with `metrics` (`Estimator`'s field where it has one,
  else a subclass's attribute)."""
  if "metrics" in type(estimator)._fields:
    return estimator._replace(metrics=metrics)

  class WithMetrics(type(estimator)):
    pass

  WithMetrics.metrics = staticmethod(metrics)
  return WithMetrics(*estimator)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_shadow_every_names_it(bad):
  cell = cells.RNN(hidden_size=N)
  with pytest.raises(ValueError, match="shadow_every"):
    online.make_online_trainer(
      cell, estimators.make("rtrl", cell), optax.sgd(0.1), shadow_every=bad
    )
