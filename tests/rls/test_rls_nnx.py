"""rls.layer_inputs on NNX models: the same inputs and RLS steps as the same
network written in Linen, nnx.Optimizer, hybrids and errors."""

import functools
import pathlib
import subprocess
import sys

from flax import nnx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from rls_problems import init_variables

import rls

F64 = jnp.float64


def _set(layer, params):
  """Copies a Linen layer's params (kernel, optional bias) into `layer`."""
  layer.kernel.value = jnp.asarray(params["kernel"])
  if "bias" in params:
    layer.bias.value = jnp.asarray(params["bias"])


def _assert_close(a, b, rtol=1e-10, atol=1e-12):
  jax.tree.map(
    lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b
  )


def _mse(outputs, targets):
  return 0.5 * jnp.mean(jnp.sum((outputs - targets) ** 2, axis=-1))


def _linen_steps(model, params, tx, batches, **capture_kwargs):
  """Params after each RLS step of the Linen model, and the first inputs."""

  def loss_fn(params, x, y):
    outputs, xbar = rls.layer_inputs(
      model.apply, {"params": params}, x, **capture_kwargs
    )
    return _mse(outputs, y), xbar

  @jax.jit
  def step(params, state, x, y):
    (_, xbar), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
    updates, state = tx.update(grads, state, params, layer_inputs=xbar)
    return optax.apply_updates(params, updates), state, xbar

  state = tx.init(params)
  history, first_inputs = [], None
  for x, y in batches:
    params, state, xbar = step(params, state, x, y)
    first_inputs = xbar if first_inputs is None else first_inputs
    history.append(params)
  return history, first_inputs


def _nnx_steps(model, tx, batches, **capture_kwargs):
  """nnx.Param states after each RLS step by nnx.Optimizer, and the first
  inputs."""

  def loss_fn(model, x, y):
    outputs, xbar = rls.layer_inputs(model, x, **capture_kwargs)
    return _mse(outputs, y), xbar

  @nnx.jit
  def step(model, optimizer, x, y):
    (_, xbar), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, x, y)
    optimizer.update(model, grads, layer_inputs=xbar)
    return xbar

  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  history, first_inputs = [], None
  for x, y in batches:
    xbar = step(model, optimizer, x, y)
    first_inputs = xbar if first_inputs is None else first_inputs
    history.append(nnx.to_pure_dict(nnx.state(model, nnx.Param)))
  return history, first_inputs


def _batches(x_shape, y_dim, num=3, seed=0):
  rng = np.random.default_rng(seed)
  return [
    (
      jnp.asarray(rng.normal(size=x_shape)),
      jnp.asarray(rng.normal(size=(x_shape[0], y_dim))),
    )
    for _ in range(num)
  ]


class LinenMLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    h = jnp.tanh(nn.Dense(6, param_dtype=F64)(x))
    h = jnp.tanh(nn.Dense(5, param_dtype=F64)(h))
    return nn.Dense(2, param_dtype=F64)(h)


class NnxMLP(nnx.Module):
  def __init__(self, rngs, dtype=F64):
    self.hidden = nnx.List(
      [
        nnx.Linear(4, 6, param_dtype=dtype, rngs=rngs),
        nnx.Linear(6, 5, param_dtype=dtype, rngs=rngs),
      ]
    )
    self.out = nnx.Linear(5, 2, param_dtype=dtype, rngs=rngs)

  def __call__(self, x):
    for layer in self.hidden:
      x = jnp.tanh(layer(x))
    return self.out(x)


MLP_PATHS = {"Dense_0": ("hidden", 0), "Dense_1": ("hidden", 1)}
MLP_PATHS["Dense_2"] = ("out",)


def _nnx_mlp_from(linen_params):
  model = NnxMLP(nnx.Rngs(1))
  _set(model.hidden[0], linen_params["Dense_0"])
  _set(model.hidden[1], linen_params["Dense_1"])
  _set(model.out, linen_params["Dense_2"])
  return model


def _by_nnx_path(tree, paths):
  """A Linen-keyed tree re-keyed by NNX paths (nested dicts)."""
  out: dict = {}
  for linen_name, path in paths.items():
    node = out
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = tree[linen_name]
  return out


