"""rls.second_moment: the rank-S Woodbury RLS against the paper's rank-one
recursion and a direct inverse, P's conditioning in float32, the capture of
input rows and patches, errors, and optax composition."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from rls_problems import capture
from rls_problems import init_variables

import rls
from rls import conventional
from rls import input_samples
from rls import second_moment


def _dense_params(fan_in, out, dtype, seed=0):
  rng = np.random.default_rng(seed)
  return {
    "kernel": jnp.asarray(rng.normal(size=(fan_in, out)), dtype),
    "bias": jnp.asarray(rng.normal(size=out), dtype),
  }


@pytest.mark.parametrize("forgetting_factor,steps", [(1.0, 1), (0.9, 3)])
def test_one_row_reduces_to_the_rank_one_rls(x64, forgetting_factor, steps):
  """With ``X = x̄ᵀ`` and ``c = k`` direction and ``P`` are
  `rls_layer_step`'s, step after step, for any gradient."""
  rng = np.random.default_rng(0)
  k, eta, n = 0.3, 0.7, 6
  p_rank_one = p_woodbury = 1.5 * jnp.eye(n, dtype=jnp.float64)
  for _ in range(5):
    x = jnp.asarray(rng.normal(size=n) + 0.5)
    grad = jnp.asarray(rng.normal(size=(n, 3)))
    t = jnp.asarray(steps, jnp.float64)
    d_ref, p_rank_one = conventional.rls_layer_step(
      p_rank_one, x, t, grad, forgetting_factor, k, eta
    )
    d, p_woodbury = second_moment.second_moment_layer_step(
      p_woodbury, x[None], t, grad, forgetting_factor, k, eta
    )
    np.testing.assert_allclose(d, d_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(p_woodbury, p_rank_one, rtol=1e-12, atol=1e-14)


def test_one_row_transform_equals_scale_by_rls(x64):
  """The same through the optax transforms, bias column appended."""
  params = _dense_params(4, 3, jnp.float64)
  rng = np.random.default_rng(1)
  ours = second_moment.scale_by_rls_second_moment(
    forgetting_factor=0.95, ratio=0.1, gradient_scale=0.5, init_scale=2.0
  )
  paper = rls.scale_by_rls(
    forgetting_factor=0.95, ratio=0.1, gradient_scale=0.5, init_scale=2.0
  )
  states = [ours.init(params), paper.init(params)]
  for _ in range(4):
    xbar = jnp.asarray(rng.normal(size=4))
    grads = jax.tree.map(
      lambda q: jnp.asarray(rng.normal(size=q.shape)), params
    )
    d_ours, states[0] = ours.update(grads, states[0], layer_inputs=xbar[None])
    d_paper, states[1] = paper.update(grads, states[1], layer_inputs=xbar)
    for a, b in zip(jax.tree.leaves(d_ours), jax.tree.leaves(d_paper)):
      np.testing.assert_allclose(a, b, rtol=1e-12)
  np.testing.assert_allclose(
    states[0].inverse_correlation,
    rls.inverse_correlation(states[1]),
    rtol=1e-12,
  )


@pytest.mark.parametrize("direction", ["eq63", "updated"])
def test_woodbury_equals_direct_inverse_of_accumulated_second_moment(
  x64, direction
):
  """``P_s = (λ^s P_0⁻¹ + Σ_i λ^{s-i} (c/S) X_iᵀ X_i)⁻¹`` and the direction
  ``(η/h) P_{s-1} ∇`` with ``h = λ + c tr(P_{s-1} X_sᵀ X_s / S)``, or
  ``η P_s ∇``."""
  lam, c, eta, p0, rows, n = 0.97, 0.4, 0.8, 3.0, 8, 5
  params = _dense_params(n, 2, jnp.float64)
  tx = second_moment.scale_by_rls_second_moment(
    forgetting_factor=lam,
    ratio=c,
    gradient_scale=eta,
    init_scale=p0,
    direction=direction,
  )
  state = tx.init(params)
  rng = np.random.default_rng(2)
  correlation = np.eye(n + 1) / p0
  for _ in range(6):
    x = rng.normal(size=(rows, n)) * rng.uniform(0.1, 3.0, size=n) + 1.0
    grads = jax.tree.map(
      lambda q: jnp.asarray(rng.normal(size=q.shape)), params
    )
    augmented = np.concatenate([x, np.ones((rows, 1))], 1)
    p_old = np.linalg.inv(correlation)
    h = lam + c * np.trace(p_old @ augmented.T @ augmented) / rows
    grad = np.concatenate([grads["kernel"], grads["bias"][None]])
    correlation = lam * correlation + c / rows * augmented.T @ augmented
    expected = (
      eta * np.linalg.inv(correlation) @ grad
      if direction == "updated"
      else eta / h * p_old @ grad
    )
    updates, state = tx.update(grads, state, layer_inputs=jnp.asarray(x))
    np.testing.assert_allclose(updates["kernel"], expected[:n], rtol=1e-9)
    np.testing.assert_allclose(updates["bias"], expected[n], rtol=1e-9)
    np.testing.assert_allclose(
      state.inverse_correlation,
      np.linalg.inv(correlation),
      rtol=1e-9,
      atol=1e-12,
    )


def test_p_stays_symmetric_psd_in_float32_on_an_ill_conditioned_stream():
  """Inputs with a large common offset (the bias column nearly collinear)
  and scales spanning six decades, 300 steps of 32 rows, λ = 1: ``P`` stays
  exactly symmetric and its smallest eigenvalue is no less than float32
  rounding of its largest."""
  n = 12
  params = {"kernel": jnp.zeros((n, 2)), "bias": jnp.zeros(2)}
  rng = np.random.default_rng(0)
  scales = np.logspace(-3, 3, n)
  inputs = jnp.asarray(
    rng.normal(size=(300, 32, n)) * scales + 30.0, jnp.float32
  )
  grads = {"kernel": jnp.ones((n, 2)), "bias": jnp.ones(2)}
  tx = second_moment.scale_by_rls_second_moment(ratio=1.0)

  def step(state, x):
    _, state = tx.update(grads, state, layer_inputs=x)
    return state, None

  state, _ = jax.jit(lambda s: jax.lax.scan(step, s, inputs))(tx.init(params))
  p = np.asarray(state.inverse_correlation)
  assert p.dtype == np.float32
  np.testing.assert_array_equal(p, p.T)
  eigenvalues = np.linalg.eigvalsh(p.astype(np.float64))
  assert np.all(np.isfinite(eigenvalues))
  assert eigenvalues[0] >= -1e-6 * eigenvalues[-1]


# ------------------------------------------------------------------ capture


class _Net(nn.Module):
  conv_impl: str = "flax"

  @nn.compact
  def __call__(self, x):
    if self.conv_impl == "flax":
      x = nn.Conv(
        4,
        (3, 3),
        strides=(2, 1),
        kernel_dilation=(1, 2),
        padding="SAME",
        name="conv",
      )(x)
    x = nn.relu(x).reshape(x.shape[0], -1)
    return nn.Dense(2, name="out")(x)


def test_capture_records_dense_rows_and_conv_patches():
  """Dense: every input row. Conv: with enough samples every patch, whose
  mean is the captured ``x̄`` (eq. 72), in the kernel's row order."""
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 6, 5, 2))
  model = _Net()
  variables = init_variables(model, x)
  outputs, entries = capture(model, variables, x, samples=10_000)
  conv, dense = entries["conv"], entries["out"]
  assert isinstance(conv, input_samples.LayerInputSamples)
  assert conv.samples.shape == (3 * 3 * 5, 18)
  np.testing.assert_allclose(
    conv.samples.mean(0), conv.mean, rtol=1e-5, atol=1e-6
  )
  # The conv's outputs are its patches times the flattened kernel.
  kernel = variables["params"]["conv"]["kernel"].reshape(18, 4)
  bias = variables["params"]["conv"]["bias"]
  conv_alone = nn.Conv(
    4, (3, 3), strides=(2, 1), kernel_dilation=(1, 2), padding="SAME"
  )
  hidden = conv_alone.apply({"params": variables["params"]["conv"]}, x)
  np.testing.assert_allclose(
    conv.samples @ kernel + bias, hidden.reshape(-1, 4), rtol=1e-4, atol=1e-5
  )
  assert dense.samples.shape == (3, 60)
  np.testing.assert_allclose(
    dense.samples.mean(0), dense.mean, rtol=1e-5, atol=1e-6
  )
  assert outputs.shape == (3, 2)
  _, few = capture(model, variables, x, samples=7)
  assert few["conv"].samples.shape == (7, 18)
  assert few["out"].samples.shape == (3, 60)
  _, means_only = capture(model, variables, x)
  assert isinstance(means_only["conv"], rls.LayerInput)


