"""SnAp-1 and RFLO on Lemma-1 cells: their defining structure, in float64.

* One step from a fresh state, both equal exact RTRL (the influence is `F`).
* SnAp-1 is exact RTRL's update restricted to the one-step pattern, and
  exact at every step when the recurrent weights are diagonal.
* RFLO is the same restriction of the update with the path through `W_h`
  removed, and exact at every step when `W_h = 0`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rtrl_problems

from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl import tangents
from rtrl.estimators import _snap1_rflo as snap

N, INPUT = 5, 3  # rtrl_problems.pattern_problem's input size
CELL_NAMES = ["rnn", "rhn", "lstm", "gru"]


_problem = rtrl_problems.pattern_problem  # N = 5 units: the cells' size


def _per_step(cell, name, params, chunk):
  return rtrl_problems.frozen_cell_gradients(
    cell, estimators.make(name, cell), params, chunk
  )


def _with_recurrent(params, cell, transform):
  """params with `W_h`, seen as `(n, K, n)` `[i, k, j]`, replaced."""
  w = params["cell"]["W"]
  recurrent = w[INPUT : INPUT + N].reshape(N, cell.num_gates, N)
  new = transform(recurrent).reshape(N, cell.num_gates * N)
  return {
    "cell": {"W": w.at[INPUT : INPUT + N].set(new)},
    "readout": params["readout"],
  }


@pytest.mark.parametrize("cell_name", CELL_NAMES)
def test_first_step_equals_exact_rtrl(cell_name, x64):
  cell = cells.make(cell_name, N)
  params, chunk = _problem(cell)
  exact = _per_step(cell, "rtrl", params, chunk)
  for name in ("snap1", "rflo"):
    np.testing.assert_allclose(
      _per_step(cell, name, params, chunk)[0], exact[0], rtol=1e-13, atol=1e-15
    )
    # ...and not after: both are approximations on a dense W_h.
    assert (
      rtrl_problems.rel_err(_per_step(cell, name, params, chunk)[3], exact[3])
      > 1e-3
    )


@pytest.mark.parametrize("cell_name", CELL_NAMES)
def test_snap1_exact_for_diagonal_recurrence(cell_name, x64):
  """`W_h[i, k n + j] = 0` for `i != j`: `H` is block-diagonal per unit and
  SnAp-1 drops nothing, at every step, resets included."""
  cell = cells.make(cell_name, N)
  params, chunk = _problem(cell, seed=1)
  params = _with_recurrent(params, cell, lambda r: r * jnp.eye(N)[:, None, :])
  np.testing.assert_allclose(
    _per_step(cell, "snap1", params, chunk),
    _per_step(cell, "rtrl", params, chunk),
    rtol=1e-12,
    atol=1e-15,
  )


@pytest.mark.parametrize("cell_name", CELL_NAMES)
def test_rflo_exact_without_recurrent_weights(cell_name, x64):
  cell = cells.make(cell_name, N)
  params, chunk = _problem(cell, seed=2)
  params = _with_recurrent(params, cell, jnp.zeros_like)
  np.testing.assert_allclose(
    _per_step(cell, "rflo", params, chunk),
    _per_step(cell, "rtrl", params, chunk),
    rtol=1e-12,
    atol=1e-15,
  )


def _dense(influence):
  """`(S, P, K, n)` unit-diagonal influence as the exact layout
  `G[s n + i, k, j, p] = [i = j] J[s, p, k, j]`."""
  num_rows, n = influence.shape[0], influence.shape[-1]
  eye = jnp.eye(n, dtype=influence.dtype)
  dense = jnp.einsum("spkj,ij->sikjp", influence, eye)
  return dense.reshape((num_rows * n,) + dense.shape[2:])


def _unit_diagonal(dense):
  """The `i = j` entries of an exact-layout influence, as `(S, P, K, n)`."""
  n = dense.shape[2]
  return jnp.einsum("sjkjp->spkj", dense.reshape((-1, n) + dense.shape[1:]))


@pytest.mark.parametrize("cell_name", CELL_NAMES)
def test_update_is_exact_update_on_the_pattern(cell_name, x64):
  """From a random unit-diagonal influence, SnAp-1's step == exact RTRL's
  step `H G + F` read on the pattern; RFLO's == the same with the path
  through `W_h` removed (`H` = its direct part)."""
  cell = cells.make(cell_name, N)
  rng = np.random.default_rng(3)
  params, xs, _ = rtrl_problems.make_example_problem(
    cell, INPUT, steps=1, seed=3
  )
  state = cell.rows_to_state(
    jnp.asarray(rng.standard_normal((cell.num_state_rows, N)))
  )
  influence = jnp.asarray(
    rng.standard_normal((cell.num_state_rows, INPUT + N + 1, cell.num_gates, N))
  )
  _, jac = cell.linearized_step(params, state, xs[0])

  def exact_update(jac):
    propagated = tangents.propagate_factors(
      jac, cell.hidden_row, _dense(influence)
    )
    return _unit_diagonal(
      tangents.add_scaled_D_to_factors(propagated, jac.hhat, jac)
    )

  for name, expected in [
    ("snap1", exact_update(jac)),
    (
      "rflo",
      exact_update(
        jac._replace(recurrent_weights=jnp.zeros_like(jac.recurrent_weights))
      ),
    ),
  ]:
    est = estimators.make(name, cell)
    tstate = est.init(params, state, jax.random.PRNGKey(0))
    new, _ = est.step(params)(
      tstate._replace(tangent=tuple(influence)), state, xs[0]
    )
    np.testing.assert_allclose(
      jnp.stack(new.tangent), expected, rtol=1e-12, atol=1e-14
    )


def test_unit_jacobians_are_blocks_of_H(x64):
  """SnAp-1's `(n, S, S)` blocks are the diagonal blocks of the dense `H`;
  RFLO's are `dfds`."""
  cell = cells.make("lstm", N)
  params, xs, _ = rtrl_problems.make_example_problem(cell, INPUT, steps=1)
  state = cell.rows_to_state(
    jnp.asarray(np.random.default_rng(4).standard_normal((2, N)))
  )
  _, jac = cell.linearized_step(params, state, xs[0])
  h = tangents.recurrent_jacobian_t(jac, cell.hidden_row).T.reshape(
    2, N, 2, N
  )  # [s, j, t, i]
  blocks = jnp.einsum("sjtj->jst", h)
  np.testing.assert_allclose(
    snap.snap1_unit_jacobian(jac, cell.hidden_row),
    blocks,
    rtol=1e-13,
    atol=1e-15,
  )
  np.testing.assert_array_equal(snap.rflo_unit_jacobian(jac, 1), jac.dfds)


