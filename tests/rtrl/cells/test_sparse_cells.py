"""Sparse recurrent cells (`recurrent_mask` / `recurrent_density`), the leaky
RNN, and RFLO's memoryless warning.

A sparse cell must stay sparse: its gradients are zero off the mask under
every estimator, and its weights off the mask never move under any
optimiser (`rtrl.optim.masked_updates`, chained by the online trainers).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rtrl_problems

import rtrl
from rtrl import cells
from rtrl import estimators
from rtrl import heads
from rtrl import optim
from rtrl import stack

N, INPUT, OUTPUTS, T, B = 5, 3, 4, 8, 2
RESETS = [(5, 1)]
LEMMA1_NAMES = ["rnn", "leaky_rnn", "rhn", "lstm", "gru"]
FLAX_NAMES = ["flax:nnx.GRUCell", "flax:linen.LSTMCell", "flax:nnx.SimpleCell"]
# Values for the registry's hyper-parameters (small ranks, low orders).
HPARAMS = {"rank": 2, "order": 2}


def ring_mask(n: int) -> np.ndarray:
  """Each unit feeds itself and the next one: a sparse, connected ring."""
  mask = np.eye(n, dtype=bool)
  mask[np.arange(n), (np.arange(n) + 1) % n] = True
  return mask


def sparse_cell(name: str, mask: np.ndarray | None = None):
  return cells.make(
    name, N, recurrent_mask=ring_mask(N) if mask is None else mask
  )


def off_mask(cell, input_size: int = INPUT) -> np.ndarray:
  """`(P, K n)` bool: the entries of `W` the recurrent mask drops."""
  mask = np.asarray(cell.weight_mask(input_size)).astype(bool)
  structural = cell.structural_mask(input_size)
  used = (
    np.ones_like(mask) if structural is None else np.asarray(structural) > 0
  )
  return used & ~mask


def kept(cell, input_size: int = INPUT) -> np.ndarray:
  """`(P, K n)` bool: the entries of `W` the cell uses."""
  return np.asarray(cell.weight_mask(input_size)) > 0


def estimator_hparams(name: str) -> dict:
  wanted = estimators.hyperparameters(name)
  unknown = [h for h in wanted if h not in HPARAMS]
  if unknown:
    pytest.skip(f"no test value for {name}'s {unknown}")
  return {h: HPARAMS[h] for h in wanted}


# -- construction -----------------------------------------------------------


@pytest.mark.parametrize("n", [5, 8])
@pytest.mark.parametrize("density", [0.1, 0.25, 0.9])
def test_density_keeps_exact_count_and_is_reproducible(n, density):
  """`recurrent_density=d` keeps exactly `round(d n^2)` entries, the same
  pattern for the same seed and another for another seed."""
  cell = cells.make("rnn", n, recurrent_density=density, mask_seed=3)
  assert cell.recurrent_mask.dtype == np.bool_
  assert cell.recurrent_mask.shape == (n, n)
  assert cell.num_recurrent_kept() == round(density * n * n)
  again = cells.make("gru", n, recurrent_density=density, mask_seed=3)
  np.testing.assert_array_equal(cell.recurrent_mask, again.recurrent_mask)
  other = cells.make("rnn", n, recurrent_density=density, mask_seed=4)
  assert not np.array_equal(cell.recurrent_mask, other.recurrent_mask)


def test_density_one_is_dense():
  cell = cells.make("lstm", 4, recurrent_density=1.0)
  assert cell.recurrent_mask is None
  assert cell.num_recurrent_kept() == 16


@pytest.mark.parametrize("name", LEMMA1_NAMES + FLAX_NAMES)
def test_make_takes_mask_on_every_gate_block(name):
  """`make(name, n, recurrent_mask=M)`: `M` on every gate block of `W_h`,
  `init` zero off it, `num_parameters` the kept entries only."""
  mask = ring_mask(N)
  cell = sparse_cell(name, mask)
  np.testing.assert_array_equal(cell.recurrent_mask, mask)
  k = cell.num_gates
  weights = np.asarray(cell.init(jax.random.PRNGKey(0), INPUT)["W"])
  full = np.asarray(cell.weight_mask(INPUT))
  structural = cell.structural_mask(INPUT)
  for g in range(k):
    block = full[INPUT : INPUT + N, g * N : (g + 1) * N]
    assert not np.any(block[~mask])  # off the mask: zero in every block
    if structural is None:  # on it: kept (but where structurally zero)
      assert np.all(block[mask] == 1)
  assert not np.any(weights[off_mask(cell)])
  assert cell.num_parameters(INPUT) == int(np.count_nonzero(full))


@pytest.mark.parametrize("name", ["rnn", "leaky_rnn", "rhn", "lstm"])
def test_num_parameters_counts_kept_entries(name):
  dense = cells.make(name, N)
  sparse = sparse_cell(name)
  k, kept = dense.num_gates, int(ring_mask(N).sum())
  assert dense.num_parameters(INPUT) == (INPUT + N + 1) * k * N
  assert sparse.num_parameters(INPUT) == (INPUT + 1) * k * N + k * kept


def test_num_parameters_gru_excludes_structural_zeros():
  """The GRU's candidate reads `x` and `h` through separate blocks: neither
  the `h` rows of block `a` nor the `x` rows of block `b` count."""
  kept = int(ring_mask(N).sum())
  dense = cells.GRU(N)
  assert dense.num_parameters(INPUT) == (
    (INPUT + N + 1) * 4 * N - N * N - INPUT * N
  )
  sparse = sparse_cell("gru")
  assert sparse.num_parameters(INPUT) == (INPUT + 1) * 4 * N - INPUT * N + (
    3 * kept
  )


def test_from_flax_takes_a_mask():
  """`from_flax(module, recurrent_mask=M)`: the exact form with `M`, its
  packed `W` zero off it; the autodiff path refuses a mask."""
  from flax import nnx  # pylint: disable=g-import-not-at-top

  module = nnx.GRUCell(INPUT, N, rngs=nnx.Rngs(0))
  mask = ring_mask(N)
  cell, params = cells.from_flax(module, recurrent_mask=mask)
  np.testing.assert_array_equal(cell.recurrent_mask, mask)
  weights = np.asarray(params["W"])
  assert not np.any(weights[off_mask(cell)])
  assert np.all(weights[INPUT : INPUT + N, :N][mask] != 0)
  dense_cell, dense_params = cells.from_flax(module)  # the old call works
  assert dense_cell.recurrent_mask is None
  assert np.any(np.asarray(dense_params["W"])[off_mask(cell)] != 0)
  with pytest.raises(ValueError, match="recurrent_mask"):
    cells.from_flax(module, exact_form=False, recurrent_mask=mask)


@pytest.mark.parametrize("make_cell", [cells.RNN, cells.LeakyRNN, cells.GRU])
@pytest.mark.parametrize(
  "kwargs, argument",
  [
    (dict(recurrent_mask=np.ones((N, N + 1), bool)), "recurrent_mask"),
    (dict(recurrent_mask=np.ones((N,), bool)), "recurrent_mask"),
    (dict(recurrent_mask=np.ones((N, N))), "recurrent_mask"),
    (dict(recurrent_mask=np.ones((N, N), np.int32)), "recurrent_mask"),
    (dict(recurrent_density=0), "recurrent_density"),
    (dict(recurrent_density=0.0), "recurrent_density"),
    (dict(recurrent_density=1.5), "recurrent_density"),
    (dict(recurrent_density=-0.5), "recurrent_density"),
    (dict(recurrent_density="a"), "recurrent_density"),
    (dict(recurrent_density=True), "recurrent_density"),
    (
      dict(recurrent_mask=np.ones((N, N), bool), recurrent_density=0.5),
      "recurrent_density",
    ),
    (dict(recurrent_density=0.5, mask_seed=-1), "mask_seed"),
    (dict(recurrent_density=0.5, mask_seed=1.5), "mask_seed"),
    (dict(mask_seed=-1), "mask_seed"),
  ],
)
def test_bad_sparsity_is_a_value_error_naming_it(make_cell, kwargs, argument):
  with pytest.raises(ValueError, match=argument):
    make_cell(N, **kwargs)


@pytest.mark.parametrize("name", ["rhn", "lstm", "flax:nnx.GRUCell"])
def test_make_passes_bad_sparsity_errors_through(name):
  with pytest.raises(ValueError, match="recurrent_mask"):
    cells.make(name, N, recurrent_mask=np.ones((N, N)))
  with pytest.raises(ValueError, match="recurrent_density"):
    cells.make(name, N, recurrent_density=1.5)


# -- gradients ---------------------------------------------------------------


@pytest.mark.parametrize("name", LEMMA1_NAMES + FLAX_NAMES)
def test_exact_rtrl_equals_bptt_on_sparse_cells(name, x64):
  """Exact RTRL's summed online gradient equals BPTT's on a masked cell of
  every kind (float64), and both are zero off the mask."""
  cell = sparse_cell(name)
  params, chunk = rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=RESETS,
    random_biases=True,
  )
  online, full = rtrl_problems.summed_online_and_bptt(
    cell, estimators.make("rtrl", cell), params, chunk
  )
  assert rtrl_problems.rel_err(online["W"], full["W"]) < 1e-10
  off = off_mask(cell)
  np.testing.assert_array_equal(np.asarray(full["W"])[off], 0.0)
  np.testing.assert_array_equal(np.asarray(online["W"])[off], 0.0)
  assert np.abs(np.asarray(full["W"])[~off]).max() > 1e-4


def _per_step_gradients(cell, estimator, seed=0):
  params, chunk = rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=RESETS,
    seed=seed,
    random_biases=True,
  )
  steps, _ = jax.jit(
    lambda p, c: rtrl.frozen_gradients(
      cell, estimator, p, c, jax.random.PRNGKey(1)
    )
  )(params, chunk)
  return np.asarray(steps["W"])  # (T, P, K n)


@pytest.mark.parametrize(
  "name, cell_name",
  [
    (name, ("gru", "lstm")[i % 2])  # alternate: half the compile time
    for i, name in enumerate(estimators.names())
  ],
)
def test_every_estimator_is_zero_off_the_mask(name, cell_name):
  """Every registry estimator's per-step gradient for `W` is exactly zero
  off the mask (and not zero on it), on a sparse GRU or LSTM."""
  cell = sparse_cell(cell_name)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    estimator = estimators.make(name, cell, **estimator_hparams(name))
  grads = _per_step_gradients(cell, estimator)
  off = off_mask(cell)
  np.testing.assert_array_equal(grads[:, off], 0.0)
  assert np.abs(grads[:, ~off]).max() > 1e-6


@pytest.mark.parametrize(
  "factory",
  [
    estimators.autodiff_rtrl,
    estimators.autodiff_uoro,
    estimators.autodiff_snap1,
  ],
)
def test_autodiff_estimators_are_zero_off_the_mask(factory):
  """The autodiff path on a sparse cell seen through its step
  (`as_custom`): zero off the mask too (the step uses `W ⊙ mask`)."""
  cell = sparse_cell("gru")
  grads = _per_step_gradients(cell, factory(cells.as_custom(cell)))
  off = off_mask(cell)
  np.testing.assert_array_equal(grads[:, off], 0.0)
  assert np.abs(grads[:, ~off]).max() > 1e-6


# -- updates -----------------------------------------------------------------


def _train(cell, params, optimizer, steps=6):
  chunk = rtrl_problems.make_chunk(
    np.random.default_rng(2), steps, B, INPUT, OUTPUTS, RESETS
  )
  trainer = rtrl.make_online_trainer(
    cell, estimators.make("rtrl", cell), optimizer
  )
  state = trainer.init(params, jax.random.PRNGKey(0), B)
  state, _ = trainer.run(state, chunk)
  return state


def _params_with_nonzero_off_mask(cell, seed=0):
  """Params whose `W` is nonzero everywhere (off the mask too): a weight
  decay would move every entry."""
  params = rtrl_problems.make_params(
    cell, jax.random.PRNGKey(seed), INPUT, OUTPUTS
  )
  noise = jax.random.normal(
    jax.random.PRNGKey(seed + 1), params["cell"]["W"].shape
  )
  return {**params, "cell": {"W": params["cell"]["W"] + 0.3 * noise}}


@pytest.mark.parametrize("name", ["lstm", "gru", "flax:nnx.GRUCell"])
def test_adamw_keeps_entries_off_the_mask(name):
  """Online training with `optax.adamw` (weight decay) leaves every entry
  off the mask as it was: zero from `init`, and unchanged when nonzero;
  entries on the mask move."""
  cell = sparse_cell(name)
  optimizer = optax.adamw(1e-2, weight_decay=0.5)
  off = off_mask(cell)

  params = rtrl_problems.make_params(
    cell, jax.random.PRNGKey(0), INPUT, OUTPUTS
  )
  trained = np.asarray(_train(cell, params, optimizer).params["cell"]["W"])
  np.testing.assert_array_equal(trained[off], 0.0)

  params = _params_with_nonzero_off_mask(cell)
  before = np.asarray(params["cell"]["W"])
  # Without masking, this optimiser would move the entries off the mask.
  raw, _ = optimizer.update(
    jax.tree_util.tree_map(jnp.zeros_like, params),
    optimizer.init(params),
    params,
  )
  assert np.all(np.asarray(raw["cell"]["W"])[off] != 0)
  trained = np.asarray(_train(cell, params, optimizer).params["cell"]["W"])
  np.testing.assert_array_equal(trained[off], before[off])
  assert np.all(trained[kept(cell)] != before[kept(cell)])


def test_tbptt_trainer_keeps_the_mask():
  cell = sparse_cell("lstm")
  params = _params_with_nonzero_off_mask(cell)
  chunk = rtrl_problems.make_chunk(
    np.random.default_rng(2), 6, B, INPUT, OUTPUTS, RESETS
  )
  trainer = rtrl.make_tbptt_trainer(
    cell, optax.adamw(1e-2, weight_decay=0.5), truncation=3
  )
  state, _ = trainer.run(trainer.init(params, jax.random.PRNGKey(0), B), chunk)
  before = np.asarray(params["cell"]["W"])
  after = np.asarray(state.params["cell"]["W"])
  np.testing.assert_array_equal(after[off_mask(cell)], before[off_mask(cell)])
  assert np.all(after[kept(cell)] != before[kept(cell)])


def test_dense_cell_trainer_state_is_unchanged():
  """A dense cell's trainer runs the optimiser as given: the same
  `opt_state` structure (existing checkpoints resume)."""
  cell = cells.make("gru", N)
  optimizer = optax.adamw(1e-2, weight_decay=0.5)
  params = rtrl_problems.make_params(cell, jax.random.PRNGKey(0), INPUT, 2)
  trainer = rtrl.make_online_trainer(
    cell, estimators.make("rtrl", cell), optimizer
  )
  state = trainer.init(params, jax.random.PRNGKey(0), B)
  assert optim.keep_recurrent_mask(optimizer, cell) is optimizer
  assert jax.tree_util.tree_structure(
    state.opt_state
  ) == jax.tree_util.tree_structure(optimizer.init(params))


def test_accumulated_updates_keep_the_mask():
  """With `accumulate_steps` (optax.MultiSteps) the mask holds too."""
  cell = sparse_cell("rhn")
  params = _params_with_nonzero_off_mask(cell)
  chunk = rtrl_problems.make_chunk(
    np.random.default_rng(2), 6, B, INPUT, OUTPUTS, RESETS
  )
  trainer = rtrl.make_online_trainer(
    cell,
    estimators.make("snap1", cell),
    optax.adamw(1e-2, weight_decay=0.5),
    accumulate_steps=3,
  )
  state, _ = trainer.run(trainer.init(params, jax.random.PRNGKey(0), B), chunk)
  before, after = params["cell"]["W"], state.params["cell"]["W"]
  off = off_mask(cell)
  np.testing.assert_array_equal(np.asarray(after)[off], np.asarray(before)[off])
  assert np.all(np.asarray(after)[kept(cell)] != np.asarray(before)[kept(cell)])


def test_stacked_trainer_keeps_the_mask():
  """A stack with a sparse layer: its entries off the mask do not move;
  the dense layer's all may."""
  sparse, dense = sparse_cell("rhn"), cells.RHN(4)
  layers = [
    stack.Layer(c, estimators.make("rtrl", c), heads.identity())
    for c in (sparse, dense)
  ]
  params = stack.init_params(layers, jax.random.PRNGKey(0), INPUT, OUTPUTS)
  noisy = params["cell"][0]["cell"]["W"] + 0.3 * jax.random.normal(
    jax.random.PRNGKey(1), params["cell"][0]["cell"]["W"].shape
  )
  params["cell"] = ({**params["cell"][0], "cell": {"W": noisy}},) + tuple(
    params["cell"][1:]
  )
  chunk = rtrl_problems.make_chunk(
    np.random.default_rng(2), 6, B, INPUT, OUTPUTS, RESETS
  )
  trainer = stack.make_stacked_online_trainer(
    layers, optax.adamw(1e-2, weight_decay=0.5)
  )
  state, _ = trainer.run(trainer.init(params, jax.random.PRNGKey(0), B), chunk)
  off = off_mask(sparse)
  after = np.asarray(state.params["cell"][0]["cell"]["W"])
  np.testing.assert_array_equal(after[off], np.asarray(noisy)[off])
  assert np.all(after[kept(sparse)] != np.asarray(noisy)[kept(sparse)])
  dense_after = np.asarray(state.params["cell"][1]["cell"]["W"])
  assert np.all(dense_after != np.asarray(params["cell"][1]["cell"]["W"]))