def test_patch_conv_records_its_patches():
  """`experiments.classifier.models.PatchConv3x3` records sampled patches."""
  from experiments.classifier import models  # pylint: disable=g-import-not-at-top

  x = jax.random.normal(jax.random.PRNGKey(1), (2, 4, 4, 3))
  model = models.PatchConv3x3(5)
  variables = init_variables(model, x)
  outputs, entries = capture(model, variables, x, samples=32)
  assert entries.samples.shape == (32, 27)
  kernel = variables["params"]["kernel"].reshape(27, 5)
  flat_outputs = outputs.reshape(-1, 5)
  indices = input_samples.sample_indices(flat_outputs.shape[0], 32)
  np.testing.assert_allclose(
    entries.samples @ kernel, flat_outputs[indices], rtol=1e-4, atol=1e-5
  )


def test_sample_indices_cover_every_image_position():
  """No aliasing with the image grid: 256 of 128 x 32 x 32 positions hit
  many distinct pixels and examples."""
  picks = np.asarray(input_samples.sample_indices(128 * 1024, 256))
  assert len(set(picks % 1024)) > 200 and len(set(picks // 1024)) > 100


# ------------------------------------------------------------------- errors


def test_mean_only_entries_name_the_layer():
  params = {"lstm": {"recurrent": _dense_params(3, 8, jnp.float32)}}
  grads = jax.tree.map(jnp.ones_like, params)
  tx = second_moment.scale_by_rls_second_moment()
  entry = rls.LayerInput(jnp.ones(3), jnp.asarray(5))
  with pytest.raises(ValueError, match="'lstm/recurrent'.*no sampled input"):
    tx.update(
      grads, tx.init(params), layer_inputs={"lstm": {"recurrent": entry}}
    )
  with pytest.raises(ValueError, match=r"'lstm/recurrent'.*\(S, 3\)"):
    tx.update(
      grads,
      tx.init(params),
      layer_inputs={"lstm": {"recurrent": jnp.ones((4, 5))}},
    )


def test_recurrent_layer_from_capture_is_an_error():
  model = rls.LSTM(4)
  x = jnp.ones((2, 3, 2))
  variables = init_variables(model, x)
  _, entries = capture(model, variables, x, samples=8)
  tx = second_moment.scale_by_rls_second_moment()
  params = variables["params"]
  with pytest.raises(ValueError, match="'input'.*Recurrent layers"):
    tx.update(params, tx.init(params), layer_inputs=entries)


def test_grouped_and_circular_convs_are_errors():
  x = jnp.ones((1, 4, 4, 4))
  grouped = nn.Conv(4, (3, 3), feature_group_count=2)
  variables = init_variables(grouped, x)
  _, entries = capture(grouped, variables, x, samples=8)
  assert entries == {}  # No entry: the transform then names the layer.
  tx = second_moment.scale_by_rls_second_moment()
  with pytest.raises(ValueError, match="'<root>'"):
    tx.update(
      variables["params"], tx.init(variables["params"]), layer_inputs=entries
    )
  circular = nn.Conv(4, (3, 3), padding="CIRCULAR")
  variables = init_variables(circular, x)
  with pytest.raises(ValueError, match="padding='CIRCULAR'"):
    capture(circular, variables, x, samples=8)


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(forgetting_factor=1.5), "forgetting_factor"),
    (dict(ratio=0.0), "ratio"),
    (dict(init_scale=-1.0), "init_scale"),
    (dict(gradient_scale={"a": -1.0}), r"gradient_scale\['a'\]"),
    (dict(direction="new"), "direction"),
  ],
)
def test_bad_hyperparameters(kwargs, match):
  with pytest.raises(ValueError, match=match):
    second_moment.scale_by_rls_second_moment(**kwargs)


