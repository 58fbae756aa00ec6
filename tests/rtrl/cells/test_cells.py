"""Cells: Lemma-1 form, explicit formulas, dtypes, state layout, and the
Jacobians returned by `linearized_step` against `jax.jacfwd` / `jax.jvp`."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import cells
from rtrl import tangents

N, INPUT = 4, 3
CELL_CLASSES = [cells.RNN, cells.RHN, cells.LSTM, cells.GRU]
IDS = ["rnn", "rhn", "lstm", "gru"]
# Every cell's constructor, and the leaky and sparse variants.
CELL_FACTORIES = [lambda cls=cls: cls(hidden_size=N) for cls in CELL_CLASSES]
CELL_FACTORIES += [
  lambda: cells.LeakyRNN(hidden_size=N, leak=0.3),
  lambda: cells.LeakyRNN(hidden_size=N, leak=0.3, recurrent_density=0.5),
] + [
  lambda cls=cls: cls(hidden_size=N, recurrent_density=0.5, mask_seed=1)
  for cls in CELL_CLASSES
]
FACTORY_IDS = IDS + ["leaky_rnn", "sparse-leaky_rnn"]
FACTORY_IDS += [f"sparse-{name}" for name in IDS]


def _random_setup(cell, seed=0):
  """Params, a non-trivial state (not the zero initial state) and an input."""
  return _random_setup_jit(cell, seed)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _random_setup_jit(cell, seed):
  kp, ks, kx, kb = jax.random.split(jax.random.PRNGKey(seed), 4)
  params = cell.init(kp, INPUT)
  # Random bias too, so every gate works away from its initial operating point.
  w = (
    params["W"]
    .at[-1]
    .add(0.5 * jax.random.normal(kb, params["W"].shape[1:], params["W"].dtype))
  )
  params = {"W": w}
  rows = 0.5 * jax.random.normal(
    ks, (cell.num_state_rows, N), params["W"].dtype
  )
  x = jax.random.normal(kx, (INPUT,), params["W"].dtype)
  return params, cell.rows_to_state(rows), x


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


@pytest.mark.parametrize("cls", CELL_CLASSES + [cells.LeakyRNN])
def test_params_shape_fused_lemma1_form(cls):
  """`W` has shape `(input + n + 1, K n)` with K = 1, 2, 4 gates."""
  cell = cls(hidden_size=N)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  assert set(params) == {"W"}
  gates = {
    cells.RNN: 1,
    cells.LeakyRNN: 1,
    cells.RHN: 2,
    cells.LSTM: 4,
    cells.GRU: 4,
  }[cls]
  assert params["W"].shape == (INPUT + N + 1, gates * N)


def assert_float_dtype(cls, dtype):
  """Params, initial state and a stepped state all have `dtype`."""
  cell = cls(hidden_size=N)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  assert params["W"].dtype == dtype
  state = jax.jit(cell.step)(params, cell.initial_state(), jnp.ones((INPUT,)))
  for leaf in jax.tree_util.tree_leaves((cell.initial_state(), state)):
    assert leaf.dtype == dtype


@pytest.mark.parametrize("cls", CELL_CLASSES, ids=IDS)
def test_default_dtype_float32(cls):
  """Params, initial state and a stepped state are float32 by default."""
  assert_float_dtype(cls, jnp.float32)


@pytest.mark.parametrize("cls", CELL_CLASSES, ids=IDS)
def test_float64_under_x64(cls, x64):
  """Params, initial state and a stepped state are float64 under x64."""
  assert_float_dtype(cls, jnp.float64)


def test_lstm_state_is_c_h_tuple_and_output_is_h():
  """LSTM state is a `(c, h)` tuple of `(n,)` arrays; `output` returns h."""
  cell = cells.LSTM(hidden_size=N)
  params, state, x = _random_setup(cell)
  init = cell.initial_state()
  assert isinstance(init, tuple) and len(init) == 2
  assert all(a.shape == (N,) for a in init)
  new = jax.jit(cell.step)(params, state, x)
  assert isinstance(new, tuple) and len(new) == 2
  assert all(a.shape == (N,) for a in new)
  np.testing.assert_array_equal(cell.output(new), new[1])
  assert not np.allclose(new[0], new[1])  # c and h really differ


@pytest.mark.parametrize("cls", [cells.RNN, cells.RHN], ids=["rnn", "rhn"])
def test_single_row_state_is_vector_and_output_is_state(cls):
  """RNN/RHN state is an `(n,)` vector and `output` returns it."""
  cell = cls(hidden_size=N)
  params, state, x = _random_setup(cell)
  assert cell.initial_state().shape == (N,)
  new = jax.jit(cell.step)(params, state, x)
  assert new.shape == (N,)
  np.testing.assert_array_equal(cell.output(new), new)


def test_cells_match_explicit_formulas(x64):
  """`step` equals the documented formulas with `z = concat(x, h, 1) @ W`
  (gate-major columns): RNN tanh, RHN `t c + (1 - t) h` with `c = 2σ - 1`,
  LSTM `i, f, g, o`, GRU `r, u` and the candidate's two blocks, `x` and `h`
  read through separate weights (the masked entries of `W` unused)."""
  for cls in CELL_CLASSES:
    cell = cls(hidden_size=N)
    params, state, x = _random_setup(cell, seed=1)
    w = np.asarray(params["W"])
    if cls is cells.GRU:  # the entries the mask fixes at 0 must not matter
      w = w * np.asarray(cell.weight_mask(INPUT))
      params = {"W": params["W"] + 5.0 * (1 - cell.weight_mask(INPUT))}
    h = np.asarray(cell.output(state))
    z = np.concatenate([np.asarray(x), h, [1.0]]) @ w
    gate = lambda k: z[k * N : (k + 1) * N]
    new = jax.jit(cell.step)(params, state, x)
    if cls is cells.RNN:
      np.testing.assert_allclose(new, np.tanh(gate(0)), rtol=1e-12)
    elif cls is cells.RHN:
      c = 2 * _sigmoid(gate(0)) - 1
      t = _sigmoid(gate(1))
      np.testing.assert_allclose(new, t * c + (1 - t) * h, rtol=1e-12)
    elif cls is cells.GRU:
      xs, hs = np.asarray(x), h
      rows_x, rows_h = slice(0, INPUT), slice(INPUT, INPUT + N)
      block = lambda k: w[:, k * N : (k + 1) * N]
      r, u = _sigmoid(gate(0)), _sigmoid(gate(1))
      from_x = xs @ block(2)[rows_x] + block(2)[-1]
      from_h = hs @ block(3)[rows_h] + block(3)[-1]
      c = np.tanh(from_x + r * from_h)
      np.testing.assert_allclose(new, (1 - u) * c + u * h, rtol=1e-12)
    else:
      c_old = np.asarray(state[0])
      i, f, g, o = (gate(k) for k in range(4))
      c = _sigmoid(f) * c_old + _sigmoid(i) * np.tanh(g)
      np.testing.assert_allclose(new[0], c, rtol=1e-12)
      np.testing.assert_allclose(new[1], _sigmoid(o) * np.tanh(c), rtol=1e-12)


def test_init_biases():
  """RHN transform bias starts at -1 (mostly carry); LSTM forget bias at 1."""
  rhn = cells.RHN(hidden_size=N)
  b = rhn.init(jax.random.PRNGKey(0), INPUT)["W"][-1]
  np.testing.assert_array_equal(b[:N], 0.0)
  np.testing.assert_array_equal(b[N:], -1.0)
  lstm = cells.LSTM(hidden_size=N)
  b = lstm.init(jax.random.PRNGKey(0), INPUT)["W"][-1]
  np.testing.assert_array_equal(b[N : 2 * N], 1.0)
  np.testing.assert_array_equal(b[:N], 0.0)
  np.testing.assert_array_equal(b[2 * N :], 0.0)


@pytest.mark.parametrize("make_cell", CELL_FACTORIES, ids=FACTORY_IDS)
def test_linearized_step_matches_step_and_jacobians(make_cell, x64):
  """`linearized_step`: new state == `step`; hhat == concat(x, h, 1);
  D, dfds == jacfwd of the pointwise map (and the map is really pointwise);
  `hhat ⊗ D` == jacfwd of the step w.r.t. W (zero off a sparse mask); `H v`
  from `apply_recurrent_jacobian` == jvp of the step w.r.t. the state."""
  cell = make_cell()
  s, k = cell.num_state_rows, cell.num_gates
  params, state, x = _random_setup(cell, seed=2)
  vs = jax.random.normal(jax.random.PRNGKey(3), (3, s, N), jnp.float64)

  @jax.jit
  def compute(params, state, x, vs):
    new, jac = cell.linearized_step(params, state, x)
    expected = cell.step(params, state, x)
    rows = cell.state_to_rows(state)
    z = (jac.hhat @ cell.effective_weights(params)).reshape(k, N)
    jz, js = jax.jacfwd(cell.pointwise, argnums=(0, 1))(z, rows)

    def step_rows(p, r):
      return cell.state_to_rows(cell.step(p, cell.rows_to_state(r), x))

    jw = jax.jacfwd(lambda w: step_rows({"W": w}, rows))(params["W"])
    f = (tangents.dense_D_factor(jac)[..., None] * jac.hhat).reshape(
      s, N, k, N, -1
    )  # (S, n, K, n, P)
    hv = tangents.apply_recurrent_jacobian(jac, cell.hidden_row, vs)
    jvps = jax.vmap(
      lambda v: jax.jvp(lambda r: step_rows(params, r), (rows,), (v,))[1]
    )(vs)
    return dict(
      new=new,
      expected=expected,
      jac=jac,
      jz=jz,
      js=js,
      jw=jw,
      f=f,
      hv=hv,
      jvps=jvps,
    )

  out = compute(params, state, x, vs)
  jac = out["jac"]
  for a, b in zip(
    jax.tree_util.tree_leaves(out["new"]),
    jax.tree_util.tree_leaves(out["expected"]),
  ):
    assert a.dtype == jnp.float64
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)

  hhat = np.concatenate([x, cell.output(state), np.ones((1,))])
  np.testing.assert_allclose(jac.hhat, hhat, rtol=1e-15)
  np.testing.assert_array_equal(
    jac.recurrent_weights, cell.effective_weights(params)[INPUT : INPUT + N]
  )

  # D and dfds against the full Jacobians of the pointwise map.
  jz, js = out["jz"], out["js"]
  assert jz.shape == (s, N, k, N) and js.shape == (s, N, s, N)
  assert jac.D.shape == (N, s, k) and jac.dfds.shape == (N, s, s)
  eye = np.eye(N)
  np.testing.assert_allclose(
    jz, np.einsum("jsk,jl->sjkl", jac.D, eye), rtol=1e-12, atol=1e-14
  )
  np.testing.assert_allclose(
    js, np.einsum("jst,jl->sjtl", jac.dfds, eye), rtol=1e-12, atol=1e-14
  )
  assert np.abs(jac.D).max() > 1e-3  # not trivially zero

  # F = d state' / d W == (hhat ⊗ D) ⊙ mask (Lemma 1).
  p_dim = params["W"].shape[0]
  mask = cell.weight_mask(INPUT)
  mask = np.ones((p_dim, k * N)) if mask is None else mask
  np.testing.assert_allclose(
    out["jw"],
    np.transpose(out["f"], (0, 1, 4, 2, 3)).reshape(s, N, p_dim, k * N) * mask,
    rtol=1e-12,
    atol=1e-14,
  )

  # H v == jvp of the step w.r.t. the state, for a batch of tangents.
  np.testing.assert_allclose(out["hv"], out["jvps"], rtol=1e-12, atol=1e-14)
  assert np.abs(out["hv"]).max() > 1e-3


def test_linearized_step_float32_default():
  """Default-precision `linearized_step` returns float32 Jacobians."""
  cell = cells.LSTM(hidden_size=N)
  params, state, x = _random_setup(cell)
  _, jac = jax.jit(cell.linearized_step)(params, state, x)
  for leaf in jac:
    assert leaf.dtype == jnp.float32


def test_make_by_name():
  """`cells.make` builds each cell by (case-insensitive) name."""
  assert isinstance(cells.make("rnn", 3), cells.RNN)
  assert isinstance(cells.make("RHN", 3), cells.RHN)
  lstm = cells.make("lstm", 5)
  assert isinstance(lstm, cells.LSTM) and lstm.hidden_size == 5
  leaky = cells.make("Leaky_RNN", 4, leak=0.25)
  assert isinstance(leaky, cells.LeakyRNN) and leaky.leak == 0.25