@pytest.mark.parametrize(
  "options",
  [
    {},
    {"square_root": True},
    {"input_statistics": "second_moment"},
  ],
)
def test_mlp_same_inputs_and_rls_steps_as_linen(x64, options):
  batches = _batches((7, 4), 2)
  linen = LinenMLP()
  params = init_variables(linen, batches[0][0])["params"]
  capture_kwargs = (
    {"samples": 5} if options.get("input_statistics") == "second_moment" else {}
  )
  tx = rls.rls(momentum=0.5, l1=1e-5, **options)
  linen_history, linen_inputs = _linen_steps(
    linen, params, tx, batches, **capture_kwargs
  )
  nnx_history, nnx_inputs = _nnx_steps(
    _nnx_mlp_from(params), tx, batches, **capture_kwargs
  )
  # layer_inputs is keyed like nnx.state(model, nnx.Param).
  assert nnx_inputs.keys() == {"hidden", "out"}
  assert nnx_inputs["hidden"].keys() == {0, 1}
  _assert_close(nnx_inputs, _by_nnx_path(linen_inputs, MLP_PATHS))
  for linen_params, nnx_params in zip(linen_history, nnx_history):
    _assert_close(nnx_params, _by_nnx_path(linen_params, MLP_PATHS))


class LinenCNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    h = nn.relu(
      nn.Conv(3, (3, 3), strides=2, padding="SAME", param_dtype=F64)(x)
    )
    h = nn.relu(nn.Conv(4, (2, 2), padding="VALID", param_dtype=F64)(h))
    return nn.Dense(2, param_dtype=F64)(h.reshape((h.shape[0], -1)))


class NnxCNN(nnx.Module):
  def __init__(self, rngs):
    self.conv1 = nnx.Conv(
      2, 3, (3, 3), strides=2, padding="SAME", param_dtype=F64, rngs=rngs
    )
    self.conv2 = nnx.Conv(
      3, 4, (2, 2), padding="VALID", param_dtype=F64, rngs=rngs
    )
    self.out = nnx.Linear(4 * 2 * 2, 2, param_dtype=F64, rngs=rngs)

  def __call__(self, x):
    h = nnx.relu(self.conv2(nnx.relu(self.conv1(x))))
    return self.out(h.reshape((h.shape[0], -1)))


CNN_PATHS = {"Conv_0": ("conv1",), "Conv_1": ("conv2",), "Dense_0": ("out",)}


@pytest.mark.parametrize("samples", [0, 6])
def test_cnn_same_inputs_and_rls_steps_as_linen(x64, samples):
  batches = _batches((3, 6, 6, 2), 2)
  linen = LinenCNN()
  params = init_variables(linen, batches[0][0])["params"]
  model = NnxCNN(nnx.Rngs(1))
  for linen_name, (attribute,) in CNN_PATHS.items():
    _set(getattr(model, attribute), params[linen_name])
  options = {"input_statistics": "second_moment"} if samples else {}
  tx = rls.rls(momentum=0.5, **options)
  linen_history, linen_inputs = _linen_steps(
    linen, params, tx, batches, samples=samples
  )
  nnx_history, nnx_inputs = _nnx_steps(model, tx, batches, samples=samples)
  assert nnx_inputs["conv1"].mean.shape == (3 * 3 * 2,)
  _assert_close(nnx_inputs, _by_nnx_path(linen_inputs, CNN_PATHS))
  for linen_params, nnx_params in zip(linen_history, nnx_history):
    _assert_close(nnx_params, _by_nnx_path(linen_params, CNN_PATHS))


class LinenSteppedRNN(nn.Module):
  """An Elman network as nnx.SimpleCell computes it, one Dense call per step
  (the Linen path averages a layer's calls and counts them as T)."""

  @nn.compact
  def __call__(self, x):
    dense_i = nn.Dense(5, param_dtype=F64, name="dense_i")
    dense_h = nn.Dense(5, use_bias=False, param_dtype=F64, name="dense_h")
    h = jnp.zeros((x.shape[0], 5), F64)
    for t in range(x.shape[1]):
      h = jnp.tanh(dense_i(x[:, t]) + dense_h(h))
    return nn.Dense(2, param_dtype=F64, name="out")(h)


class NnxRNN(nnx.Module):
  def __init__(self, cell_cls, rngs, stepped=False):
    self.rnn = nnx.RNN(cell_cls(3, 5, dtype=F64, param_dtype=F64, rngs=rngs))
    self.out = nnx.Linear(5, 2, param_dtype=F64, rngs=rngs)
    self.stepped = stepped

  def __call__(self, x):
    if self.stepped:  # The cell called in a Python loop, without nnx.RNN.
      carry = self.rnn.cell.initialize_carry((x.shape[0], 3), nnx.Rngs(0))
      for t in range(x.shape[1]):
        carry, h = self.rnn.cell(carry, x[:, t])
    else:
      h = self.rnn(x)[:, -1]
    return self.out(h)


