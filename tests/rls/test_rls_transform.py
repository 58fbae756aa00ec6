"""rls.scale_by_rls / rls.rls: exactness against closed forms, and bad input.

Exactness. For one dense layer with the MSE loss ``J = 1/(2M) ||XΘ - Z*||²``
(eq. 57), the update is ``Θ_s = Θ_{s-1} - (η/h) P_{s-1} X̃ᵀ(XΘ - Z*)/M``.
With batch size M = 1 and ``η = k`` (``k = 1`` is the plain case), induction on
``A_s = λ A_{s-1} + k x xᵀ``, ``B_s = λ B_{s-1} + k x z*ᵀ`` (``A_0 = P_0^{-1}``,
``B_0 = P_0^{-1} Θ_0``) and ``P_{s-1} x / h = P_s x`` (Sherman-Morrison) shows
that the iterates are exactly
``Θ_s = A_s^{-1} B_s``, the minimiser of
``k Σ_i λ^{s-i} ||z*_i - Θᵀ x_i||² + λ^s tr((Θ-Θ_0)ᵀ P_0^{-1} (Θ-Θ_0))``,
with ``x_i = [input_i; 1]`` and the learning rate 1.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from rls_problems import init_variables
from rls_problems import mse_with_layer_inputs

import rls


def _dense_setup(in_features, out_features, dtype, seed=0):
  model = nn.Dense(out_features, param_dtype=dtype)
  params = init_variables(model, jnp.zeros((1, in_features), dtype), seed=seed)[
    "params"
  ]
  return model, params


def _theta(params):
  return np.concatenate(
    [np.asarray(params["kernel"]), np.asarray(params["bias"])[None]], axis=0
  )


@pytest.mark.parametrize(
  "forgetting_factor,ratio", [(1.0, 1.0), (0.99, 1.0), (0.99, 0.1)]
)
def test_iterates_equal_weighted_regularised_least_squares(
  x64, forgetting_factor, ratio
):
  in_features, out_features, num_steps, init_scale = 3, 2, 50, 0.5
  model, params = _dense_setup(in_features, out_features, jnp.float64)
  rng = np.random.default_rng(0)
  inputs = rng.normal(size=(num_steps, 1, in_features))
  targets = (
    inputs @ rng.normal(size=(in_features, out_features))
    + 0.3
    + 0.5 * rng.normal(size=(num_steps, 1, out_features))
  )
  # η = k makes the recursion exact least squares (see module docstring).
  tx = rls.rls(
    forgetting_factor=forgetting_factor,
    ratio=ratio,
    gradient_scale=ratio,
    init_scale=init_scale,
    clip_norm=None,  # the bare recursion
  )
  state = tx.init(params)
  theta0 = _theta(params)
  grad_fn = jax.jit(jax.grad(mse_with_layer_inputs(model), has_aux=True))
  update = jax.jit(tx.update)
  for x, z in zip(inputs, targets):
    grads, xbar = grad_fn(params, jnp.asarray(x), jnp.asarray(z))
    updates, state = update(grads, state, params, layer_inputs=xbar)
    params = optax.apply_updates(params, updates)

  lam, s = forgetting_factor, num_steps
  augmented = np.concatenate([inputs[:, 0], np.ones((s, 1))], axis=1)
  weights = ratio * lam ** (s - 1 - np.arange(s))
  p0_inverse = np.eye(in_features + 1) / init_scale
  a = lam**s * p0_inverse + (augmented.T * weights) @ augmented
  b = lam**s * p0_inverse @ theta0 + (augmented.T * weights) @ targets[:, 0]
  expected = np.linalg.solve(a, b)
  got = _theta(params)
  assert got.dtype == np.float64
  relative_error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
  assert relative_error < 1e-8, relative_error
  # The state tracks the inverse of the same weighted autocorrelation.
  # A lone nn.Dense has params {'kernel', 'bias'} at the root: path ().
  p = np.asarray(state[0].rls.inverse_correlation)
  np.testing.assert_allclose(p, np.linalg.inv(a), rtol=1e-9, atol=1e-12)


def test_first_step_is_not_plain_gradient_descent(x64):
  """Guards the test above against a vacuous pass: P0 = I differs from SGD."""
  model, params = _dense_setup(3, 1, jnp.float64)
  x = jnp.asarray([[1.0, 2.0, -1.0]])
  z = jnp.asarray([[0.5]])
  grads, xbar = jax.grad(mse_with_layer_inputs(model), has_aux=True)(
    params, x, z
  )
  tx = rls.rls(ratio=1.0, clip_norm=None)
  updates, _ = tx.update(grads, tx.init(params), params, layer_inputs=xbar)
  # h = λ + k xᵀ P0 x = 1 + (1 + 4 + 1 + 1) = 8, so the step is -grad / 8.
  np.testing.assert_allclose(updates["kernel"], -grads["kernel"] / 8.0)
  np.testing.assert_allclose(updates["bias"], -grads["bias"] / 8.0)


def test_batched_inverse_correlation_matches_closed_form(x64):
  """P_s = inv(λ^s P0^{-1} + Σ λ^{s-i} k T x̄_i x̄_iᵀ) for dense and LSTM."""

  class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
      h = rls.LSTM(3, param_dtype=jnp.float64)(x)
      return nn.Dense(2, param_dtype=jnp.float64)(h[:, -1])

  lam, ratio, init_scale, num_steps, batch, time = 0.95, 0.3, 2.0, 12, 8, 5
  model = Model()
  rng = np.random.default_rng(1)
  data = rng.normal(size=(num_steps, batch, time, 4))
  params = init_variables(model, jnp.asarray(data[0]))["params"]
  tx = rls.scale_by_rls(
    forgetting_factor=lam, ratio=ratio, init_scale=init_scale
  )
  state = tx.init(params)
  capture = jax.jit(
    lambda p, x: rls.layer_inputs(model.apply, {"params": p}, x)[1]
  )
  update = jax.jit(tx.update)
  grads = jax.tree.map(jnp.ones_like, params)
  history = {"Dense_0": [], "input": [], "recurrent": []}
  for x in data:
    xbar = capture(params, jnp.asarray(x))
    _, state = update(grads, state, params, layer_inputs=xbar)
    history["Dense_0"].append(xbar["Dense_0"])
    history["input"].append(xbar["LSTM_0"]["input"])
    history["recurrent"].append(xbar["LSTM_0"]["recurrent"])

  def closed_form(entries):
    size = entries[0].mean.shape[0] + 1
    a = lam**num_steps * np.eye(size) / init_scale
    for i, entry in enumerate(entries, start=1):
      x = np.append(np.asarray(entry.mean), 1.0)
      a += lam ** (num_steps - i) * ratio * float(entry.steps) * np.outer(x, x)
    return np.linalg.inv(a)

  assert int(history["input"][0].steps) == time
  assert int(history["Dense_0"][0].steps) == 1
  p = state.inverse_correlation
  for got, entries in [
    (p["Dense_0"], history["Dense_0"]),
    (p["LSTM_0"]["input"], history["input"]),
    (p["LSTM_0"]["recurrent"], history["recurrent"]),
  ]:
    np.testing.assert_allclose(
      got, closed_form(entries), rtol=1e-10, atol=1e-13
    )


def test_per_layer_gradient_scale():
  model, params = _dense_setup(4, 3, jnp.float32)
  params = {"Dense_0": params, "Dense_1": params}
  grads = jax.tree.map(jnp.ones_like, params)
  xbar = {"Dense_0": jnp.ones(4), "Dense_1": jnp.ones(4)}
  plain = rls.scale_by_rls()
  scaled = rls.scale_by_rls(gradient_scale={"Dense_0": 2.0, "Dense_1": 0.5})
  ref, _ = plain.update(grads, plain.init(params), layer_inputs=xbar)
  out, _ = scaled.update(grads, scaled.init(params), layer_inputs=xbar)
  np.testing.assert_allclose(
    out["Dense_0"]["kernel"], 2.0 * ref["Dense_0"]["kernel"], rtol=1e-6
  )
  np.testing.assert_allclose(
    out["Dense_1"]["bias"], 0.5 * ref["Dense_1"]["bias"], rtol=1e-6
  )
  with pytest.raises(ValueError, match="gradient_scale.*'Dense_1'"):
    bad = rls.scale_by_rls(gradient_scale={"Dense_0": 1.0})
    bad.update(grads, bad.init(params), layer_inputs=xbar)


@pytest.mark.parametrize("forgetting_factor", [1.0, 0.97])
def test_square_root_form_equals_full_form(x64, forgetting_factor):
  """``square_root=True`` runs the same recursion: over 20 steps with
  momentum, L1 and a recurrent-style ``T`` the params and ``P = S Sᵀ`` equal
  the full form's in float64."""
  _, layer = _dense_setup(5, 3, jnp.float64)
  params = {"Dense_0": layer, "Dense_1": {"kernel": layer["kernel"][:4]}}
  rng = np.random.default_rng(1)
  hyper = dict(
    forgetting_factor=forgetting_factor,
    ratio=0.3,
    gradient_scale={"Dense_0": 0.7, "Dense_1": 1.0},
    init_scale=2.0,
    momentum=0.5,
    l1=1e-3,
  )
  full, root = rls.rls(**hyper), rls.rls(**hyper, square_root=True)
  states = [full.init(params), root.init(params)]
  assert isinstance(states[1][0].rls, rls.ScaleByRLSSquareRootState)
  params_of = [params, params]
  for _ in range(20):
    xbar = {
      "Dense_0": rls.LayerInput(
        jnp.asarray(rng.normal(size=5) + 1.0), jnp.asarray(7)
      ),
      "Dense_1": jnp.asarray(rng.normal(size=4)),
    }
    grads = jax.tree.map(
      lambda q: jnp.asarray(rng.normal(size=q.shape)), params
    )
    for i, tx in enumerate((full, root)):
      updates, states[i] = tx.update(
        grads, states[i], params_of[i], layer_inputs=xbar
      )
      params_of[i] = optax.apply_updates(params_of[i], updates)
  for a, b in zip(jax.tree.leaves(params_of[0]), jax.tree.leaves(params_of[1])):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
  p_full = rls.inverse_correlation(states[0][0].rls)
  p_root = rls.inverse_correlation(states[1][0].rls)
  for a, b in zip(jax.tree.leaves(p_full), jax.tree.leaves(p_root)):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_square_root_form_stays_psd_where_the_full_form_does_not():
  """One float32 stream of 1000 steps with a large common offset (the bias
  column nearly collinear) and ``k x̄ᵀ P_0 x̄`` ~ 5e8: along the way the full
  form's P acquires an eigenvalue of about -0.1 of its largest; ``S Sᵀ``
  stays PSD at every step."""
  params = {"kernel": jnp.zeros((6, 2)), "bias": jnp.zeros(2)}
  rng = np.random.default_rng(0)
  inputs = jnp.asarray(
    (rng.normal(size=(1000, 6)) * 1e-2 + 3.0) * 1e4, jnp.float32
  )
  grads = {"kernel": jnp.ones((6, 2)), "bias": jnp.ones(2)}

  def smallest_relative_eigenvalue(square_root):
    tx = rls.scale_by_rls(ratio=0.1, square_root=square_root)

    def step(state, x):
      _, state = tx.update(grads, state, layer_inputs=x)
      return state, state[0]

    _, history = jax.lax.scan(step, tx.init(params), inputs)
    ps = np.asarray(history, np.float64)
    transposed = np.swapaxes(ps, 1, 2)
    ps = ps @ transposed if square_root else (ps + transposed) / 2
    eigenvalues = np.linalg.eigvalsh(ps)
    return np.min(eigenvalues[:, 0] / np.abs(eigenvalues).max(axis=1))

  assert smallest_relative_eigenvalue(False) < -1e-3
  assert smallest_relative_eigenvalue(True) >= -1e-12


