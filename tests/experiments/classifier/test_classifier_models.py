"""The RLS paper's networks: captured layer inputs against hand computations,
and which optimiser updates which parameters.

* Mini-VGG: every conv layer's captured ``x̄`` equals the mean of its input's
  explicitly unfolded 3x3 'SAME' patches; the FC layers' equal the mean of
  their inputs (float64, narrow layers).
* Stacked LSTM: every ``x̄`` and ``T`` equals a NumPy re-implementation of the
  embedding and both LSTM layers (gate order i, g, f, o).
* The IMDB optimiser: the embedding's update is exactly Adam's, the LSTM's is
  exactly RLS's (eq. 63 with P0 = I), in `rls`, `rls_hybrid` and with +M+R.
"""

import functools

import flax.linen as nn
from helpers import load_config
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.classifier import models
from experiments.classifier import training
import rls

SMALL_VGG = dict(conv_features=(3, 4, "pool", 5, 4, "pool", 6), hidden_size=7)


def record_inputs(model, variables, x):
  """Each named submodule's call input, by intercepting `__call__` (jitted:
  one compilation instead of one per eager op)."""

  @jax.jit
  def run(variables, x):
    seen = {}

    def interceptor(next_fun, args, kwargs, context):
      if context.method_name == "__call__" and context.module.name:
        seen[context.module.name] = args[0]
      return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
      model.apply(variables, x)
    return seen

  return jax.tree.map(np.asarray, run(variables, x))


def init_float64(model, x, seed=0):
  """Random float64 params of `model` for input `x`: normal with standard
  deviation 1/sqrt(fan_in) for matrices, 0.1 for biases (drawn in NumPy:
  compiling Flax's initialisers costs seconds)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)["params"]
  rng = np.random.default_rng(seed)

  def draw(shape):
    scale = (
      1 / np.sqrt(np.prod(shape.shape[:-1])) if len(shape.shape) > 1 else 0.1
    )
    return jnp.asarray(scale * rng.normal(size=shape.shape), jnp.float64)

  return jax.tree.map(draw, shapes)


def same_3x3_patches(x):
  """(batch, h, w, c) -> (batch, h*w, 9c): zero-padded 3x3 windows, rows in
  the conv kernel's (kh, kw, c) order."""
  padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  b, h, w, c = x.shape
  out = np.empty((b, h, w, 3, 3, c))
  for i in range(3):
    for j in range(3):
      out[:, :, :, i, j] = padded[:, i : i + h, j : j + w]
  return out.reshape(b, h * w, 9 * c)


@pytest.mark.parametrize(
  "conv_impl,pool_after_conv5", [("patches", True), ("flax", False)]
)
def test_mini_vgg_capture_equals_explicit_patches(
  x64, conv_impl, pool_after_conv5
):
  model = models.MiniVGG(
    pool_after_conv5=pool_after_conv5, conv_impl=conv_impl, **SMALL_VGG
  )
  # 16x16 images (the net is size-agnostic) keep the float64 test fast.
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 16, 16, 3)))
  params = init_float64(model, x)
  outputs, xbar = jax.jit(functools.partial(rls.layer_inputs, model.apply))(
    {"params": params}, x
  )
  inputs = record_inputs(model, {"params": params}, x)
  assert set(xbar) == {f"conv{i}" for i in range(5)} | {"hidden", "output"}
  for i in range(5):
    layer_in = inputs[f"conv{i}"]
    patches = same_3x3_patches(layer_in)
    # The patches reproduce the conv's pre-activation, so their order is the
    # kernel's row order.
    kernel = np.asarray(params[f"conv{i}"]["kernel"]).reshape(
      9 * layer_in.shape[-1], -1
    )
    conv_out = patches @ kernel + np.asarray(params[f"conv{i}"]["bias"])
    next_in = inputs[f"conv{i + 1}"] if i < 4 else None
    if next_in is not None and next_in.shape[1] == layer_in.shape[1]:
      np.testing.assert_allclose(
        np.maximum(conv_out, 0),
        next_in.reshape(conv_out.shape),
        rtol=1e-9,
        atol=1e-12,
      )
    assert int(xbar[f"conv{i}"].steps) == 1
    np.testing.assert_allclose(
      xbar[f"conv{i}"].mean, patches.mean(axis=(0, 1)), rtol=1e-10, atol=1e-12
    )
  fc_in = inputs["hidden"]
  spatial = 2 if pool_after_conv5 else 4
  assert fc_in.shape == (2, spatial * spatial * 6)
  np.testing.assert_allclose(xbar["hidden"].mean, fc_in.mean(0), rtol=1e-10)
  np.testing.assert_allclose(
    xbar["output"].mean, inputs["output"].mean(0), rtol=1e-10
  )
  assert outputs.shape == (2, 10)