RNN_PATHS = {
  "dense_i": ("rnn", "cell", "dense_i"),
  "dense_h": ("rnn", "cell", "dense_h"),
  "out": ("out",),
}


@pytest.mark.parametrize("stepped", [False, True])
def test_simple_cell_same_inputs_and_rls_steps_as_linen(x64, stepped):
  batches = _batches((4, 6, 3), 2)
  linen = LinenSteppedRNN()
  params = init_variables(linen, batches[0][0])["params"]
  model = NnxRNN(nnx.SimpleCell, nnx.Rngs(1), stepped=stepped)
  _set(model.rnn.cell.dense_i, params["dense_i"])
  _set(model.rnn.cell.dense_h, params["dense_h"])
  _set(model.out, params["out"])
  tx = rls.rls(momentum=0.5)
  linen_history, linen_inputs = _linen_steps(linen, params, tx, batches)
  nnx_history, nnx_inputs = _nnx_steps(model, tx, batches)
  # x̄ over batch and time with T = 6 (h_0 = 0 included for dense_h).
  assert int(nnx_inputs["rnn"]["cell"]["dense_h"].steps) == 6
  assert int(nnx_inputs["out"].steps) == 1
  _assert_close(nnx_inputs, _by_nnx_path(linen_inputs, RNN_PATHS))
  for linen_params, nnx_params in zip(linen_history, nnx_history):
    _assert_close(nnx_params, _by_nnx_path(linen_params, RNN_PATHS))


@pytest.mark.parametrize(
  "cell_cls, samples",
  [
    (nnx.GRUCell, 0),
    (nnx.LSTMCell, 0),
    (nnx.OptimizedLSTMCell, 0),
    (nnx.GRUCell, 2),
  ],
)
def test_cells_under_rnn_record_as_stepped_cells(x64, cell_cls, samples):
  x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5, 3)))
  scanned = NnxRNN(cell_cls, nnx.Rngs(0))
  stepped = NnxRNN(cell_cls, nnx.Rngs(0), stepped=True)
  capture_fn = nnx.jit(functools.partial(rls.layer_inputs, samples=samples))
  out_scanned, in_scanned = capture_fn(scanned, x)
  out_stepped, in_stepped = capture_fn(stepped, x)
  if samples:  # Each step's sampled rows, pooled: (T * S, in_features).
    assert in_scanned["rnn"]["cell"]["dense_h"].samples.shape == (10, 5)
  _assert_close(out_scanned, out_stepped)
  _assert_close(in_scanned, in_stepped)
  # One entry per nnx.Linear of the cell, keyed as in nnx.state.
  cell_params = nnx.to_pure_dict(nnx.state(scanned.rnn.cell, nnx.Param))
  assert in_scanned["rnn"]["cell"].keys() == cell_params.keys()
  for entry in in_scanned["rnn"]["cell"].values():
    assert int(entry.steps) == 5


def test_optimized_lstm_cell_records_as_rls_lstm(x64):
  """nnx.OptimizedLSTMCell fuses its gates like rls.layers.LSTM: the same
  input and recurrent means and T, with the gates permuted."""
  x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 5, 2)))
  linen = rls.LSTM(4, use_bias=False, param_dtype=F64)
  params = init_variables(linen, x)["params"]
  model = nnx.RNN(
    nnx.OptimizedLSTMCell(2, 4, param_dtype=F64, rngs=nnx.Rngs(0))
  )

  def to_ifgo(kernel):  # rls.layers.LSTM's gate order is (i, g, f, o).
    i, g, f, o = jnp.split(kernel, 4, axis=-1)
    return jnp.concatenate([i, f, g, o], axis=-1)

  model.cell.dense_i.kernel.value = to_ifgo(params["input"]["kernel"])
  model.cell.dense_h.kernel.value = to_ifgo(params["recurrent"]["kernel"])
  model.cell.dense_h.bias.value = jnp.zeros((16,), F64)
  linen_out, linen_inputs = rls.layer_inputs(linen.apply, {"params": params}, x)
  nnx_out, nnx_inputs = rls.layer_inputs(model, x)
  _assert_close(nnx_out, linen_out)
  _assert_close(nnx_inputs["cell"]["dense_i"], linen_inputs["input"])
  _assert_close(nnx_inputs["cell"]["dense_h"], linen_inputs["recurrent"])