def test_gradient_scale_naming_no_layer_is_an_error():
  _, layer = _dense_setup(4, 3, jnp.float32)
  params = {"Dense_0": layer, "Dense_1": layer}
  with pytest.raises(ValueError, match="'Dense_2'.*not a layer"):
    rls.scale_by_rls(
      gradient_scale={"Dense_0": 1.0, "Dense_1": 1.0, "Dense_2": 3.0}
    ).init(params)


# ---------------------------------------------------------------- bad input


def _two_layer():
  _, layer = _dense_setup(4, 3, jnp.float32)
  params = {"Dense_0": layer, "Dense_1": layer}
  grads = jax.tree.map(jnp.ones_like, params)
  xbar = {
    "Dense_0": rls.LayerInput(jnp.ones(4), jnp.asarray(1)),
    "Dense_1": rls.LayerInput(jnp.ones(4), jnp.asarray(1)),
  }
  return params, grads, xbar


def test_missing_layer_inputs_argument():
  params, grads, _ = _two_layer()
  tx = rls.rls()
  with pytest.raises(ValueError, match="layer_inputs="):
    tx.update(grads, tx.init(params), params)


def test_layer_inputs_with_unknown_layer():
  params, grads, xbar = _two_layer()
  xbar["Conv_7"] = jnp.ones(4)
  tx = rls.rls()
  with pytest.raises(ValueError, match=r"does not match the params.*Conv_7"):
    tx.update(grads, tx.init(params), params, layer_inputs=xbar)


