"""rls.layer_inputs and rls.layers: captured x̄ against hand computations."""

import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rls_problems import capture
from rls_problems import init_variables

import rls


def test_dense_mean_over_batch_and_leading_axes():

  class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
      h = nn.relu(nn.Dense(5)(x))
      return nn.Dense(2, use_bias=False)(h)

  model = Model()
  x = jax.random.normal(jax.random.PRNGKey(0), (4, 3, 6))  # (batch, time, f)
  params = init_variables(model, x)["params"]
  outputs, xbar = capture(model, {"params": params}, x)
  np.testing.assert_allclose(
    outputs, jax.jit(model.apply)({"params": params}, x)
  )
  assert set(xbar) == {"Dense_0", "Dense_1"}
  np.testing.assert_allclose(
    xbar["Dense_0"].mean, x.mean(axis=(0, 1)), rtol=1e-6
  )
  hidden = nn.relu(x @ params["Dense_0"]["kernel"] + params["Dense_0"]["bias"])
  np.testing.assert_allclose(
    xbar["Dense_1"].mean, hidden.mean(axis=(0, 1)), rtol=1e-5, atol=1e-6
  )
  assert int(xbar["Dense_0"].steps) == 1


def _same_pads(size, kernel, stride, dilation):
  """'SAME' padding as XLA defines it: output ceil(size / stride)."""
  effective = (kernel - 1) * dilation + 1
  out = -(-size // stride)
  total = max((out - 1) * stride + effective - size, 0)
  return total // 2, total - total // 2


def _reference_patches(x, kernel_size, strides, padding, dilation):
  """All unfolded patches, (batch, positions, prod(kernel_size) * C), by loops.

  Flattening order is (*kernel_size, channels), the row order of the flattened
  conv kernel (eq. 4 with Flax's (kh, kw, cin, cout) layout).
  """
  spatial = x.shape[1:-1]
  if padding == "SAME":
    pads = [
      _same_pads(n, k, s, d)
      for n, k, s, d in zip(spatial, kernel_size, strides, dilation)
    ]
  elif padding == "VALID":
    pads = [(0, 0)] * len(spatial)
  elif padding == "CIRCULAR":
    pads = [
      (((k - 1) * d) // 2, ((k - 1) * d + 1) // 2)
      for k, d in zip(kernel_size, dilation)
    ]
  elif isinstance(padding, int):
    pads = [(padding, padding)] * len(spatial)
  else:
    pads = list(padding)
  mode = "wrap" if padding == "CIRCULAR" else "constant"
  padded = np.pad(x, [(0, 0)] + pads + [(0, 0)], mode=mode)
  out_shape = [
    (n + lo + hi - (k - 1) * d - 1) // s + 1
    for n, (lo, hi), k, s, d in zip(
      spatial, pads, kernel_size, strides, dilation
    )
  ]
  patches = []
  for example in padded:
    rows = []
    for position in itertools.product(*[range(n) for n in out_shape]):
      window = tuple(
        slice(p * s, p * s + (k - 1) * d + 1, d)
        for p, k, s, d in zip(position, kernel_size, strides, dilation)
      )
      rows.append(example[window].reshape(-1))
    patches.append(rows)
  return np.asarray(patches), out_shape


CONV_CASES = [
  # kernel_size, strides, padding, kernel_dilation, input spatial shape
  ((3, 3), (1, 1), "SAME", (1, 1), (7, 7)),
  ((3, 3), (2, 2), "VALID", (1, 1), (7, 8)),
  ((3, 3), (2, 2), "SAME", (1, 1), (7, 6)),
  ((2, 3), (2, 1), ((1, 2), (0, 1)), (1, 1), (6, 5)),
  ((3, 2), (1, 2), 1, (1, 1), (5, 6)),
  ((1, 1), (1, 1), "SAME", (1, 1), (4, 4)),
  ((3, 3), (1, 1), "SAME", (2, 2), (7, 7)),
  ((3, 3), (2, 2), "CIRCULAR", (1, 1), (6, 7)),
  ((3,), (2,), "SAME", (1,), (9,)),  # 1-D convolution.
]


@pytest.mark.parametrize(
  "kernel_size,strides,padding,dilation,spatial", CONV_CASES
)
def test_conv_mean_patch_matches_explicit_patches(
  x64, kernel_size, strides, padding, dilation, spatial
):
  in_channels, out_channels, batch = 3, 4, 2
  conv = nn.Conv(
    out_channels,
    kernel_size,
    strides=strides,
    padding=padding,
    kernel_dilation=dilation,
    param_dtype=jnp.float64,
  )
  x = np.random.default_rng(0).normal(size=(batch, *spatial, in_channels))
  params = init_variables(conv, jnp.asarray(x))["params"]
  outputs, xbar = capture(conv, {"params": params}, jnp.asarray(x))
  patches, out_shape = _reference_patches(
    x, kernel_size, strides, padding, dilation
  )
  # The reference patches reproduce Flax's convolution, so their order is
  # the kernel's row order (kernel.reshape(-1, out)).
  kernel = np.asarray(params["kernel"]).reshape(-1, out_channels)
  expected_outputs = patches @ kernel + np.asarray(params["bias"])
  np.testing.assert_allclose(
    np.asarray(outputs).reshape(batch, -1, out_channels),
    expected_outputs,
    rtol=1e-10,
    atol=1e-12,
  )
  assert list(outputs.shape[1:-1]) == out_shape
  np.testing.assert_allclose(
    xbar.mean, patches.mean(axis=(0, 1)), rtol=1e-10, atol=1e-12
  )
  assert xbar.mean.shape == (np.prod(kernel_size) * in_channels,)


def test_conv_inside_model_and_grouped_conv_not_recorded():

  class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
      x = nn.Conv(4, (3, 3), strides=2)(x)
      x = nn.Conv(4, (3, 3), feature_group_count=2)(x)
      return nn.Dense(2)(x.reshape(x.shape[0], -1))

  model = Model()
  x = jnp.ones((2, 6, 6, 2))
  params = init_variables(model, x)["params"]
  _, xbar = capture(model, {"params": params}, x)
  assert set(xbar) == {"Conv_0", "Dense_0"}  # Conv_1 is grouped.
  tx = rls.rls()
  grads = jax.tree.map(jnp.ones_like, params)
  with pytest.raises(ValueError, match="'Conv_1'.*feature_group_count=1"):
    tx.update(grads, tx.init(params), params, layer_inputs=xbar)


def _reference_recurrent(x, params, kind, h0=None):
  """Step-by-step numpy reference of eqs. (7) and (13)-(18)."""
  w, b = params["input"]["kernel"], params["input"]["bias"]
  v, c_bias = params["recurrent"]["kernel"], params["recurrent"]["bias"]
  batch, time, _ = x.shape
  n = v.shape[0]
  h = np.zeros((batch, n)) if h0 is None else h0
  c = np.zeros((batch, n))
  sigmoid = lambda a: 1 / (1 + np.exp(-a))
  previous, outputs = [], []
  for t in range(time):
    previous.append(h)
    z = x[:, t] @ w + b + h @ v + c_bias
    if kind == "rnn":
      h = np.tanh(z)
    else:
      i, g, f, o = np.split(z, 4, axis=-1)
      c = sigmoid(i) * np.tanh(g) + sigmoid(f) * c
      h = sigmoid(o) * np.tanh(c)
    outputs.append(h)
  return np.stack(outputs, 1), np.stack(previous, 1)


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
def test_recurrent_layers_fused_gates_and_time_averaged_inputs(x64, kind):
  layer_cls = rls.RNN if kind == "rnn" else rls.LSTM
  layer = layer_cls(5, param_dtype=jnp.float64)
  x = np.random.default_rng(2).normal(size=(3, 6, 4))
  params = init_variables(layer, jnp.asarray(x))["params"]
  gates = 1 if kind == "rnn" else 4
  # One input matrix and one recurrent matrix, all gates side by side.
  assert params["input"]["kernel"].shape == (4, gates * 5)
  assert params["recurrent"]["kernel"].shape == (5, gates * 5)
  outputs, xbar = capture(layer, {"params": params}, jnp.asarray(x))
  numpy_params = jax.tree.map(np.asarray, params)
  expected, previous = _reference_recurrent(x, numpy_params, kind)
  np.testing.assert_allclose(outputs, expected, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(
    xbar["input"].mean, x.mean(axis=(0, 1)), rtol=1e-10
  )
  np.testing.assert_allclose(
    xbar["recurrent"].mean, previous.mean(axis=(0, 1)), rtol=1e-10
  )
  assert int(xbar["input"].steps) == 6 and int(xbar["recurrent"].steps) == 6


def test_rnn_initial_carry_counts_in_recurrent_input(x64):
  layer = rls.RNN(3, param_dtype=jnp.float64)
  x = np.random.default_rng(3).normal(size=(2, 4, 2))
  h0 = np.random.default_rng(4).normal(size=(2, 3))
  params = init_variables(layer, jnp.asarray(x))["params"]
  (outputs, carry), xbar = capture(
    layer,
    {"params": params},
    jnp.asarray(x),
    jnp.asarray(h0),
    return_carry=True,
  )
  expected, previous = _reference_recurrent(
    x, jax.tree.map(np.asarray, params), "rnn", h0
  )
  np.testing.assert_allclose(outputs, expected, rtol=1e-10)
  np.testing.assert_allclose(carry, expected[:, -1], rtol=1e-10)
  np.testing.assert_allclose(
    xbar["recurrent"].mean, previous.mean(axis=(0, 1)), rtol=1e-10
  )


def test_one_forward_pass_for_gradients_and_inputs():

  class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
      x = rls.LSTM(4)(x)
      return nn.Dense(2)(x[:, -1])

  model = Model()
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 2))
  y = jax.random.normal(jax.random.PRNGKey(1), (3, 2))
  params = init_variables(model, x)["params"]

  def loss_with_inputs(params):
    outputs, xbar = rls.layer_inputs(model.apply, {"params": params}, x)
    return jnp.mean((outputs - y) ** 2), xbar

  def plain_loss(params):
    return jnp.mean((model.apply({"params": params}, x) - y) ** 2)

  def through_inputs(params):
    _, xbar = rls.layer_inputs(model.apply, {"params": params}, x)
    return sum(
      jnp.sum(leaf.mean)
      for leaf in jax.tree.leaves(
        xbar, is_leaf=lambda n: isinstance(n, rls.LayerInput)
      )
    )

  @jax.jit
  def everything(params):  # One compilation for all the variants.
    return (
      jax.value_and_grad(loss_with_inputs, has_aux=True)(params),
      jax.value_and_grad(plain_loss)(params),
      rls.layer_inputs(model.apply, {"params": params}, x)[1],
      jax.grad(through_inputs)(params),
    )

  ((loss, xbar), grads), (plain_value, plain_grads), separately, leak = (
    everything(params)
  )
  np.testing.assert_allclose(loss, plain_value, rtol=1e-6)
  for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(plain_grads)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  for got, want in zip(jax.tree.leaves(xbar), jax.tree.leaves(separately)):
    np.testing.assert_allclose(got, want, rtol=1e-6)
  assert set(xbar) == {"LSTM_0", "Dense_0"}
  # The recorded means are stop_gradient-ed: no gradient flows through them.
  assert all(np.all(g == 0) for g in jax.tree.leaves(leak))


def test_shared_dense_averages_its_calls_and_counts_steps():

  class Unrolled(nn.Module):
    @nn.compact
    def __call__(self, xs):
      dense = nn.Dense(3)
      return [dense(x) for x in xs]

  xs = [jnp.full((2, 4), float(t)) for t in range(3)]
  model = Unrolled()
  params = init_variables(model, xs)["params"]
  _, xbar = capture(model, {"params": params}, xs)
  np.testing.assert_allclose(xbar["Dense_0"].mean, np.full(4, 1.0))
  assert int(xbar["Dense_0"].steps) == 3


def test_init_records_nothing_and_other_mutable_collections_kept():

  class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
      x = rls.RNN(3)(x)
      x = nn.BatchNorm(use_running_average=False)(x)
      return nn.Dense(1)(x)

  model = Model()
  x = jnp.ones((2, 4, 3))
  variables = init_variables(model, x)
  assert set(variables) == {"params", "batch_stats"}
  (outputs, mutated), xbar = capture(
    model, variables, x, mutable=["batch_stats"]
  )
  assert set(mutated) == {"batch_stats"}
  assert set(xbar) == {"RNN_0", "Dense_0"}
  assert outputs.shape == (2, 4, 1)
  assert set(xbar["RNN_0"]) == {"input", "recurrent"}


class _SequenceReadout(nn.Module):
  """A Dense hidden layer and a Dense output applied at every time step."""

  @nn.compact
  def __call__(self, x):
    hidden = jnp.tanh(nn.Dense(5, name="hidden")(x))
    return nn.Dense(3, name="output")(hidden)


def test_time_axes_sets_t_of_a_dense_applied_over_time():
  """eqs. (80)-(86): the output layer of sequence prediction averages over
  batch and time and has ``T`` = the number of steps."""
  model = _SequenceReadout()
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 7, 4)), jnp.float32)
  variables = model.init(jax.random.PRNGKey(0), x)
  _, xbar = rls.layer_inputs(model.apply, variables, x, time_axes={"output": 1})
  assert int(xbar["output"].steps) == 7 and int(xbar["hidden"].steps) == 1
  hidden = jnp.tanh(
    x @ variables["params"]["hidden"]["kernel"]
    + variables["params"]["hidden"]["bias"]
  )
  np.testing.assert_allclose(
    xbar["output"].mean, hidden.mean(axis=(0, 1)), rtol=1e-5
  )


@pytest.mark.parametrize(
  "time_axes,inputs_shape,match",
  [
    ({"nope": 1}, (2, 7, 4), "'nope'.*not a Dense or Conv"),
    ({"output": 2}, (2, 7, 4), "time_axes\\['output'\\] = 2.*no time axis"),
    ({"output": 1}, (2, 4), "time_axes\\['output'\\] = 1.*shape \\(2, 5\\)"),
    ({"output": 1.0}, (2, 7, 4), "must be an int"),
  ],
)
def test_time_axes_errors_name_the_layer(time_axes, inputs_shape, match):
  model = _SequenceReadout()
  x = jnp.ones(inputs_shape)
  variables = model.init(jax.random.PRNGKey(0), x)
  with pytest.raises(ValueError, match=match):
    rls.layer_inputs(model.apply, variables, x, time_axes=time_axes)
