"""`CustomCell` and the generic estimators (`rtrl.estimators.autodiff_rtrl`, `autodiff_uoro`, `autodiff_snap1`).

User cells that are not Lemma-1: the original GRU of Cho et al. (reset gate
before the recurrent product) and a peephole LSTM with a tuple state. On
them, in float64: exact RTRL == BPTT; UORO is unbiased (Monte Carlo, the
tolerance derived from N as in test_estimators.py); SnAp-1 is exact after
one step, is `(H J + F) ⊙ M` step by step, and is exact for a diagonal
recurrence. The generic path on built-in cells wrapped as CustomCells
matches the Lemma-1 estimators. Both trainers learn a tiny task, and bad
cells and names fail with errors that name the culprit.
"""

import statistics

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from rtrl_custom_cells import N
from rtrl_custom_cells import cho_gru
from rtrl_custom_cells import cho_gru_pattern
from rtrl_custom_cells import cho_gru_step
from rtrl_custom_cells import diagonal_rnn
from rtrl_custom_cells import peephole_lstm
from rtrl_custom_cells import peephole_lstm_step
from rtrl_custom_cells import wrapped
import rtrl_problems
from rtrl_problems import rel_err

import rtrl
from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl import readout
from rtrl.cells import CustomCell
from rtrl.estimators import _sparsity as sparsity

INPUT, OUTPUTS, B, T = 2, 3, 2, 8
RESETS = [(0, None), (3, 0), (5, 1)]
USER_CELLS = {"cho_gru": cho_gru, "peephole_lstm": peephole_lstm}


def make_problem(cell, seed=0):
  """`{'cell', 'readout'}` params and a chunk with resets (float64)."""
  return rtrl_problems.cell_problem(cell, seed, T, B, INPUT, OUTPUTS, RESETS)


def assert_trees_close(a, b, tol, what):
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    assert x.shape == y.shape, what
    assert rel_err(x, y) < tol, f"{what}: rel err {rel_err(x, y):.3g}"


# ---------------------------------------------------------------------------
# Exact RTRL.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cell_name", sorted(USER_CELLS))
def test_autodiff_rtrl_equals_bptt(cell_name, x64):
  """Σ_t of exact RTRL's per-step gradients (frozen_gradients) == full BPTT
  of Σ_t L_t, every leaf of the params dict, rel. error < 1e-12, over 8
  steps with per-example resets."""
  cell = USER_CELLS[cell_name]()
  params, chunk = make_problem(cell)
  total, full = rtrl_problems.summed_online_and_bptt(
    cell, estimators.make("rtrl", cell), params, chunk
  )
  assert_trees_close(total, full, 1e-12, cell_name)
  assert min(np.abs(a).max() for a in jax.tree_util.tree_leaves(full)) > 1e-3


@pytest.mark.parametrize("cls", [cells.RHN, cells.LSTM], ids=["rhn", "lstm"])
def test_autodiff_rtrl_on_wrapped_builtin_equals_lemma1_rtrl(cls, x64):
  """A built-in cell wrapped as a CustomCell: the autodiff RTRL's per-step
  gradients == the Lemma-1 RTRL's (rel. error < 1e-12 at every step)."""
  builtin = cls(hidden_size=N)
  params, chunk = make_problem(builtin)
  custom = wrapped(builtin)

  @jax.jit
  def compute(params, chunk):
    key = jax.random.PRNGKey(0)
    return (
      online.frozen_gradients(
        builtin, estimators.make("rtrl", builtin), params, chunk, key
      )[0],
      online.frozen_gradients(
        custom, estimators.make("rtrl", custom), params, chunk, key
      )[0],
    )

  lemma1, generic = compute(params, chunk)
  for t in range(T):
    assert rel_err(generic["W"][t], lemma1["W"][t]) < 1e-12, t


# ---------------------------------------------------------------------------
# UORO: unbiased.
# ---------------------------------------------------------------------------

UORO_STREAMS, UORO_STEPS = 8000, 5


