"""The state-major factor helpers of `rtrl.tangents` against dense float64
references: `H A`, `A + D ⊗ c`, `<A, D>`, `g · A`, and the structured rows
of the Kronecker-sum reduction on both of its GEMM paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import cells, tangents

N, INPUT, COPIES = 5, 3, 4


def _setup(cell_cls, seed=0):
  """A cell's step Jacobians at a random state, and random factors
  `(S, n, K, n, COPIES)`, in float64."""
  cell = cell_cls(hidden_size=N)
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  params = cell.init(keys[0], INPUT)
  rows = 0.5 * jax.random.normal(keys[1], (cell.num_state_rows, N))
  x = jax.random.normal(keys[2], (INPUT,))
  _, jac = cell.linearized_step(params, cell.rows_to_state(rows), x)
  shape = (cell.num_state_rows, N, cell.num_gates, N, COPIES)
  factors = jax.random.normal(keys[3], shape)
  return cell, jac, factors


def _dense_H(jac, hidden_row):
  return np.asarray(tangents.recurrent_jacobian_t(jac, hidden_row)).T


@pytest.mark.parametrize("cell_cls", [cells.RNN, cells.RHN, cells.LSTM])
def test_factor_helpers_equal_dense_references(cell_cls, x64):
  cell, jac, factors = _setup(cell_cls)
  s, n, k = cell.num_state_rows, N, cell.num_gates
  flat = np.asarray(factors).reshape(s * n, k * n, COPIES)
  dense_d = np.asarray(tangents.dense_D_factor(jac))
  # dense_D_factor holds D[j, s, k] at (s, j, k, j) and zeros elsewhere.
  expected_d = np.zeros((s, n, k, n))
  for j in range(n):
    expected_d[:, j, :, j] = np.asarray(jac.D)[j]
  np.testing.assert_array_equal(dense_d, expected_d)

  propagated = tangents.propagate_factors(jac, cell.hidden_row, factors)
  np.testing.assert_allclose(
      np.asarray(propagated).reshape(s * n, k * n, COPIES),
      np.einsum("ab,bcr->acr", _dense_H(jac, cell.hidden_row), flat),
      rtol=1e-13, atol=1e-14)

  coef = jnp.arange(1.0, COPIES + 1)
  np.testing.assert_allclose(
      tangents.add_scaled_D_to_factors(factors, coef, jac),
      np.asarray(factors) + dense_d[..., None] * np.asarray(coef),
      rtol=1e-14, atol=1e-15)
  np.testing.assert_allclose(
      tangents.inner_with_D_factors(factors, jac),
      np.einsum("sikjr,sikj->r", np.asarray(factors), dense_d),
      rtol=1e-13, atol=1e-14)

  g = jax.random.normal(jax.random.PRNGKey(9), (s, n))
  np.testing.assert_allclose(
      tangents.contract_factors(factors, g),
      np.einsum("si,sikjr->kjr", np.asarray(g), np.asarray(factors)),
      rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("rows_first_max_floats", [2**62, 0],
                         ids=["row-major copy", "tall columns"])
def test_factors_and_D_rows_equal_the_stacked_rows(rows_first_max_floats,
                                                   monkeypatch, x64):
  """Both GEMM paths (the CPU row-major copy for small stacks, and the tall
  `(S n K n, r)` columns) give the Gram matrix and the combinations of the
  explicit rows `[A_1..A_r, dense_D_factor]`."""
  monkeypatch.setattr(tangents, "_ROWS_FIRST_MAX_FLOATS",
                      rows_first_max_floats)
  cell, jac, factors = _setup(cells.LSTM, seed=1)
  stacked = np.concatenate(
      [np.moveaxis(np.asarray(factors), -1, 0).reshape(COPIES, -1),
       np.asarray(tangents.dense_D_factor(jac)).reshape(1, -1)])
  rows = tangents.factors_and_D_rows(factors, jac)
  np.testing.assert_allclose(rows.gram(None), stacked @ stacked.T,
                             rtol=1e-13, atol=1e-13)
  mix = jax.random.normal(jax.random.PRNGKey(5), (3, COPIES + 1))
  combined = np.moveaxis(np.asarray(rows.combine(mix)), -1, 0)
  np.testing.assert_allclose(combined.reshape(3, -1),
                             np.asarray(mix) @ stacked, rtol=1e-13,
                             atol=1e-13)
  # The refinement pass's Gram matrix of `T @ rows`.
  np.testing.assert_allclose(rows.gram(mix), (np.asarray(mix) @ stacked)
                             @ (np.asarray(mix) @ stacked).T,
                             rtol=1e-12, atol=1e-12)
