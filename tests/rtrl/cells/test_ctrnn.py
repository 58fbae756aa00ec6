"""`rtrl.cells.CTRNN`: RTRRL's continuous-time RNN as a Lemma-1 cell."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rtrl


def test_step_is_one_euler_step_of_the_ode(x64):
  cell = rtrl.cells.CTRNN(7, tau_min=1.5, tau_max=4.0, dt=0.5, tau_seed=3)
  params = cell.init(jax.random.PRNGKey(0), 3)
  h = jax.random.normal(jax.random.PRNGKey(1), (7,))
  x = jax.random.normal(jax.random.PRNGKey(2), (3,))
  z = jnp.concatenate([x, h, jnp.ones(1)]) @ params["W"]
  expected = h + 0.5 * (jnp.tanh(z) - h) / cell.time_constants
  np.testing.assert_allclose(cell.step(params, h, x), expected, rtol=1e-14)
  assert cell.time_constants.min() >= 1.5 and cell.time_constants.max() <= 4.0


def test_equal_time_constants_make_the_leaky_rnn(x64):
  ctrnn = rtrl.cells.CTRNN(5, time_constants=np.full(5, 4.0))
  leaky = rtrl.cells.LeakyRNN(5, leak=0.25)
  params = leaky.init(jax.random.PRNGKey(4), 2)
  h, x = jnp.linspace(-1, 1, 5), jnp.array([0.3, -0.7])
  np.testing.assert_allclose(
    ctrnn.step(params, h, x), leaky.step(params, h, x), rtol=1e-15
  )
  _, a = ctrnn.linearized_step(params, h, x)
  _, b = leaky.linearized_step(params, h, x)
  np.testing.assert_allclose(a.dfds, b.dfds, rtol=1e-15)
  np.testing.assert_allclose(a.D, b.D, rtol=1e-15)


def test_exact_rtrl_equals_bptt_and_every_estimator_serves_it(x64):
  cell = rtrl.cells.make("ctrnn", 6)
  params = cell.init(jax.random.PRNGKey(5), 2)
  xs = jax.random.normal(jax.random.PRNGKey(6), (8, 2))
  g = jax.random.normal(jax.random.PRNGKey(7), (6,))
  estimator = rtrl.estimators.make("rtrl", cell)
  tstate = estimator.init(params, cell.initial_state(), jax.random.PRNGKey(0))
  state = cell.initial_state()
  for x in xs:
    tstate, state = estimator.step(params)(tstate, state, x)

  def loss(p):
    h = cell.initial_state()
    for x in xs:
      h = cell.step(p, h, x)
    return g @ h

  np.testing.assert_allclose(
    estimator.gradient(params, tstate, g)["W"],
    jax.grad(loss)(params)["W"],
    rtol=1e-10,
    atol=1e-13,
  )
  for name in rtrl.estimators.names():
    wanted = rtrl.estimators.hyperparameters(name)
    hparams = {k: 2 for k in ("rank", "order") if k in wanted}
    rtrl.estimators.make(name, cell, **hparams)  # none refuses a CT-RNN


@pytest.mark.parametrize(
  "kwargs,message",
  [
    (dict(dt=0.0), "dt must be a finite number > 0"),
    (dict(tau_min=3.0, tau_max=2.0), "tau_max must be >= tau_min"),
    (dict(time_constants=np.ones(3)), r"time_constants must have shape \(4,\)"),
    (dict(dt=3.5), "every time constant must be a finite number >= dt"),
  ],
)
def test_bad_arguments_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    rtrl.cells.CTRNN(4, **kwargs)