def per_step_flat_gradients(cell, est, params, xs, gs, key):
  """`(T, p)`: from the initial state, the estimate of `g_t · ds_t/dθ`
  after each step (one example, one PRNG stream)."""
  unravel_state = ravel_pytree(cell.initial_state())[1]
  step = est.step(params)

  def body(carry, inputs):
    tstate, state = step(*carry, inputs[0])
    grad = est.gradient(params, tstate, unravel_state(inputs[1]))
    return (tstate, state), ravel_pytree(grad)[0]

  tstate = est.init(params, cell.initial_state(), key)
  return jax.lax.scan(body, (tstate, cell.initial_state()), (xs, gs))[1]


def test_autodiff_uoro_is_unbiased(x64):
  """Cho GRU, 5 steps: the mean over 8000 PRNG streams of UORO's per-step
  gradient == exact RTRL's, every entry, within z * std / sqrt(N) (z the
  Bonferroni quantile for a family-wise failure of 1e-4) plus a rounding
  floor; the estimate is random after step 1 (not a vacuous check)."""
  cell = cho_gru()
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  rng = np.random.default_rng(0)
  xs = jnp.asarray(rng.standard_normal((UORO_STEPS, INPUT)))
  gs = jnp.asarray(rng.standard_normal((UORO_STEPS, N)))
  exact = jax.jit(
    lambda key: per_step_flat_gradients(
      cell, estimators.make("rtrl", cell), params, xs, gs, key
    )
  )(jax.random.PRNGKey(0))
  uoro = estimators.make("uoro", cell)
  keys = jax.random.split(jax.random.PRNGKey(1000), UORO_STREAMS)
  samples = np.asarray(
    jax.jit(
      jax.vmap(
        lambda key: per_step_flat_gradients(cell, uoro, params, xs, gs, key)
      )
    )(keys)
  )
  exact = np.asarray(exact)
  mean, std = samples.mean(0), samples.std(0, ddof=1)
  z = statistics.NormalDist().inv_cdf(1 - 1e-4 / (2 * exact.size))
  tolerance = z * std / np.sqrt(UORO_STREAMS) + 1e-10 * np.abs(exact).max()
  worst = np.max(np.abs(mean - exact) / tolerance)
  assert worst <= 1, f"UORO mean off by {worst:.2f} tolerances (z={z:.2f})"
  assert std[-1].max() > 1e-3 * np.abs(exact[-1]).max()


# ---------------------------------------------------------------------------
# SnAp-1.
# ---------------------------------------------------------------------------


def flat_jacobians(cell, params, state, x):
  """`(F (d, p), H (d, d))` of one step, by `jax.jacobian` in the test."""
  theta, unravel_params = ravel_pytree(params)
  s, unravel_state = ravel_pytree(state)

  def flat(th, st):
    return ravel_pytree(cell.step(unravel_params(th), unravel_state(st), x))[0]

  return jax.jacobian(flat, argnums=(0, 1))(theta, s)


def dense_influences(cell, est, params, xs):
  """`(T, d, p)`: an estimator's influence after each step from a fresh
  state, read back through `gradient` with the unit covectors."""
  unravel_state = ravel_pytree(cell.initial_state())[1]
  d = ravel_pytree(cell.initial_state())[0].size
  step = est.step(params)

  def body(carry, x):
    tstate, state = step(*carry, x)
    rows = jax.vmap(
      lambda e: ravel_pytree(est.gradient(params, tstate, unravel_state(e)))[0]
    )(jnp.eye(d))
    return (tstate, state), rows

  tstate = est.init(params, cell.initial_state(), jax.random.PRNGKey(0))
  return jax.lax.scan(body, (tstate, cell.initial_state()), xs)[1]