def test_masked_updates_zeroes_off_the_mask_only():
  """`masked_updates`: a mask tree (a prefix of the updates, None leaves
  passing unchanged) or a callable giving one."""
  updates = {"a": jnp.arange(1.0, 7.0).reshape(2, 3), "b": {"c": jnp.ones(2)}}
  mask = {"a": np.array([[1, 0, 1], [0, 1, 0]]), "b": None}
  for given in (mask, lambda u: mask):
    transform = optim.masked_updates(given)
    out, _ = transform.update(updates, transform.init(updates))
    np.testing.assert_array_equal(out["a"], [[1.0, 0.0, 3.0], [0.0, 5.0, 0.0]])
    np.testing.assert_array_equal(out["b"]["c"], updates["b"]["c"])


# -- the leaky RNN and RFLO ---------------------------------------------------


@pytest.mark.parametrize("leak", [0, 0.0, -0.1, 1.5, "a", True, None])
def test_bad_leak_is_a_value_error_naming_it(leak):
  with pytest.raises(ValueError, match="leak"):
    cells.LeakyRNN(N, leak=leak)


def test_leaky_rnn_formula_and_leak_one_is_the_rnn(x64):
  """`h' = (1 - a) h + a tanh(z)`; `leak = 1` steps exactly as `RNN`."""
  leaky = cells.make("leaky_rnn", N, leak=0.3)
  assert isinstance(leaky, cells.LeakyRNN) and leaky.leak == 0.3
  params = leaky.init(jax.random.PRNGKey(0), INPUT)
  h = jax.random.normal(jax.random.PRNGKey(1), (N,), jnp.float64)
  x = jax.random.normal(jax.random.PRNGKey(2), (INPUT,), jnp.float64)
  z = jnp.concatenate([x, h, jnp.ones(1)]) @ params["W"]
  np.testing.assert_allclose(
    leaky.step(params, h, x), 0.7 * h + 0.3 * jnp.tanh(z), rtol=1e-14
  )
  np.testing.assert_array_equal(
    cells.LeakyRNN(N, leak=1.0).step(params, h, x),
    cells.RNN(N).step(params, h, x),
  )


