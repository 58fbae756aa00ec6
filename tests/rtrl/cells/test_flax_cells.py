"""`rtrl.cells.from_flax` / `to_flax`: Flax recurrent cells trained online.

Flax's built-in cells (`SimpleCell`, `LSTMCell`, `OptimizedLSTMCell`,
`GRUCell`; `flax.nnx` and `flax.linen`; default and user-passed settings)
map to Lemma-1 cells whose step equals the module's call (float64) and on
which exact RTRL equals BPTT; the autodiff path of the same module gives the
same gradient; r-OK runs on a mapped `nnx.GRUCell`; a user-written NNX cell
learns online under SnAp-1 and exact RTRL; `to_flax` round-trips the
parameters; bad input fails with an error naming the culprit.
"""

import subprocess
import sys

from flax import nnx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rtrl_problems
from rtrl_problems import rel_err

import rtrl
from rtrl import bptt
from rtrl import estimators
from rtrl import online
from rtrl import readout
from rtrl.cells import flax_forms

N, INPUT, OUTPUTS, B, T = 4, 3, 3, 2, 8
RESETS = [(0, None), (3, 0), (5, 1)]
F64 = {"param_dtype": jnp.float64, "dtype": jnp.float64}
BIAS = nnx.initializers.normal(0.5)  # nonzero biases, to catch bias bugs


def _nnx(cls, **kwargs):
  return lambda: cls(INPUT, N, rngs=nnx.Rngs(0), **F64, **kwargs)


def _linen(cls, **kwargs):
  return lambda: cls(features=N, **F64, **kwargs)


# id -> (api, module factory, the Lemma-1 class it maps to)
CASES = {
  "nnx_simple": ("nnx", _nnx(nnx.SimpleCell, bias_init=BIAS)),
  "nnx_simple_residual_relu": (
    "nnx",
    _nnx(
      nnx.SimpleCell, bias_init=BIAS, residual=True, activation_fn=jax.nn.relu
    ),
  ),
  "nnx_lstm": ("nnx", _nnx(nnx.LSTMCell, bias_init=BIAS)),
  "nnx_optimized_lstm": ("nnx", _nnx(nnx.OptimizedLSTMCell, bias_init=BIAS)),
  "nnx_gru": ("nnx", _nnx(nnx.GRUCell, bias_init=BIAS)),
  "nnx_gru_hard_sigmoid_softsign": (
    "nnx",
    _nnx(
      nnx.GRUCell,
      bias_init=BIAS,
      gate_fn=jax.nn.hard_sigmoid,
      activation_fn=jax.nn.soft_sign,
    ),
  ),
  "linen_simple": ("linen", _linen(nn.SimpleCell, bias_init=BIAS)),
  "linen_lstm": ("linen", _linen(nn.LSTMCell, bias_init=BIAS)),
  "linen_optimized_lstm_gelu": (
    "linen",
    _linen(nn.OptimizedLSTMCell, bias_init=BIAS, activation_fn=jax.nn.gelu),
  ),
  "linen_gru": ("linen", _linen(nn.GRUCell, bias_init=BIAS)),
}
FORMS = {
  "SimpleCell": flax_forms.FlaxSimpleCell,
  "LSTMCell": flax_forms.FlaxLSTMCell,
  "OptimizedLSTMCell": flax_forms.FlaxLSTMCell,
  "GRUCell": flax_forms.FlaxGRUCell,
}


def build(case, seed=0):
  """`(api, module, flax params)` in float64 (Linen params from `init`)."""
  api, factory = CASES[case]
  module = factory()
  if api == "nnx":
    return api, module, None
  carry = module.initialize_carry(jax.random.PRNGKey(1), (INPUT,))
  x = jnp.zeros((INPUT,))
  return api, module, module.init(jax.random.PRNGKey(seed), carry, x)["params"]


def flax_call(api, module, params, carry, x):
  if api == "nnx":
    return module(carry, x)
  return module.apply({"params": params}, carry, x)


def random_carry(api, module, key):
  if api == "nnx":
    carry = module.initialize_carry((INPUT,), rngs=nnx.Rngs(0))
  else:
    carry = module.initialize_carry(jax.random.PRNGKey(0), (INPUT,))
  leaves, treedef = jax.tree_util.tree_flatten(carry)
  keys = jax.random.split(key, len(leaves))
  return jax.tree_util.tree_unflatten(
    treedef,
    [jax.random.normal(k, a.shape, jnp.float64) for k, a in zip(keys, leaves)],
  )