def test_bad_samples_argument():
  model = nn.Dense(2)
  variables = init_variables(model, jnp.ones((1, 3)))
  with pytest.raises(ValueError, match="samples must be an int"):
    rls.layer_inputs(model.apply, variables, jnp.ones((1, 3)), samples=-1)


# -------------------------------------------------------------------- optax


class _MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(6, name="hidden")(x))
    return nn.Dense(2, name="output")(x)


def test_multi_transform_and_clipping_like_rls_rls():
  """Second-moment RLS on the hidden layer, Adam on the output, after
  clipping, jitted; the masked output layer gets no P and its Adam update
  is Adam's."""
  model = _MLP()
  x = jax.random.normal(jax.random.PRNGKey(0), (16, 3))
  y = jax.random.normal(jax.random.PRNGKey(1), (16, 2))
  params = init_variables(model, x)["params"]
  labels = {"hidden": "rls", "output": "adam"}
  labels = {
    name: jax.tree.map(lambda _, n=name: labels[n], sub)
    for name, sub in params.items()
  }
  tx = optax.chain(
    optax.clip_by_global_norm(1.0),
    optax.multi_transform(
      {
        "rls": optax.chain(
          second_moment.scale_by_rls_second_moment(ratio=0.5), optax.scale(-1.0)
        ),
        "adam": optax.adam(1e-2),
      },
      labels,
    ),
  )

  def loss_fn(params):
    outputs, inputs = rls.layer_inputs(
      model.apply, {"params": params}, x, samples=64
    )
    return 0.5 * jnp.mean(jnp.sum((outputs - y) ** 2, -1)), inputs

  @jax.jit
  def step(params, state):
    (loss, inputs), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    updates, state = tx.update(grads, state, params, layer_inputs=inputs)
    return optax.apply_updates(params, updates), state, loss

  state = tx.init(params)
  sm_state = state[1].inner_states["rls"].inner_state[0]
  assert set(sm_state.inverse_correlation) == {"hidden"}
  losses = []
  for _ in range(30):
    params, state, loss = step(params, state)
    losses.append(float(loss))
  assert np.all(np.isfinite(losses)) and losses[-1] < 0.8 * losses[0]
  p = state[1].inner_states["rls"].inner_state[0].inverse_correlation
  assert p["hidden"].shape == (4, 4)