def test_snap1_is_masked_rtrl_recursion_and_exact_at_first_step(x64):
  """Cho GRU, 5 steps from a fresh state: SnAp-1's influence (read back
  densely) == `J' = (H J + F) ⊙ M` computed densely here with the
  hand-derived `M` (rel. 1e-12 at every step); its stored size is nnz(M);
  at step 1 it equals exact RTRL's influence `F`, later it does not (the
  reset gate couples units). Passing `pattern=M` gives the same."""
  cell = cho_gru()
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  xs = jnp.asarray(np.random.default_rng(1).standard_normal((5, INPUT)))
  mask = cho_gru_pattern(params)
  snap = estimators.make("snap1", cell)
  tangent = snap.init(
    params, cell.initial_state(), jax.random.PRNGKey(0)
  ).tangent
  assert sum(a.size for a in tangent) == mask.sum()
  run = jax.jit(
    lambda est: dense_influences(cell, est, params, xs), static_argnums=0
  )
  snapped = np.asarray(run(snap))
  exact = np.asarray(run(estimators.make("rtrl", cell)))
  given = np.asarray(run(estimators.make("snap1", cell, pattern=mask)))

  state, reference = cell.initial_state(), np.zeros_like(snapped[0])
  for t, x in enumerate(xs):
    jac_theta, jac_s = flat_jacobians(cell, params, state, x)
    reference = (np.asarray(jac_s) @ reference + np.asarray(jac_theta)) * mask
    state = cell.step(params, state, x)
    assert rel_err(snapped[t], reference) < 1e-12, t
  np.testing.assert_allclose(snapped[0], exact[0], rtol=1e-12, atol=1e-15)
  assert rel_err(snapped[-1], exact[-1]) > 1e-3
  np.testing.assert_array_equal(given, snapped)


def test_snap1_equals_rtrl_for_a_diagonal_recurrence(x64):
  """`h' = tanh(x W + u ⊙ h + b)`: H is diagonal and each parameter reaches
  one unit, so nothing is dropped: SnAp-1's per-step gradients == exact
  RTRL's at every step of a chunk with resets (rel. 1e-12)."""
  cell = diagonal_rnn()
  params, chunk = make_problem(cell)

  @jax.jit
  def compute(params, chunk):
    return [
      online.frozen_gradients(
        cell, estimators.make(name, cell), params, chunk, jax.random.PRNGKey(0)
      )[0]
      for name in ("rtrl", "snap1")
    ]

  exact, snapped = compute(params, chunk)

  def at(tree, t):  # all leaves at once: u's gradient is 0 after a reset
    return ravel_pytree(jax.tree_util.tree_map(lambda a: a[t], tree))[0]

  for t in range(T):
    assert rel_err(at(snapped, t), at(exact, t)) < 1e-12, t


@pytest.mark.parametrize(
  "cls,per_unit",
  [
    (cells.RHN, lambda p, k: p * k),  # S = 1: each W column, 1 row
    (cells.LSTM, lambda p, k: 2 * 3 * p + p),  # i, f, g reach c and h; o, h
  ],
  ids=["rhn", "lstm"],
)
def test_snap1_stores_nnz_on_wrapped_builtin(cls, per_unit, x64):
  """Wrapped built-in cells, pattern read from F: SnAp-1 stores exactly the
  one-step pattern, P K entries per unit for RHN (S = 1) and 7 P for LSTM."""
  builtin = cls(hidden_size=N)
  cell = wrapped(builtin)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  tangent = (
    estimators.make("snap1", cell)
    .init(params, cell.initial_state(), jax.random.PRNGKey(0))
    .tangent
  )
  p = INPUT + N + 1
  assert sum(a.size for a in tangent) == N * per_unit(p, builtin.num_gates)