def assert_trees_close(a, b, tol):
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    assert x.shape == y.shape
    np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


def problem(cell, cell_params, seed=0):
  rng = np.random.default_rng(seed)
  params = {
    "cell": cell_params,
    "readout": readout.linear().init(
      jax.random.PRNGKey(seed), cell.hidden_size, 3
    ),
  }
  params["readout"]["b"] = jnp.asarray(0.3 * rng.standard_normal(OUTPUTS))
  chunk = rtrl_problems.make_chunk(rng, T, B, INPUT, OUTPUTS, RESETS, 0.75)
  return params, chunk


def rtrl_and_bptt(cell, params, chunk):
  """Exact RTRL summed over the chunk, and BPTT's gradient (cell part)."""
  est = estimators.make("rtrl", cell)
  state0 = online.broadcast_state(cell.initial_state(), B)
  steps, _ = online.frozen_gradients(
    cell, est, params, chunk, jax.random.PRNGKey(1)
  )
  summed = jax.tree_util.tree_map(lambda a: a.sum(0), steps)
  return summed, bptt.bptt_gradient(cell, params, state0, chunk)["cell"]


# ---------------------------------------------------------------------------
# Built-in cells: exact Lemma-1 forms.
# ---------------------------------------------------------------------------


def test_import_rtrl_does_not_import_flax():
  code = "import sys, rtrl; assert 'flax' not in sys.modules, 'flax imported'"
  subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_equals_the_flax_call(case, x64):
  """The mapped cell's step and output equal the module's own call on a
  random carry and input; the entries Flax lacks are zero in `W`."""
  api, module, flax_params = build(case)
  cell, params = rtrl.cells.from_flax(module, params=flax_params)
  assert type(cell) is FORMS[type(module).__name__]
  assert params["W"].dtype == jnp.float64
  assert params["W"].shape == (INPUT + N + 1, cell.num_gates * N)
  np.testing.assert_array_equal(
    cell.mask_gradient(params["W"]), params["W"]
  )  # masked entries start (and, by mask_gradient, stay) at zero
  for seed in range(3):
    kc, kx = jax.random.split(jax.random.PRNGKey(seed))
    carry = random_carry(api, module, kc)
    x = jax.random.normal(kx, (INPUT,), jnp.float64)
    want_carry, want_y = flax_call(api, module, flax_params, carry, x)
    got = cell.step(params, carry, x)
    assert_trees_close(got, want_carry, 1e-12)
    np.testing.assert_allclose(cell.output(got), want_y, rtol=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_exact_rtrl_equals_bptt(case, x64):
  """Exact RTRL (Lemma-1 path) == BPTT on the mapped cell, and the
  gradient of the entries Flax lacks is exactly zero."""
  _, module, flax_params = build(case)
  cell, cell_params = rtrl.cells.from_flax(module, params=flax_params)
  params, chunk = problem(cell, cell_params)
  summed, full = jax.jit(lambda p: rtrl_and_bptt(cell, p, chunk))(params)
  assert rel_err(summed["W"], full["W"]) < 1e-9
  np.testing.assert_array_equal(cell.mask_gradient(summed["W"]), summed["W"])


@pytest.mark.parametrize("case", ["nnx_gru", "nnx_lstm", "linen_gru"])
def test_lemma1_and_autodiff_paths_agree(case, x64):
  """The same module through the mapped Lemma-1 cell and through the
  autodiff path (`exact_form=False`): the same exact-RTRL gradient, once
  the fused gradient is unpacked into Flax's layout."""
  api, module, flax_params = build(case)
  cell, w_params = rtrl.cells.from_flax(module, params=flax_params)
  auto, auto_params = rtrl.cells.from_flax(
    module, params=flax_params, exact_form=False
  )
  assert isinstance(auto, rtrl.cells.CustomCell)
  params, chunk = problem(cell, w_params)
  fused, _ = rtrl_and_bptt(cell, params, chunk)
  auto_grad, auto_bptt = rtrl_and_bptt(
    auto, {**params, "cell": auto_params}, chunk
  )
  # to_flax is linear in W: the fused gradient, unpacked, is Flax's gradient.
  template = build(case)[1] if api == "nnx" else module
  unpacked = rtrl.cells.to_flax(template, fused)
  if api == "nnx":
    unpacked = nnx.state(unpacked, nnx.Param)
  for a, b, c in zip(
    jax.tree_util.tree_leaves(unpacked),
    jax.tree_util.tree_leaves(auto_grad),
    jax.tree_util.tree_leaves(auto_bptt),
  ):
    assert rel_err(a, b) < 1e-9
    assert rel_err(b, c) < 1e-9


@pytest.mark.parametrize("case", sorted(CASES))
def test_to_flax_round_trips(case, x64):
  """from_flax then to_flax gives the module's parameters back exactly, into
  a differently initialised module (NNX) or as Linen's params dict."""
  api, module, flax_params = build(case)
  _, params = rtrl.cells.from_flax(module, params=flax_params)
  if api == "linen":
    back = rtrl.cells.to_flax(module, params)
    assert jax.tree_util.tree_structure(
      jax.tree_util.tree_map(np.asarray, dict(back))
    ) == jax.tree_util.tree_structure(
      jax.tree_util.tree_map(np.asarray, dict(flax_params))
    )
    for a, b in zip(
      jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(flax_params)
    ):
      np.testing.assert_array_equal(a, b)
    return
  other = CASES[case][1]()
  nnx.update(
    other,
    jax.tree_util.tree_map(lambda a: a + 1.0, nnx.state(other, nnx.Param)),
  )
  assert rtrl.cells.to_flax(other, params) is other
  want = nnx.state(module, nnx.Param).to_pure_dict()
  got = nnx.state(other, nnx.Param).to_pure_dict()
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
  for a, b in zip(
    jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
  ):
    np.testing.assert_array_equal(a, b)


def test_r_ok_runs_on_a_mapped_nnx_gru():
  """r-OK (rank 2) trains a mapped `nnx.GRUCell` for a chunk: finite loss,
  the parameters move, the entries Flax lacks stay zero."""
  module = nnx.GRUCell(INPUT, N, rngs=nnx.Rngs(0))
  cell, cell_params = rtrl.cells.from_flax(module)
  est = estimators.make("ok", cell, rank=2)
  params, chunk = problem(cell, cell_params)
  trainer = rtrl.make_online_trainer(cell, est, optax.adam(1e-2))
  state = trainer.init(params, jax.random.PRNGKey(0), B)
  state, metrics = trainer.run(state, chunk)
  assert np.isfinite(float(metrics.loss_sum.sum()))
  w = state.params["cell"]["W"]
  assert rel_err(w, cell_params["W"]) > 1e-4
  np.testing.assert_array_equal(cell.mask_gradient(w), w)
  mask = cell.weight_mask(INPUT)
  assert (mask == 0).sum() == INPUT * N + N * N + N  # incl. the missing b_hn


# ---------------------------------------------------------------------------
# User-written cells and settings outside the Lemma-1 form: autodiff path.
# ---------------------------------------------------------------------------


class LeakyCell(nnx.Module):
  """A user cell (not built in): `h' = (1 - a) h + a tanh(x W + h U + b)`,
  per-unit learnt rate `a = σ(alpha)`; returns `(h', 2 h')`."""

  def __init__(self, in_features, hidden, *, rngs):
    self.dense = nnx.Linear(in_features + hidden, hidden, rngs=rngs)
    self.alpha = nnx.Param(jnp.zeros((hidden,)))
    self.in_features, self.hidden = in_features, hidden

  def __call__(self, h, x):
    rate = jax.nn.sigmoid(self.alpha[...])
    h = (1 - rate) * h + rate * jnp.tanh(self.dense(jnp.concatenate([x, h])))
    return h, 2.0 * h

  def initialize_carry(self, input_shape, rngs=None):
    del rngs
    return jnp.zeros(input_shape[:-1] + (self.hidden,))


PERIOD = np.array([0, 0, 1, 1])


def pattern_chunk(steps, batch, offset):
  """One-hot of the current symbol of 0 0 1 1 ..., target the next."""
  t = np.arange(steps)[:, None] + np.arange(batch)[None, :] + offset
  return online.StepBatch(
    inputs=jax.nn.one_hot(PERIOD[t % 4], 2),
    targets=jnp.asarray(PERIOD[(t + 1) % 4]),
    weights=jnp.ones((steps, batch)),
    resets=jnp.zeros((steps, batch), bool),
  )


@pytest.mark.parametrize("name", ["snap1", "rtrl"])
def test_user_nnx_cell_learns_online(name, x64):
  """A user-written NNX cell on the period-4 pattern, 6 chunks of 40 steps:
  the last chunk's mean loss is below 0.15 nats and a fifth of the first's
  (ln 2 = 0.69 without memory); the state carries `y` beside `h`."""
  module = LeakyCell(2, 8, rngs=nnx.Rngs(0))
  nnx.update(
    module,
    jax.tree_util.tree_map(
      lambda a: a.astype(jnp.float64), nnx.state(module, nnx.Param)
    ),
  )
  cell, cell_params = rtrl.cells.from_flax(module)
  assert isinstance(cell, rtrl.cells.CustomCell)
  assert cell.hidden_size == 8
  h, y = cell.initial_state()  # y = 2 h' is no carry leaf: kept beside it
  assert h.shape == y.shape == (8,)
  params = {
    "cell": cell_params,
    "readout": readout.linear().init(jax.random.PRNGKey(1), 8, 2),
  }
  trainer = rtrl.make_online_trainer(
    cell, estimators.make(name, cell), optax.adam(5e-2)
  )
  state = jax.jit(trainer.init, static_argnums=2)(
    params, jax.random.PRNGKey(0), 4
  )
  losses = []
  for c in range(6):
    state, metrics = trainer.run(state, pattern_chunk(40, 4, 40 * c))
    losses.append(float(metrics.loss_sum.sum() / metrics.weight_sum.sum()))
  assert np.all(np.isfinite(losses)), losses
  assert losses[-1] < min(0.15, 0.2 * losses[0]), losses
  trained = rtrl.cells.to_flax(module, state.params["cell"])
  assert rel_err(trained.alpha[...], jnp.zeros(8) + 1e-30) > 0


def test_builtin_cell_with_elementwise_setting_is_exact_and_other_falls_back():
  """A non-element-wise activation takes the autodiff path (which still
  equals Flax's call) and a Kronecker estimator refuses it, naming the
  setting; `exact_form=False` forces the autodiff path."""
  module = nnx.GRUCell(INPUT, N, activation_fn=jax.nn.softmax, rngs=nnx.Rngs(0))
  cell, params = rtrl.cells.from_flax(module)
  assert isinstance(cell, rtrl.cells.CustomCell)
  assert "activation_fn='softmax' is not element-wise" in repr(cell)
  x = jnp.arange(INPUT, dtype=jnp.float32)
  h = jnp.linspace(-1.0, 1.0, N)
  np.testing.assert_allclose(cell.step(params, h, x), module(h, x)[0], 1e-6)
  with pytest.raises(ValueError, match="activation_fn='softmax'"):
    estimators.make("ok", cell, rank=2)
  with pytest.raises(ValueError, match="softmax.*snap1|snap1.*softmax"):
    estimators.make("kf", cell)
  estimators.make("snap1", cell)  # the autodiff estimators serve it
  forced, _ = rtrl.cells.from_flax(
    nnx.GRUCell(INPUT, N, rngs=nnx.Rngs(0)), exact_form=False
  )
  assert isinstance(forced, rtrl.cells.CustomCell)


# ---------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------


def test_not_a_flax_module_or_not_a_cell_is_named():
  with pytest.raises(ValueError, match="module must be a flax"):
    rtrl.cells.from_flax(rtrl.cells.make("gru", 4))
  with pytest.raises(ValueError, match="initial_carry is required"):
    rtrl.cells.from_flax(nnx.Linear(3, 4, rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match=r"module \(nnx.Linear\) must be a rec"):
    rtrl.cells.from_flax(
      nnx.Linear(3, 4, rngs=nnx.Rngs(0)), initial_carry=jnp.zeros(4)
    )


def test_linen_cell_without_params_or_input_size_is_named():
  module = nn.GRUCell(features=N)
  with pytest.raises(ValueError, match="params is required"):
    rtrl.cells.from_flax(module)
  carry = module.initialize_carry(jax.random.PRNGKey(0), (INPUT,))
  variables = module.init(jax.random.PRNGKey(0), carry, jnp.zeros(INPUT))
  with pytest.raises(ValueError, match=r"variables\['params'\]"):
    rtrl.cells.from_flax(module, params=variables)
  with pytest.raises(ValueError, match="input_size .7. does not match"):
    rtrl.cells.from_flax(module, params=variables["params"], input_size=7)

  class Wrapped(nn.Module):  # a user Linen cell: no in_features anywhere
    @nn.compact
    def __call__(self, carry, x):
      return nn.GRUCell(features=N)(carry, x)

  user = Wrapped()
  user_params = user.init(jax.random.PRNGKey(0), carry, jnp.zeros(INPUT))
  with pytest.raises(ValueError, match="input_size is required"):
    rtrl.cells.from_flax(
      user, params=user_params["params"], initial_carry=carry
    )
  cell, _ = rtrl.cells.from_flax(
    user, params=user_params["params"], initial_carry=carry, input_size=INPUT
  )
  assert cell.hidden_size == N
  with pytest.raises(ValueError, match="params must be None"):
    rtrl.cells.from_flax(nnx.GRUCell(3, 4, rngs=nnx.Rngs(0)), params={})


class DropoutCell(nnx.Module):
  def __init__(self, *, rngs):
    self.cell = nnx.GRUCell(INPUT, N, rngs=rngs)
    self.drop = nnx.Dropout(0.5, rngs=rngs)

  def __call__(self, h, x):
    h, _ = self.cell(h, self.drop(x))
    return h, h


class BatchNormCell(nnx.Module):
  def __init__(self, *, rngs):
    self.cell = nnx.GRUCell(INPUT, N, rngs=rngs)
    self.norm = nnx.BatchNorm(INPUT, rngs=rngs)

  def __call__(self, h, x):
    h, _ = self.cell(h, self.norm(x[None])[0])
    return h, h


@pytest.mark.parametrize(
  "make, what, path",
  [
    (DropoutCell, "an RNG stream", "drop.rngs"),
    (BatchNormCell, "batch statistics", "norm.(mean|var)"),
  ],
)
def test_non_parameter_state_that_changes_is_named(make, what, path):
  module = make(rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=f"{path}.*{what}.*module.eval"):
    rtrl.cells.from_flax(module, input_size=INPUT, initial_carry=jnp.zeros(N))
  module.eval()  # deterministic: now a pure step
  cell, _ = rtrl.cells.from_flax(
    module, input_size=INPUT, initial_carry=jnp.zeros(N)
  )
  assert cell.hidden_size == N


@pytest.mark.parametrize("name", ["nnx.GRUCell", "linen.LSTMCell"])
def test_make_by_name_is_flax_initialisation(name, x64):
  """`rtrl.cells.make('flax:' + name, n)`: the exact form, and its `init`
  is the Flax module's own initialisation packed into `W`."""
  cell = rtrl.cells.make(f"flax:{name}", N)
  key = jax.random.PRNGKey(3)
  w = cell.init(key, INPUT)["W"]
  if name.startswith("nnx"):
    module = nnx.GRUCell(INPUT, N, param_dtype=jnp.float64, rngs=nnx.Rngs(key))
    _, want = rtrl.cells.from_flax(module)
  else:
    module = nn.LSTMCell(features=N, param_dtype=jnp.float64)
    carry = module.initialize_carry(key, (INPUT,))
    variables = module.init(key, carry, jnp.zeros(INPUT))
    _, want = rtrl.cells.from_flax(module, params=variables["params"])
  assert w.dtype == jnp.float64
  np.testing.assert_array_equal(w, want["W"])
  with pytest.raises(ValueError, match="cell must be one of"):
    rtrl.cells.make("flax:nnx.Linear", N)


class LinenDropoutCell(nn.Module):
  @nn.compact
  def __call__(self, h, x):
    return nn.GRUCell(features=N)(h, nn.Dropout(0.5, deterministic=False)(x))


class LinenBatchNormCell(nn.Module):
  @nn.compact
  def __call__(self, h, x):
    x = nn.BatchNorm(use_running_average=False)(x[None])[0]
    return nn.GRUCell(features=N)(h, x)


@pytest.mark.parametrize(
  "make, what",
  [
    (LinenDropoutCell, "an RNG stream.*Dropout_0"),
    (LinenBatchNormCell, "a variable collection.*BatchNorm_0"),
  ],
)
def test_linen_cell_that_needs_more_than_params_is_named(make, what):
  module, h = make(), jnp.zeros(N)
  keys = {"params": jax.random.PRNGKey(0), "dropout": jax.random.PRNGKey(1)}
  variables = module.init(keys, h, jnp.ones(INPUT))
  with pytest.raises(ValueError, match=f"linen.{make.__name__}.*{what}"):
    rtrl.cells.from_flax(
      module, params=variables["params"], input_size=INPUT, initial_carry=h
    )