def test_mini_vgg_flat_kernel_is_the_same_function(x64):
  """`conv_impl='patches_flat_kernel'` stores ``(9 * in, out)`` kernels (what
  kfac-jax's matcher tags as repeated dense layers): the same outputs from
  the reshaped parameters, and the same initial weights."""
  x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 16, 16, 3)))
  model = models.MiniVGG(**SMALL_VGG)
  flat_model = model.clone(conv_impl="patches_flat_kernel")
  params = init_float64(model, x)
  flat = jax.tree.map(
    lambda p: p.reshape(-1, p.shape[-1]) if p.ndim == 4 else p, params
  )
  assert flat["conv1"]["kernel"].shape == (9 * 3, 4)
  np.testing.assert_allclose(
    flat_model.apply({"params": flat}, x),
    model.apply({"params": params}, x),
    rtol=1e-13,
  )
  key = jax.random.PRNGKey(3)
  np.testing.assert_array_equal(
    flat_model.init(key, x)["params"]["conv2"]["kernel"],
    model.init(key, x)["params"]["conv2"]["kernel"].reshape(-1, 5),
  )


def test_mini_vgg_bad_conv_impl_names_the_choices():
  with pytest.raises(ValueError, match="conv_impl='winograd'.*'patches_flat"):
    models.MiniVGG(conv_impl="winograd").init(
      jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3))
    )


def test_mini_vgg_default_fc_fan_in():
  shapes = jax.eval_shape(
    models.MiniVGG().init, jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3))
  )["params"]
  assert shapes["hidden"]["kernel"].shape == (4096, 1024)
  assert shapes["conv4"]["kernel"].shape == (3, 3, 128, 256)
  flat = jax.eval_shape(
    models.MiniVGG(pool_after_conv5=False).init,
    jax.random.PRNGKey(0),
    jnp.zeros((1, 32, 32, 3)),
  )
  assert flat["params"]["hidden"]["kernel"].shape == (16384, 1024)


def sigmoid(z):
  return 1 / (1 + np.exp(-z))


def numpy_lstm(x, layer):
  """Hidden states (b, T, n) and previous states h_0..h_{T-1}, by hand."""
  w, b = layer["input"]["kernel"], layer["input"]["bias"]
  v, c0 = layer["recurrent"]["kernel"], layer["recurrent"]["bias"]
  n = v.shape[0]
  h = np.zeros((x.shape[0], n))
  c = np.zeros_like(h)
  hs, previous = [], []
  for t in range(x.shape[1]):
    previous.append(h)
    z = x[:, t] @ w + b + h @ v + c0
    i, g, f, o = (z[:, k * n : (k + 1) * n] for k in range(4))
    c = sigmoid(i) * np.tanh(g) + sigmoid(f) * c
    h = sigmoid(o) * np.tanh(c)
    hs.append(h)
  return np.stack(hs, 1), np.stack(previous, 1)


