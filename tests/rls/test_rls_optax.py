"""rls.rls in optax: momentum / L1 equations, jit, inject_hyperparams,
multi_transform (the hybrid), chains, dtypes, state stability, vmap."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from rls_problems import mse_with_layer_inputs

import rls


class MLP(nn.Module):
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(5, param_dtype=self.dtype)(x))
    return nn.Dense(2, param_dtype=self.dtype)(x)


def _problem(dtype=jnp.float32, batch=6, seed=0):
  model = MLP(dtype)
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  x = jax.random.normal(keys[0], (batch, 3)).astype(dtype)
  y = jax.random.normal(keys[1], (batch, 2)).astype(dtype)
  params = jax.jit(model.init)(keys[2], x)["params"]
  loss_fn = mse_with_layer_inputs(model)
  return params, jax.jit(jax.grad(lambda p: loss_fn(p, x, y), has_aux=True))


def _run(tx, params, grad_fn, steps=3):
  state = tx.init(params)
  update = jax.jit(tx.update)
  all_updates = []
  for _ in range(steps):
    grads, xbar = grad_fn(params)
    updates, state = update(grads, state, params, layer_inputs=xbar)
    params = optax.apply_updates(params, updates)
    all_updates.append(updates)
  return params, state, all_updates


def _assert_trees_close(a, b, rtol=1e-6, atol=1e-7):
  chex.assert_trees_all_close(a, b, rtol=rtol, atol=atol)


def test_momentum_and_l1_follow_equations_98_to_100(x64):
  """A numpy transcription of eqs. (53)-(55), (98)-(100) for one layer."""
  lam, k, eta, alpha, gamma, p0_scale = 0.9, 0.5, 0.7, 0.5, 0.01, 1.5
  rng = np.random.default_rng(0)
  theta = rng.normal(size=(3, 2))  # [kernel (2, 2); bias (1, 2)]
  params = {"kernel": jnp.asarray(theta[:2]), "bias": jnp.asarray(theta[2])}
  tx = rls.rls(
    forgetting_factor=lam,
    ratio=k,
    gradient_scale=eta,
    init_scale=p0_scale,
    momentum=alpha,
    l1=gamma,
    clip_norm=None,  # the equations have no clip
  )
  state = tx.init(params)
  jitted_params, jitted_state = params, state
  jitted_update = jax.jit(tx.update)
  p = p0_scale * np.eye(3)
  omega = np.zeros((3, 2))
  for _ in range(4):
    gradient = rng.normal(size=(3, 2))
    xbar = rng.normal(size=2)
    # Hand computation, straight from the paper.
    x = np.append(xbar, 1.0)
    u = p @ x  # (54)
    h = lam + k * x @ u  # (55)
    new_p = p / lam - k / (lam * h) * np.outer(u, u)  # (53)
    omega = alpha * omega - eta / h * p @ gradient  # (99)
    theta = theta + omega - gamma * new_p @ np.sign(theta)  # (100)
    p = new_p
    # The optimiser.
    grads = {
      "kernel": jnp.asarray(gradient[:2]),
      "bias": jnp.asarray(gradient[2]),
    }
    updates, state = tx.update(
      grads, state, params, layer_inputs=jnp.asarray(xbar)
    )
    params = optax.apply_updates(params, updates)
    updates, jitted_state = jitted_update(
      grads, jitted_state, jitted_params, layer_inputs=jnp.asarray(xbar)
    )
    jitted_params = optax.apply_updates(jitted_params, updates)
    for got in (params, jitted_params):
      np.testing.assert_allclose(
        got["kernel"], theta[:2], rtol=1e-12, atol=1e-13
      )
      np.testing.assert_allclose(got["bias"], theta[2], rtol=1e-12, atol=1e-13)


def test_l1_without_momentum_is_equation_98(x64):
  theta = np.array([[0.5, -1.0], [2.0, 0.0], [-0.3, 0.7]])
  gradient = np.array([[1.0, 2.0], [-1.0, 0.5], [0.2, -0.4]])
  xbar = np.array([1.0, -2.0])
  # P0 = I, λ = 1, k = 1: u = x = (1, -2, 1), h = 1 + 6 = 7,
  # P1 = I - u uᵀ / 7; Θ1 = Θ0 - P0 ∇ / 7 - γ P1 sgn(Θ0).
  x = np.array([1.0, -2.0, 1.0])
  p1 = np.eye(3) - np.outer(x, x) / 7.0
  expected = theta - gradient / 7.0 - 0.1 * p1 @ np.sign(theta)
  params = {"kernel": jnp.asarray(theta[:2]), "bias": jnp.asarray(theta[2])}
  tx = rls.rls(ratio=1.0, l1=0.1, clip_norm=None)
  grads = {
    "kernel": jnp.asarray(gradient[:2]),
    "bias": jnp.asarray(gradient[2]),
  }
  updates, _ = tx.update(
    grads, tx.init(params), params, layer_inputs=jnp.asarray(xbar)
  )
  new = optax.apply_updates(params, updates)
  np.testing.assert_allclose(new["kernel"], expected[:2], rtol=1e-12)
  np.testing.assert_allclose(new["bias"], expected[2], rtol=1e-12)


def test_jit_traces_once_across_steps():
  params, grad_fn = _problem()
  tx = rls.rls(momentum=0.5, l1=1e-3)
  traces = []

  @jax.jit
  def step(params, state):
    traces.append(None)
    grads, xbar = grad_fn(params)
    updates, state = tx.update(grads, state, params, layer_inputs=xbar)
    return optax.apply_updates(params, updates), state

  state = tx.init(params)
  for _ in range(3):
    params, state = step(params, state)
  assert len(traces) == 1
  assert all(np.all(np.isfinite(a)) for a in jax.tree.leaves(params))


def test_inject_hyperparams():
  params, grad_fn = _problem()
  kwargs = dict(
    learning_rate=0.5, forgetting_factor=0.99, ratio=0.2, momentum=0.5, l1=1e-3
  )
  injected = optax.inject_hyperparams(rls.rls)(**kwargs)
  plain = rls.rls(**kwargs)
  got = _run(injected, params, grad_fn)
  want = _run(plain, params, grad_fn)
  _assert_trees_close(got[0], want[0], rtol=1e-5, atol=1e-6)
  assert set(got[1].hyperparams) >= {"learning_rate", "momentum", "l1"}
  # Changing an injected value changes the step, inside jit.
  state = injected.init(params)
  state.hyperparams["learning_rate"] = jnp.asarray(0.25)
  grads, xbar = grad_fn(params)
  halved, _ = jax.jit(injected.update)(grads, state, params, layer_inputs=xbar)
  _assert_trees_close(
    halved, jax.tree.map(lambda u: 0.5 * u, want[2][0]), rtol=1e-5, atol=1e-7
  )
  # A schedule for the learning rate.
  scheduled = optax.inject_hyperparams(rls.rls)(
    learning_rate=optax.linear_schedule(1.0, 0.0, 10)
  )
  _run(scheduled, params, grad_fn, steps=2)


def test_multi_transform_hybrid_rls_hidden_adam_output():
  params, grad_fn = _problem()
  labels = {"Dense_0": "rls", "Dense_1": "adam"}
  hybrid = optax.chain(
    optax.clip_by_global_norm(5.0),
    optax.multi_transform(
      {"rls": rls.rls(momentum=0.5, l1=1e-3), "adam": optax.adam(1e-2)}, labels
    ),
  )
  _, state, updates = _run(hybrid, params, grad_fn, steps=3)
  # Only the hidden layer has a P; the output layer's is never built.
  rls_state = state[1].inner_states["rls"].inner_state[0].rls
  assert set(rls_state.inverse_correlation) == {"Dense_0"}

  # Reference: the same two optimisers run separately on their layers.
  ref_rls = rls.rls(momentum=0.5, l1=1e-3)
  ref_adam = optax.adam(1e-2)
  update_rls, update_adam = jax.jit(ref_rls.update), jax.jit(ref_adam.update)
  clip = jax.jit(lambda g: optax.clip_by_global_norm(5.0).update(g, None)[0])
  p = params
  s_rls = ref_rls.init({"Dense_0": p["Dense_0"]})
  s_adam = ref_adam.init(p["Dense_1"])
  for step in range(3):
    grads, xbar = grad_fn(p)
    grads = clip(grads)
    u_rls, s_rls = update_rls(
      {"Dense_0": grads["Dense_0"]},
      s_rls,
      {"Dense_0": p["Dense_0"]},
      layer_inputs={"Dense_0": xbar["Dense_0"]},
    )
    u_adam, s_adam = update_adam(grads["Dense_1"], s_adam, p["Dense_1"])
    expected = {"Dense_0": u_rls["Dense_0"], "Dense_1": u_adam}
    _assert_trees_close(updates[step], expected, rtol=1e-5, atol=1e-7)
    p = optax.apply_updates(p, expected)


def test_chain_after_clip_by_global_norm_forwards_layer_inputs():
  params, grad_fn = _problem()
  clip = 0.05  # small enough to be active
  chained = optax.chain(optax.clip_by_global_norm(clip), rls.rls())
  grads, xbar = grad_fn(params)
  assert optax.global_norm(grads) > clip
  got, _ = jax.jit(chained.update)(
    grads, chained.init(params), params, layer_inputs=xbar
  )
  clipped, _ = jax.jit(optax.clip_by_global_norm(clip).update)(grads, None)
  plain = rls.rls()
  want, _ = jax.jit(plain.update)(
    clipped, plain.init(params), params, layer_inputs=xbar
  )
  _assert_trees_close(got, want)


@pytest.mark.parametrize(
  "dtype,p_dtype", [(jnp.float32, jnp.float32), (jnp.bfloat16, jnp.float32)]
)
def test_dtypes_preserved_and_state_stable(dtype, p_dtype):
  params, grad_fn = _problem(dtype)
  tx = optax.chain(
    optax.clip_by_global_norm(5.0), rls.rls(momentum=0.5, l1=1e-5)
  )
  state0 = tx.init(params)
  new_params, state, updates = _run(tx, params, grad_fn, steps=3)
  for u in updates:
    assert jax.tree.map(lambda a: a.dtype, u) == jax.tree.map(
      lambda a: a.dtype, params
    )
  assert jax.tree.map(lambda a: a.dtype, new_params) == jax.tree.map(
    lambda a: a.dtype, params
  )
  shapes_dtypes = lambda t: jax.tree.map(lambda a: (a.shape, a.dtype), t)
  assert jax.tree.structure(state) == jax.tree.structure(state0)
  assert shapes_dtypes(state) == shapes_dtypes(state0)
  p_matrices = state[1][0].rls.inverse_correlation
  assert {p.dtype for p in jax.tree.leaves(p_matrices)} == {jnp.dtype(p_dtype)}
  assert all(
    np.all(np.isfinite(np.asarray(a, np.float32)))
    for a in jax.tree.leaves(new_params)
  )


def test_float64(x64):
  params, grad_fn = _problem(jnp.float64)
  new_params, state, updates = _run(rls.rls(momentum=0.5), params, grad_fn)
  assert all(a.dtype == jnp.float64 for a in jax.tree.leaves(updates))
  assert all(a.dtype == jnp.float64 for a in jax.tree.leaves(state))


def test_vmap_over_independent_optimisers():
  seeds = range(3)
  problems = [_problem(seed=s) for s in seeds]
  tx = rls.rls(momentum=0.5)
  stacked = lambda trees: jax.tree.map(lambda *a: jnp.stack(a), *trees)
  params = stacked([p for p, _ in problems])
  grads_and_inputs = [g(p) for p, g in problems]
  grads = stacked([g for g, _ in grads_and_inputs])
  xbars = stacked([x for _, x in grads_and_inputs])
  states = jax.jit(jax.vmap(tx.init))(params)
  updates, _ = jax.jit(
    jax.vmap(lambda g, s, p, x: tx.update(g, s, p, layer_inputs=x))
  )(grads, states, params, xbars)
  update = jax.jit(tx.update)
  for i, (p, _) in enumerate(problems):
    want, _ = update(
      grads_and_inputs[i][0], tx.init(p), p, layer_inputs=grads_and_inputs[i][1]
    )
    _assert_trees_close(
      jax.tree.map(lambda a: a[i], updates), want, rtol=1e-5, atol=1e-7
    )
