"""The RLS paper's LSTM network: captured layer inputs against a NumPy
re-implementation, and which optimiser updates which parameters.

* Stacked LSTM: every ``x̄`` and ``T`` equals a NumPy re-implementation of the
  embedding and both LSTM layers (gate order i, g, f, o).
* The IMDB optimiser: the embedding's update is exactly Adam's, the LSTM's is
  exactly RLS's (eq. 63 with P0 = I), in `rls`, `rls_hybrid` and with +M+R;
  `eta` scales the hidden layers and the output keeps eta = 1.
"""

import functools

from helpers import init_float64
from helpers import load_config
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.classifier import models
from experiments.classifier import training
import rls


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