def test_scale_by_rls_routes_the_second_moment_option(x64):
  """`rls.rls(input_statistics='second_moment')` is the second-moment
  transform (with the paper's momentum and L1 around it)."""
  params = {"kernel": jnp.full((3, 2), 0.3), "bias": jnp.full(2, -0.2)}
  rows = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))
  grads = {"kernel": jnp.ones((3, 2)), "bias": jnp.ones(2)}
  entry = input_samples.LayerInputSamples(rows.mean(0), jnp.asarray(1), rows)
  routed = rls.rls(
    ratio=0.5, input_statistics="second_moment", momentum=0.5, l1=1e-3
  )
  updates, state = routed.update(
    grads, routed.init(params), params, layer_inputs=entry
  )
  direct = second_moment.scale_by_rls_second_moment(ratio=0.5)
  expected, direct_state = direct.update(
    grads, direct.init(params), layer_inputs=entry
  )
  signs = np.concatenate([np.ones((3, 2)), -np.ones((1, 2))])
  penalty = 1e-3 * np.asarray(direct_state.inverse_correlation) @ signs
  np.testing.assert_allclose(
    updates["kernel"], -(expected["kernel"] + penalty[:3]), rtol=1e-10
  )
  np.testing.assert_allclose(
    updates["bias"], -(expected["bias"] + penalty[3]), rtol=1e-10
  )
  assert isinstance(state[0].rls, second_moment.ScaleByRLSSecondMomentState)
  with pytest.raises(ValueError, match="square_root"):
    rls.scale_by_rls(input_statistics="second_moment", square_root=True)
  with pytest.raises(ValueError, match="input_statistics"):
    rls.scale_by_rls(input_statistics="covariance")