def test_sparsity_layout_groups_colours_and_gather():
  """A hand pattern (d=4, p=6): parameters grouped by their column, groups
  of equal size stacked, a parameter reaching no row left out; rows sharing
  a parameter get different colours, the others share one; `gather` puts
  the blocks' values back in parameter order."""
  pattern = np.array(
    [
      [1, 1, 0, 0, 0, 0],
      [1, 0, 1, 0, 0, 0],
      [0, 0, 0, 1, 1, 0],
      [0, 0, 0, 0, 0, 0],
    ],
    bool,
  )
  layout = sparsity.layout(pattern)
  assert layout.nnz == 6
  shapes = sorted((b.rows.shape, b.cols.shape) for b in layout.buckets)
  assert shapes == [((1, 1), (1, 2)), ((1, 2), (1, 1)), ((2, 1), (2, 1))]
  colours = np.zeros(4, int)
  for b in layout.buckets:
    colours[b.rows] = b.colours
  assert colours[0] != colours[1] and colours[2] == colours[0]
  np.testing.assert_array_equal(layout.cotangents.sum(0), [1, 1, 1, 1])
  values = np.concatenate(
    [b.cols.reshape(-1) for b in layout.buckets] + [np.array([-1])]
  )
  np.testing.assert_array_equal(values[layout.gather], [0, 1, 2, 3, 4, -1])


# ---------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------

PERIOD = np.array([0, 0, 1, 1])  # the next symbol needs the previous one


def pattern_chunk(steps, batch, offset):
  """Inputs one-hot of the current symbol, targets the next (batch b starts
  at phase b); the continuation of the previous chunk at `offset`."""
  t = np.arange(steps)[:, None] + np.arange(batch)[None, :] + offset
  symbols = PERIOD[t % 4]
  return online.StepBatch(
    inputs=jax.nn.one_hot(symbols, 2),
    targets=jnp.asarray(PERIOD[(t + 1) % 4]),
    weights=jnp.ones((steps, batch)),
    resets=jnp.zeros((steps, batch), bool),
  )


@pytest.mark.parametrize("trainer_name", ["online_snap1", "tbptt"])
def test_trainers_learn_on_a_custom_cell(trainer_name, x64):
  """Cho GRU on a period-4 pattern (0 0 1 1; the next symbol depends on the
  previous one too): 6 chunks of 40 steps, batch 4, Adam 0.05, `init`
  jitted (SnAp-1 reads its pattern inside the trace); the last chunk's mean
  loss is below 0.1 nats and a fifth of the first's (measured: online
  SnAp-1 0.74 -> 0.006, TBPTT-4 0.52 -> 0.001; ln 2 = 0.69 without
  memory)."""
  cell = cho_gru()
  key = jax.random.PRNGKey(0)
  params = {
    "cell": cell.init(key, 2),
    "readout": readout.linear().init(key, cell.hidden_size, 2),
  }
  optimizer = optax.adam(5e-2)
  if trainer_name == "tbptt":
    trainer = rtrl.make_tbptt_trainer(cell, optimizer, truncation=4)
  else:
    trainer = rtrl.make_online_trainer(
      cell, estimators.make("snap1", cell), optimizer
    )
  state = jax.jit(trainer.init, static_argnums=2)(params, key, 4)
  losses = []
  for c in range(6):
    state, metrics = trainer.run(state, pattern_chunk(40, 4, 40 * c))
    losses.append(float(metrics.loss_sum.sum() / metrics.weight_sum.sum()))
  assert np.all(np.isfinite(losses)), losses
  assert losses[-1] < min(0.1, 0.2 * losses[0]), losses


# ---------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------


def test_lemma1_estimators_refuse_a_custom_cell():
  """'ok' (and every Kronecker estimator) says why it needs a Lemma-1 cell;
  an unknown name lists the generic ones; a stray hyper-parameter is named."""
  cell = cho_gru()
  for name in ("ok", "kf", "ktp"):
    with pytest.raises(
      ValueError,
      match=rf"'{name}' needs a cell in the "
      r"Lemma-1 form.*'rtrl', 'uoro', 'snap1'",
    ):
      estimators.make(name, cell, rank=2)
  with pytest.raises(ValueError, match=r"must be one of \['rtrl', 'snap1'"):
    estimators.make("bogus", cell)
  with pytest.raises(ValueError, match="'rtrl' does not take rank"):
    estimators.make("rtrl", cell, rank=2)
  assert isinstance(
    estimators.make("snap1", cell, pattern=None), estimators.Estimator
  )