def _example_run(cell, estimator, seed=0):
  """One example: the estimator's gradient at every step for a random
  `dL/dh` covector, and each step's immediate term (the gradient through
  this step's `W` alone, the previous state held fixed)."""
  params, xs, gs = rtrl_problems.make_example_problem(cell, INPUT, T, seed)
  state = cell.initial_state()
  tstate = estimator.init(params, state, jax.random.PRNGKey(0))
  estimates, immediates = [], []
  for x, g in zip(xs, gs):
    immediate = jax.grad(lambda p: jnp.vdot(g[0], cell.step(p, state, x)))(
      params
    )
    tstate, state = estimator.step(params)(tstate, state, x)
    estimates.append(estimator.gradient(params, tstate, g[0])["W"])
    immediates.append(immediate["W"])
  return np.asarray(estimates), np.asarray(immediates)


def test_rflo_trace_on_the_leaky_rnn_has_memory(x64):
  """RFLO on the leaky RNN keeps a trace: after the first step its
  gradient differs from the step's immediate term; on the tanh RNN it is
  the immediate term exactly (what the warning says)."""
  leaky = cells.LeakyRNN(N, leak=0.2)
  estimates, immediates = _example_run(leaky, estimators.make("rflo", leaky))
  np.testing.assert_allclose(estimates[0], immediates[0], rtol=1e-12)
  for t in range(1, T):
    assert rtrl_problems.rel_err(estimates[t], immediates[t]) > 0.1
  rnn = cells.RNN(N)
  with pytest.warns(UserWarning, match="memoryless"):
    rflo = estimators.make("rflo", rnn)
  estimates, immediates = _example_run(rnn, rflo)
  np.testing.assert_allclose(estimates, immediates, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rflo_on_the_leaky_rnn_aligns_with_exact_rtrl(seed, x64):
  """On a small random problem, RFLO's gradient on the leaky RNN (summed
  over the chunk) has a clearly positive cosine to exact RTRL's."""
  cell = cells.LeakyRNN(N, leak=0.2)
  rflo = _per_step_gradients(cell, estimators.make("rflo", cell), seed).sum(0)
  exact = _per_step_gradients(cell, estimators.make("rtrl", cell), seed).sum(0)
  cosine = np.vdot(rflo, exact) / np.linalg.norm(rflo) / np.linalg.norm(exact)
  assert cosine > 0.5


@pytest.mark.parametrize(
  "make_cell",
  [
    lambda: cells.RNN(N),
    lambda: cells.LeakyRNN(N, leak=1.0),
    lambda: cells.make("flax:nnx.SimpleCell", N),
    lambda: sparse_cell("rnn"),
  ],
  ids=["rnn", "leak-1", "flax-simple", "sparse-rnn"],
)
def test_rflo_warns_on_a_cell_without_direct_path(make_cell):
  cell = make_cell()
  with pytest.warns(UserWarning, match="memoryless.*LeakyRNN"):
    estimators.make("rflo", cell)
  with pytest.warns(UserWarning, match="memoryless"):
    estimators.rflo(cell)


@pytest.mark.parametrize(
  "make_cell",
  [
    lambda: cells.LeakyRNN(N, leak=0.1),
    lambda: sparse_cell("leaky_rnn"),
    lambda: cells.LSTM(N),
    lambda: cells.GRU(N),
    lambda: cells.RHN(N),
  ],
  ids=["leaky", "sparse-leaky", "lstm", "gru", "rhn"],
)
def test_rflo_does_not_warn_with_a_direct_path(make_cell):
  cell = make_cell()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    estimators.make("rflo", cell)
    estimators.make("snap1", cell)
  assert not [w for w in caught if issubclass(w.category, UserWarning)]