def test_optimizer_trains_and_hybrid_with_adam_on_the_output():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(32, 4)), jnp.float32)
  y = jnp.stack([jnp.sin(x[:, 0]), x[:, 1] * x[:, 2]], axis=-1)

  def labels(params):  # RLS on the hidden layers, Adam on the output.
    return jax.tree_util.tree_map_with_path(
      lambda path, _: "adam" if path[0].key == "out" else "rls", params
    )

  for tx in (
    rls.rls(learning_rate=0.5, momentum=0.5),
    optax.multi_transform(
      {"rls": rls.rls(momentum=0.5), "adam": optax.adam(1e-2)}, labels
    ),
  ):
    model = NnxMLP(nnx.Rngs(0), dtype=jnp.float32)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    def loss_fn(model):
      outputs, xbar = rls.layer_inputs(model, x)
      return _mse(outputs, y), xbar

    @nnx.jit
    def step(model, optimizer):
      (loss, xbar), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
      optimizer.update(model, grads, layer_inputs=xbar)
      return loss

    losses = [float(step(model, optimizer)) for _ in range(15)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
    assert int(optimizer.step.value) == 15


def test_hybrid_routes_hidden_layers_to_rls_and_output_to_adam(x64):
  """One hybrid step: the hidden layers move as under RLS alone, the output
  layer as under Adam alone."""
  x, y = _batches((8, 4), 2)[0]

  def labels(params):
    return jax.tree_util.tree_map_with_path(
      lambda path, _: "adam" if path[0].key == "out" else "rls", params
    )

  def one_step(rls_tx, adam_tx):
    model = NnxMLP(nnx.Rngs(0))
    tx = optax.multi_transform({"rls": rls_tx, "adam": adam_tx}, labels)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    def loss_fn(model):
      outputs, xbar = rls.layer_inputs(model, x)
      return _mse(outputs, y), xbar

    (_, xbar), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    optimizer.update(model, grads, layer_inputs=xbar)
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))

  hybrid = one_step(rls.rls(momentum=0.5), optax.adam(1e-2))
  rls_only = one_step(rls.rls(momentum=0.5), optax.set_to_zero())
  adam_only = one_step(optax.set_to_zero(), optax.adam(1e-2))
  _assert_close(hybrid["hidden"], rls_only["hidden"])
  _assert_close(hybrid["out"], adam_only["out"])
  start = nnx.to_pure_dict(nnx.state(NnxMLP(nnx.Rngs(0)), nnx.Param))
  assert not np.allclose(
    hybrid["hidden"][0]["kernel"], start["hidden"][0]["kernel"]
  )
  assert not np.allclose(hybrid["out"]["kernel"], start["out"]["kernel"])


def test_capture_under_jax_jit_and_grad_of_split_model():
  model = NnxMLP(nnx.Rngs(0), dtype=jnp.float32)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  x = jnp.ones((3, 4))

  @jax.jit
  def loss_and_inputs(params, x):
    def loss_fn(params):
      outputs, xbar = rls.layer_inputs(nnx.merge(graphdef, params, rest), x)
      return jnp.sum(outputs**2), xbar

    return jax.grad(loss_fn, has_aux=True)(params)

  grads, xbar = loss_and_inputs(params, x)
  assert jax.tree.structure(nnx.to_pure_dict(grads)) is not None
  np.testing.assert_allclose(xbar["hidden"][0].mean, np.ones(4))


def test_model_state_updates_written_back_and_user_model_unchanged():
  class WithBatchNorm(nnx.Module):
    def __init__(self, rngs):
      self.linear = nnx.Linear(3, 4, rngs=rngs)
      self.norm = nnx.BatchNorm(4, rngs=rngs)

    def __call__(self, x):
      return self.norm(self.linear(x))

  model = WithBatchNorm(nnx.Rngs(0))
  x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)
  expected = WithBatchNorm(nnx.Rngs(0))
  expected(x)
  _, xbar = rls.layer_inputs(model, x)
  _assert_close(
    nnx.state(model, nnx.BatchStat), nnx.state(expected, nnx.BatchStat), 1e-6
  )
  assert type(model.linear) is nnx.Linear
  assert set(xbar) == {"linear"}