@pytest.mark.parametrize(
  "bad_step,what",
  [
    (lambda p, h, x: jnp.concatenate([h, h]), "shape"),
    (lambda p, h, x: h.astype(jnp.float32), "dtype"),
    (lambda p, h, x: (h, h), "structure"),
  ],
  ids=["shape", "dtype", "structure"],
)
def test_step_that_changes_the_state_is_named(bad_step, what, x64):
  """Found from shapes alone (at trace time), by `check_step`, by an
  estimator's step and by BPTT, each naming `step`."""
  cell = CustomCell(bad_step, cho_gru().init, lambda: jnp.zeros(N))
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  x = jnp.zeros(INPUT)
  with pytest.raises(ValueError, match="step must return a state"):
    cell.check_step(params, x)
  est = estimators.make("rtrl", cell)
  tstate = est.init(params, cell.initial_state(), jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match="step must return a state"):
    jax.jit(est.step(params))(tstate, cell.initial_state(), x)
  _, chunk = make_problem(cho_gru())
  with pytest.raises(ValueError, match="step must return a state"):
    bptt.bptt_gradient(
      cell,
      {
        "cell": params,
        "readout": readout.linear().init(jax.random.PRNGKey(0), N, OUTPUTS),
      },
      online.broadcast_state(cell.initial_state(), B),
      chunk,
    )


def test_bad_cell_arguments_are_named():
  init = cho_gru().init
  with pytest.raises(ValueError, match="step must be a callable"):
    CustomCell(None, init, jnp.zeros(N))
  with pytest.raises(ValueError, match="init must be a callable"):
    CustomCell(cho_gru_step, "init", jnp.zeros(N))
  with pytest.raises(ValueError, match="output is required"):
    CustomCell(peephole_lstm_step, init, (jnp.zeros(N), jnp.zeros(N)))
  with pytest.raises(ValueError, match="output must return a 1-D array"):
    CustomCell(
      cho_gru_step, init, jnp.zeros(N), output=lambda h: jnp.outer(h, h)
    )
  with pytest.raises(ValueError, match="output must return a 1-D array"):
    CustomCell(
      peephole_lstm_step, init, (jnp.zeros(N), jnp.zeros(N)), output=lambda s: s
    )
  with pytest.raises(ValueError, match="initial_state must be"):
    CustomCell(cho_gru_step, init, jnp.zeros(N, jnp.int32))
  with pytest.raises(ValueError, match="params returned by init"):
    CustomCell(
      cho_gru_step, lambda k, i: {"W": jnp.zeros(3, jnp.int32)}, jnp.zeros(N)
    ).init(jax.random.PRNGKey(0), INPUT)


def test_bad_state_pattern_and_input_size_are_named(x64):
  """A state of another layout at `init` names `state`; a pattern of the
  wrong shape names `pattern`; SnAp-1 on a cell whose params do not depend
  on the input size (so the input size cannot be told) says so."""
  cell = cho_gru()
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  assert cell.input_size(params) == INPUT
  key = jax.random.PRNGKey(0)
  with pytest.raises(ValueError, match="state must have the layout"):
    estimators.make("uoro", cell).init(params, jnp.zeros(N + 1), key)
  with pytest.raises(ValueError, match=r"pattern must have shape \(d, p\)"):
    estimators.make("snap1", cell, pattern=np.ones((N, 2), bool)).init(
      params, cell.initial_state(), key
    )
  fixed = CustomCell(
    lambda p, h, x: jnp.tanh(p["U"] @ h + x),
    lambda k, i: {"U": jnp.eye(N)},
    jnp.zeros(N),
  )
  with pytest.raises(ValueError, match="cannot tell which input_size"):
    estimators.make("snap1", fixed).init(
      {"U": jnp.eye(N)}, fixed.initial_state(), key
    )