def test_stacked_lstm_capture_equals_hand_computation(x64):
  model = models.SentimentLSTM(vocab_size=11, embed_dim=3, hidden_size=4)
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, 11, (2, 5)))
  params = init_float64(model, tokens)
  outputs, xbar = jax.jit(functools.partial(rls.layer_inputs, model.apply))(
    {"params": params}, tokens
  )
  p = jax.tree.map(np.asarray, params)
  embedded = p["embedding"]["embedding"][np.asarray(tokens)]
  h1, prev1 = numpy_lstm(embedded, p["lstm0"])
  h2, prev2 = numpy_lstm(h1, p["lstm1"])
  logits = h2[:, -1] @ p["output"]["kernel"] + p["output"]["bias"]
  np.testing.assert_allclose(outputs, logits, rtol=1e-10)
  assert set(xbar) == {"lstm0", "lstm1", "output"}  # No embedding entry.
  expected = {
    ("lstm0", "input"): embedded,
    ("lstm0", "recurrent"): prev1,
    ("lstm1", "input"): h1,
    ("lstm1", "recurrent"): prev2,
  }
  for (layer, part), values in expected.items():
    entry = xbar[layer][part]
    np.testing.assert_allclose(
      entry.mean, values.mean(axis=(0, 1)), rtol=1e-10, atol=1e-14
    )
    assert int(entry.steps) == 5  # T = sequence length (eq. 92).
  np.testing.assert_allclose(xbar["output"].mean, h2[:, -1].mean(0), rtol=1e-10)
  assert int(xbar["output"].steps) == 1


def imdb_config(optimizer, loss, **overrides):
  config = load_config("imdb", "rls", optimizer=optimizer, loss=loss)
  config.clip_norm = 0.0  # Compare raw updates.
  config.update(overrides)
  return config


@pytest.mark.parametrize(
  "optimizer,overrides",
  [("rls", {"momentum": 0.5, "l1": 1e-6}), ("rls_hybrid", {})],
)
def test_embedding_by_adam_lstm_by_rls(x64, optimizer, overrides):
  model = models.SentimentLSTM(vocab_size=13, embed_dim=3, hidden_size=4)
  rng = np.random.default_rng(2)
  tokens = jnp.asarray(rng.integers(0, 13, (6, 5)))
  labels = jnp.asarray(rng.integers(0, 2, 6))
  params = init_float64(model, tokens)
  loss = "mse" if optimizer == "rls" else "cross_entropy"
  config = imdb_config(
    optimizer,
    loss,
    embedding_learning_rate=0.01,
    learning_rate=0.02,
    **overrides,
  )
  tx = training.make_optimizer(config)
  step = jax.jit(training.make_train_step(model, tx, loss, True))
  new_params, _, _ = step(params, tx.init(params), tokens, labels)

  def loss_fn(p):
    out, xbar = rls.layer_inputs(model.apply, {"params": p}, tokens)
    return training.LOSSES[loss](out, labels), xbar

  grads, xbar = jax.grad(loss_fn, has_aux=True)(params)
  delta = jax.tree.map(lambda a, b: np.asarray(a - b), new_params, params)
  # Embedding: Adam's first step, -lr * m / (sqrt(v) + eps).
  adam = optax.adam(0.01)
  expected, _ = adam.update(grads["embedding"], adam.init(grads["embedding"]))
  np.testing.assert_allclose(
    delta["embedding"]["embedding"],
    expected["embedding"],
    rtol=1e-9,
    atol=1e-15,
  )
  # LSTM input and recurrent matrices: eq. (63) with P0 = I, k = 0.1, T = 5:
  # -(1 / h) [grad_W; grad_b], h = 1 + k T [x̄; 1]ᵀ[x̄; 1]; +R adds γ sgn(Θ)
  # through P_1 (P_0 = I); +M is the same on the first step.
  for layer in ("lstm0", "lstm1"):
    for part in ("input", "recurrent"):
      x = np.append(np.asarray(xbar[layer][part].mean), 1.0)
      h = 1 + 0.1 * 5 * x @ x
      g = grads[layer][part]
      expected_kernel = -np.asarray(g["kernel"]) / h
      expected_bias = -np.asarray(g["bias"]) / h
      if overrides.get("l1"):
        p1 = np.eye(len(x)) - (0.1 * 5 / h) * np.outer(x, x)
        theta = np.concatenate(
          [
            np.asarray(params[layer][part]["kernel"]),
            np.asarray(params[layer][part]["bias"])[None],
          ]
        )
        penalty = overrides["l1"] * p1 @ np.sign(theta)
        expected_kernel -= penalty[:-1]
        expected_bias -= penalty[-1]
      np.testing.assert_allclose(
        delta[layer][part]["kernel"], expected_kernel, rtol=1e-8, atol=1e-14
      )
      np.testing.assert_allclose(
        delta[layer][part]["bias"], expected_bias, rtol=1e-8, atol=1e-14
      )
  # The output layer: RLS in full RLS, Adam (lr 0.02) in the hybrid.
  g_out = np.asarray(grads["output"]["kernel"])
  if optimizer == "rls_hybrid":
    np.testing.assert_allclose(
      delta["output"]["kernel"],
      -0.02 * g_out / (np.abs(g_out) + 1e-8),
      rtol=1e-6,
    )
  else:  # RLS (eq. 63, P0 = I, T = 1) plus the L1 term through P_1.
    x = np.append(np.asarray(xbar["output"].mean), 1.0)
    h = 1 + 0.1 * x @ x
    p1 = np.eye(len(x)) - (0.1 / h) * np.outer(x, x)
    theta = np.concatenate(
      [
        np.asarray(params["output"]["kernel"]),
        np.asarray(params["output"]["bias"])[None],
      ]
    )
    penalty = overrides["l1"] * p1 @ np.sign(theta)
    np.testing.assert_allclose(
      delta["output"]["kernel"], -g_out / h - penalty[:-1], rtol=1e-8
    )