def test_time_axes_and_bad_samples():
  model = NnxMLP(nnx.Rngs(0), dtype=jnp.float32)
  x = jnp.ones((2, 7, 4))  # (batch, time, features)
  _, xbar = rls.layer_inputs(model, x, time_axes={"out": 1, "hidden/0": 1})
  assert int(xbar["out"].steps) == 7 and int(xbar["hidden"][0].steps) == 7
  assert int(xbar["hidden"][1].steps) == 1
  with pytest.raises(ValueError, match="time_axes names layer 'rnn'"):
    rls.layer_inputs(model, x, time_axes={"rnn": 1})
  with pytest.raises(ValueError, match="samples must be an int >= 0"):
    rls.layer_inputs(model, x, samples=-1)


def test_bad_first_arguments():
  with pytest.raises(ValueError, match=r"\(model, \*inputs\) for an nnx"):
    rls.layer_inputs(lambda x: x, jnp.ones(3))


class WithEmbedding(nnx.Module):
  def __init__(self, rngs):
    self.embed = nnx.Embed(10, 4, rngs=rngs)
    self.out = nnx.Linear(4, 2, rngs=rngs)

  def __call__(self, tokens):
    return self.out(self.embed(tokens).mean(axis=1))


class WithAttention(nnx.Module):
  def __init__(self, rngs):
    self.attention = nnx.MultiHeadAttention(
      num_heads=2, in_features=4, decode=False, rngs=rngs
    )
    self.out = nnx.Linear(4, 2, rngs=rngs)

  def __call__(self, x):
    return self.out(self.attention(x).mean(axis=1))


def _update_once(model, inputs, tx):
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

  def loss_fn(model):
    outputs, xbar = rls.layer_inputs(model, inputs)
    return jnp.sum(outputs**2), xbar

  (_, xbar), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
  optimizer.update(model, grads, layer_inputs=xbar)
  return xbar


@pytest.mark.parametrize(
  "model_cls, inputs, named",
  [
    (WithEmbedding, jnp.array([[1, 2], [3, 4]]), "'embed/embedding'"),
    (WithAttention, jnp.ones((2, 3, 4)), "'attention/query'"),
  ],
)
def test_layer_without_input_named_and_passthrough(model_cls, inputs, named):
  with pytest.raises(ValueError, match=f"parameter.*{named}.*multi_transform"):
    _update_once(model_cls(nnx.Rngs(0)), inputs, rls.rls())
  model = model_cls(nnx.Rngs(0))
  before = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  xbar = _update_once(model, inputs, rls.rls(passthrough=True))
  assert set(xbar) == {"out"}
  after = nnx.to_pure_dict(nnx.state(model, nnx.Param))
  assert not np.allclose(after["out"]["kernel"], before["out"]["kernel"])


def test_layer_inside_a_transformation_and_rnn_seq_lengths_rejected():
  class Vmapped(nnx.Module):
    def __init__(self, rngs):
      self.linear = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
      return nnx.vmap(lambda layer, row: layer(row), in_axes=(None, 0))(
        self.linear, x
      )

  with pytest.raises(ValueError, match="'linear' runs inside a JAX transf"):
    rls.layer_inputs(Vmapped(nnx.Rngs(0)), jnp.ones((4, 3)))
  rnn = nnx.RNN(nnx.SimpleCell(3, 2, rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match="seq_lengths"):
    rls.layer_inputs(rnn, jnp.ones((2, 4, 3)), seq_lengths=jnp.array([4, 2]))


def test_cell_called_outside_rnn_returns_its_own_outputs():
  """The cell of an nnx.RNN, called directly, keeps its (carry, y) result."""

  class Both(nnx.Module):
    def __init__(self, rngs):
      self.rnn = nnx.RNN(nnx.SimpleCell(3, 2, rngs=rngs))

    def __call__(self, x):
      carry, y = self.rnn.cell(jnp.zeros((x.shape[0], 2)), x[:, 0])
      return self.rnn(x)[:, -1] + y

  model = Both(nnx.Rngs(0))
  x = jnp.ones((2, 4, 3))
  outputs, xbar = rls.layer_inputs(model, x)
  _assert_close(outputs, model(x), 1e-6, 1e-6)
  # One direct call (T = 1) and four scanned steps: T = 5.
  assert int(xbar["rnn"]["cell"]["dense_i"].steps) == 5


def test_import_rls_does_not_import_nnx():
  code = "import sys, rls; assert 'flax.nnx' not in sys.modules"
  repo_root = pathlib.Path(__file__).resolve().parents[2]
  subprocess.run([sys.executable, "-c", code], check=True, cwd=repo_root)
