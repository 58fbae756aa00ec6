"""The RLS paper's networks: captured layer inputs against hand computations,
and which optimiser updates which parameters.

* Mini-VGG: every conv layer's captured ``x̄`` equals the mean of its input's
  explicitly unfolded 3x3 'SAME' patches; the FC layers' equal the mean of
  their inputs (float64, narrow layers).
* The LSTM network and the IMDB optimiser: `test_classifier_lstm.py`.
"""

import functools

import flax.linen as nn
from helpers import init_float64
from helpers import load_config
import jax
import jax.numpy as jnp
import numpy as np
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