def test_adam_trains_everything_including_the_embedding(x64):
  model = models.SentimentLSTM(vocab_size=7, embed_dim=2, hidden_size=3)
  tokens = jnp.asarray(np.random.default_rng(3).integers(0, 7, (4, 3)))
  params = init_float64(model, tokens)
  tx = training.make_optimizer(imdb_config("adam", "cross_entropy"))
  step = jax.jit(training.make_train_step(model, tx, "cross_entropy", False))
  new_params, _, _ = step(
    params, tx.init(params), tokens, jnp.asarray([0, 1, 0, 1])
  )
  changed = jax.tree.map(lambda a, b: bool(np.any(a != b)), new_params, params)
  assert all(jax.tree.leaves(changed))


def test_eta_scales_hidden_layers_and_the_output_keeps_eta_one(x64):
  """Section III-D fixes η^L = 1: a scalar η (or an η sweep's value) scales
  the hidden layer's RLS step and leaves the output layer's alone, unless
  `output_gradient_scale` says otherwise."""
  model = models.FNN(hidden_size=5, num_classes=3)
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.normal(size=(4, 784)))
  labels = jnp.asarray(rng.integers(0, 3, 4))
  params = jax.tree.map(
    lambda p: p.astype(jnp.float64),
    model.init(jax.random.PRNGKey(0), images)["params"],
  )

  def first_update(gradient_scale=None, **overrides):
    config = load_config("mnist", "rls")
    config.clip_norm = 0.0
    config.update(overrides)
    tx = training.make_optimizer(config, gradient_scale=gradient_scale)
    step = training.make_train_step(model, tx, "mse", True)
    new_params, _, _ = step(params, tx.init(params), images, labels)
    return jax.tree.map(lambda a, b: np.asarray(a - b), new_params, params)

  base, doubled = first_update(), first_update(gradient_scale=2.0)
  np.testing.assert_allclose(
    doubled["hidden"]["kernel"], 2 * base["hidden"]["kernel"], rtol=1e-12
  )
  np.testing.assert_allclose(
    doubled["output"]["kernel"], base["output"]["kernel"], rtol=1e-12
  )
  all_doubled = first_update(gradient_scale=2.0, output_gradient_scale=2.0)
  np.testing.assert_allclose(
    all_doubled["output"]["bias"], 2 * base["output"]["bias"], rtol=1e-12
  )