def test_layer_inputs_missing_a_layer():
  params, grads, xbar = _two_layer()
  del xbar["Dense_1"]
  tx = rls.rls()
  with pytest.raises(ValueError, match=r"'Dense_1'.*no entry"):
    tx.update(grads, tx.init(params), params, layer_inputs=xbar)


def test_layer_inputs_wrong_size():
  params, grads, xbar = _two_layer()
  xbar["Dense_0"] = jnp.ones(5)  # e.g. with the bias 1 already appended.
  tx = rls.rls()
  with pytest.raises(
    ValueError,
    match=r"layer_inputs\['Dense_0'\] has shape \(5,\); "
    r"expected \(4,\)",
  ):
    jax.jit(lambda g, s, p: tx.update(g, s, p, layer_inputs=xbar))(
      grads, tx.init(params), params
    )


def test_layer_inputs_not_a_tree():
  params, grads, _ = _two_layer()
  tx = rls.rls()
  with pytest.raises(ValueError, match="nested dict"):
    tx.update(
      grads,
      tx.init(params),
      params,
      layer_inputs={"Dense_0": "oops", "Dense_1": jnp.ones(4)},
    )


@pytest.mark.parametrize(
  "kwargs,name",
  [
    ({"forgetting_factor": 0.0}, "forgetting_factor"),
    ({"forgetting_factor": -0.5}, "forgetting_factor"),
    ({"forgetting_factor": 1.5}, "forgetting_factor"),
    ({"ratio": 0.0}, "ratio"),
    ({"ratio": -1.0}, "ratio"),
    ({"init_scale": 0.0}, "init_scale"),
    ({"gradient_scale": -1.0}, "gradient_scale"),
    ({"gradient_scale": {"Dense_0": 0.0}}, r"gradient_scale\['Dense_0'\]"),
    ({"momentum": 1.0}, "momentum"),
    ({"l1": -1e-5}, "l1"),
  ],
)
def test_bad_hyperparameters(kwargs, name):
  with pytest.raises(ValueError, match=name):
    rls.rls(**kwargs)