@pytest.mark.parametrize("name", ["snap1", "rflo"])
def test_memory_is_unit_diagonal(name):
  """The influence has `S P K n` entries, not exact RTRL's `S n P K n`: one
  `(P, K, n)` array per state row."""
  cell = cells.make("lstm", 6)
  params = cell.init(jax.random.PRNGKey(0), INPUT)
  est = estimators.make(name, cell)
  tstate = est.init(params, cell.initial_state(), jax.random.PRNGKey(1))
  assert [a.shape for a in tstate.tangent] == [(INPUT + 6 + 1, 4, 6)] * 2


def _unit_pattern(cell):
  """`(S n, P K n)` bool over the flat state (rows) and flat `W`: state
  entry `(s, j)` keeps column `k n + j` of every row of `W`."""
  n, k, s = N, cell.num_gates, cell.num_state_rows
  unit_of_column = np.tile(np.arange(n), k)  # (K n,)
  per_row = np.arange(n)[:, None] == unit_of_column[None, :]  # (n, K n)
  return np.tile(per_row, (s, INPUT + N + 1))


@pytest.mark.parametrize("cell_name", ["rhn", "lstm", "gru"])
def test_lemma1_snap1_equals_autodiff_snap1(cell_name, x64):
  """The Lemma-1 SnAp-1 and the autodiff one (`CustomCell` wrapping the same
  cell) agree at every step: with the pattern read from the one-step
  Jacobian for the one-row cells, with the unit pattern given for the LSTM
  (whose one-step pattern is smaller: the output gate does not reach `c`
  in one step, so the strict pattern drops what the unit pattern keeps)."""
  cell = cells.make(cell_name, N)
  wrapped = cells.as_custom(cell)
  params, chunk = _problem(cell, seed=5)
  pattern = _unit_pattern(cell) if cell_name == "lstm" else None
  generic, _ = online.frozen_gradients(
    wrapped,
    estimators.make("snap1", wrapped, pattern=pattern),
    params,
    chunk,
    jax.random.PRNGKey(1),
  )
  generic = np.asarray(generic["W"])
  if cell_name == "gru":  # the masked entries of W: zero in both
    generic = generic * cell.weight_mask(INPUT)
  np.testing.assert_allclose(
    _per_step(cell, "snap1", params, chunk), generic, rtol=1e-11, atol=1e-14
  )