def test_pytorch_default_init_bounds():
  """Dense and conv: U(±1/sqrt(fan_in)) for weights and biases; LSTM:
  U(±1/sqrt(hidden)); embedding: N(0, 1) (PyTorch's defaults)."""
  key = jax.random.PRNGKey(0)
  vgg = models.MiniVGG(**SMALL_VGG)
  lstm = models.SentimentLSTM(vocab_size=50, embed_dim=8, hidden_size=16)
  # 8x8 images: three 2x2 pools leave 1x1x6 inputs to the hidden layer.
  vgg_params = jax.jit(vgg.init)(key, jnp.zeros((1, 8, 8, 3)))["params"]
  lstm_params = jax.jit(lstm.init)(key, jnp.zeros((1, 5), jnp.int32))["params"]
  drawn = {
    "vgg": models.pytorch_default_init(vgg_params, key),
    "lstm": models.pytorch_default_init(lstm_params, key),
  }
  bounds = {
    ("vgg", "conv0"): (9 * 3) ** -0.5,
    ("vgg", "hidden"): 6**-0.5,
    ("vgg", "output"): 7**-0.5,
    ("lstm", "lstm0"): 16**-0.5,
    ("lstm", "lstm1"): 16**-0.5,
    ("lstm", "output"): 16**-0.5,
  }
  for (net, name), bound in bounds.items():
    leaves = np.concatenate(
      [np.ravel(x) for x in jax.tree.leaves(drawn[net][name])]
    )
    assert np.abs(leaves).max() <= bound, name
    assert np.abs(leaves).max() > 0.8 * bound, name  # spread, not shrunk
  table = np.asarray(drawn["lstm"]["embedding"]["embedding"])
  assert 0.8 < table.std() < 1.2
  assert jax.tree.structure(drawn) == jax.tree.structure(
    {"vgg": vgg_params, "lstm": lstm_params}
  )
  with pytest.raises(ValueError, match="'norm'"):
    models.pytorch_default_init({"norm": {"scale": jnp.ones(3)}}, key)


def test_second_moment_option_runs_through_the_experiment_step():
  """`--config.input_statistics=second_moment`: the step captures sampled
  rows and every RLS layer's state is the second-moment form's; with one
  sampled row per layer (the mean) it would be the paper's RLS."""
  model = models.FNN(hidden_size=5, num_classes=3)
  rng = np.random.default_rng(0)
  images = jnp.asarray(rng.normal(size=(8, 784)), jnp.float32)
  labels = jnp.asarray(rng.integers(0, 3, 8))
  params = model.init(jax.random.PRNGKey(0), images)["params"]
  config = load_config("mnist", "rls")
  config.update(
    input_statistics="second_moment", input_samples=8, momentum=0.5, l1=1e-5
  )
  tx = training.make_optimizer(config)
  step = jax.jit(
    training.make_train_step(
      model, tx, "mse", True, training.input_samples(config)
    )
  )
  new_params, opt_state, loss = step(params, tx.init(params), images, labels)
  assert np.isfinite(float(loss))
  moved = jax.tree.map(
    lambda a, b: float(jnp.abs(a - b).max()), new_params, params
  )
  assert all(v > 0 for v in jax.tree.leaves(moved))
  states = [
    s
    for s in jax.tree.leaves(
      opt_state,
      is_leaf=lambda x: isinstance(
        x, rls.second_moment.ScaleByRLSSecondMomentState
      ),
    )
    if isinstance(s, rls.second_moment.ScaleByRLSSecondMomentState)
  ]
  assert len(states) == 2  # hidden (rls) and output (rls_output)
  config.input_statistics = "covariance"
  with pytest.raises(ValueError, match="input_statistics"):
    training.make_optimizer(config)