def test_parameters_without_layer_input_are_named():
  params = {
    "Embed_0": {"embedding": jnp.ones((10, 4))},
    "Dense_0": {"kernel": jnp.ones((4, 3)), "bias": jnp.ones(3)},
    "LayerNorm_0": {"scale": jnp.ones(3), "bias": jnp.ones(3)},
  }
  with pytest.raises(
    ValueError, match=r"'Embed_0/embedding'.*'LayerNorm_0/scale'"
  ):
    rls.rls().init(params)
  # Explicit opt-in: raw gradients pass through (times -learning_rate;
  # unclipped, to read them back).
  tx = rls.rls(learning_rate=0.1, passthrough=True, clip_norm=None)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(
    grads, tx.init(params), params, layer_inputs={"Dense_0": jnp.ones(4)}
  )
  np.testing.assert_allclose(updates["Embed_0"]["embedding"], -0.1)
  np.testing.assert_allclose(updates["LayerNorm_0"]["scale"], -0.1)
  assert not np.allclose(updates["Dense_0"]["kernel"], -0.1)


def test_l1_needs_params():
  params, grads, xbar = _two_layer()
  tx = rls.rls(l1=1e-5)
  with pytest.raises(ValueError, match="needs params"):
    tx.update(grads, tx.init(params), layer_inputs=xbar)


def test_kernel_and_bias_split_between_optimisers():
  params, grads, xbar = _two_layer()
  labels = {
    "Dense_0": {"kernel": "rls", "bias": "sgd"},
    "Dense_1": {"kernel": "rls", "bias": "rls"},
  }
  tx = optax.multi_transform({"rls": rls.rls(), "sgd": optax.sgd(0.1)}, labels)
  with pytest.raises(ValueError, match="'Dense_0'.*same transformation"):
    tx.init(params)
