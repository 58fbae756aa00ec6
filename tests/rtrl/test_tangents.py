"""The state-major factor helpers of `rtrl.tangents` against dense float64
references: `H A`, `A + D ⊗ c`, `<A, D>`, `g · A`, and the structured rows
of the Kronecker-sum reduction on both of its GEMM paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import cells
from rtrl import cpu_kernels
from rtrl import tangents
from rtrl.routing import Routing

N, INPUT, COPIES = 5, 3, 4


def _setup(cell_cls, seed=0):
  """A cell's step Jacobians at a random state, and random factors
  `(S n, K, n, COPIES)`, in float64."""
  cell = cell_cls(hidden_size=N)
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  params = cell.init(keys[0], INPUT)
  rows = 0.5 * jax.random.normal(keys[1], (cell.num_state_rows, N))
  x = jax.random.normal(keys[2], (INPUT,))
  _, jac = cell.linearized_step(params, cell.rows_to_state(rows), x)
  shape = (cell.num_state_rows * N, cell.num_gates, N, COPIES)
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
  # dense_D_factor holds D[j, s, k] at (s n + j, k, j), zeros elsewhere.
  expected_d = np.zeros((s, n, k, n))
  for j in range(n):
    expected_d[:, j, :, j] = np.asarray(jac.D)[j]
  np.testing.assert_array_equal(dense_d, expected_d.reshape(s * n, k, n))

  propagated = tangents.propagate_factors(jac, cell.hidden_row, factors)
  np.testing.assert_allclose(
    np.asarray(propagated).reshape(s * n, k * n, COPIES),
    np.einsum("ab,bcr->acr", _dense_H(jac, cell.hidden_row), flat),
    rtol=1e-13,
    atol=1e-14,
  )

  coef = jnp.arange(1.0, COPIES + 1)
  np.testing.assert_allclose(
    tangents.add_scaled_D_to_factors(factors, coef, jac),
    np.asarray(factors) + dense_d[..., None] * np.asarray(coef),
    rtol=1e-14,
    atol=1e-15,
  )
  np.testing.assert_allclose(
    tangents.inner_with_D_factors(factors, jac),
    np.einsum("akjr,akj->r", np.asarray(factors), dense_d),
    rtol=1e-13,
    atol=1e-14,
  )

  g = jax.random.normal(jax.random.PRNGKey(9), (s, n))
  np.testing.assert_allclose(
    tangents.contract_factors(factors, g),
    np.einsum("a,akjr->kjr", np.asarray(g).reshape(-1), np.asarray(factors)),
    rtol=1e-13,
    atol=1e-14,
  )


@pytest.mark.parametrize(
  "routing",
  [
    Routing(rows_first_max_floats=2**62),
    Routing(),
    Routing(elementwise_mix_max_rank=2**62),
    Routing(cpu_kernel_products=True, cpu_kernel_products_min_rank=0),
  ],
  ids=[
    "row-major copy",
    "tall columns, GEMM mix",
    "tall columns, multiply-add mix",
    "tall columns, CPU kernels",
  ],
)
def test_factors_and_D_rows_equal_the_stacked_rows(routing, x64):
  """Every route (the row-major copy for small stacks, the tall
  `(S n K n, r)` columns mixed by a GEMM or by multiply-adds, and the CPU
  kernels' Gram matrix and mixing) gives the Gram matrix and the
  combinations of the explicit rows `[A_1..A_r, dense_D_factor]`."""
  if routing.cpu_kernel_products and not cpu_kernels.usable(
    COPIES, jnp.float64
  ):
    pytest.skip("rtrl.cpu_kernels not built here (no C++ compiler?)")
  cell, jac, factors = _setup(cells.LSTM, seed=1)
  stacked = np.concatenate(
    [
      np.moveaxis(np.asarray(factors), -1, 0).reshape(COPIES, -1),
      np.asarray(tangents.dense_D_factor(jac)).reshape(1, -1),
    ]
  )
  rows = tangents.factors_and_D_rows(factors, jac, routing=routing)
  np.testing.assert_allclose(
    rows.gram(None), stacked @ stacked.T, rtol=1e-13, atol=1e-13
  )
  # The reduction combines into r rows, its refinement into r + 1.
  for num_out in (3, COPIES, COPIES + 1):
    mix = jax.random.normal(jax.random.PRNGKey(num_out), (num_out, COPIES + 1))
    combined = np.moveaxis(np.asarray(rows.combine(mix)), -1, 0)
    np.testing.assert_allclose(
      combined.reshape(num_out, -1),
      np.asarray(mix) @ stacked,
      rtol=1e-13,
      atol=1e-13,
    )
    # The refinement pass's Gram matrix of `T @ rows`.
    np.testing.assert_allclose(
      rows.gram(mix),
      (np.asarray(mix) @ stacked) @ (np.asarray(mix) @ stacked).T,
      rtol=1e-12,
      atol=1e-12,
    )


def _blocks_with_edge_cases(shape, seed):
  """Random `(n, S, K)` blocks plus a zero block, a rank-one block and a
  block whose two singular values are equal (when S = K = 2 fits)."""
  blocks = np.random.RandomState(seed).randn(*shape)
  blocks[0] = 0.0
  if shape[1] > 1 and shape[2] > 1:
    blocks[1] = np.outer(
      np.arange(1.0, shape[1] + 1), np.arange(1.0, shape[2] + 1)
    )
    blocks[2] = 0.0
    blocks[2, 0, 0] = blocks[2, 1, 1] = 3.0
  return blocks


@pytest.mark.parametrize(
  "shape",
  [
    (6, 1, 1),
    (6, 1, 2),
    (6, 1, 4),
    (6, 3, 1),
    (6, 2, 4),
    (6, 2, 2),
    (6, 4, 2),
    (6, 3, 3),
  ],
)
def test_block_svd_of_D_is_an_svd_of_every_block(shape, x64):
  """Closed forms (one-row, one-column and two-row blocks) and the library
  fallback: singular values equal numpy's, the factors reproduce each block
  to rounding and are orthonormal where the singular value is positive."""
  blocks = _blocks_with_edge_cases(shape, seed=sum(shape))
  jac = cells.StepJacobians(
    D=jnp.asarray(blocks), dfds=None, recurrent_weights=None, hhat=None
  )
  left, singular_values, right = (
    np.asarray(a) for a in tangents.block_svd_of_D(jac)
  )
  q = min(shape[1:])
  assert left.shape == (shape[0], shape[1], q)
  assert right.shape == (shape[0], shape[2], q)
  np.testing.assert_allclose(
    np.sort(singular_values, axis=1),
    np.sort(np.linalg.svd(blocks, compute_uv=False), axis=1),
    atol=1e-13,
  )
  np.testing.assert_allclose(
    np.einsum("nsq,nq,nkq->nsk", left, singular_values, right),
    blocks,
    atol=1e-13,
  )
  for j in range(shape[0]):
    keep = singular_values[j] > 1e-12
    for vectors in (left[j][:, keep], right[j][:, keep]):
      np.testing.assert_allclose(
        vectors.T @ vectors, np.eye(keep.sum()), atol=1e-12
      )


@pytest.mark.parametrize("q", [1, 2, 9, 256, 257, 700])
def test_descending_positions_match_a_stable_argsort(q):
  """Both paths (pairwise comparisons up to PAIRWISE_SORT_MAX, a sort
  above), with many ties; a NaN goes first, not lost."""
  from rtrl.kronecker import diagonal_mixing  # pylint: disable=g-import-not-at-top

  for seed in range(3):
    d = np.random.RandomState(seed).randint(0, 6, size=q).astype(np.float32)
    positions = np.asarray(diagonal_mixing.descending_positions(jnp.asarray(d)))
    expected = np.empty(q, int)
    expected[np.argsort(-d, kind="stable")] = np.arange(q)
    np.testing.assert_array_equal(positions, expected)
  if q > 1:
    d = np.arange(q, dtype=np.float32)
    d[q // 2] = np.nan
    positions = np.asarray(diagonal_mixing.descending_positions(jnp.asarray(d)))
    assert positions[q // 2] == 0
    assert sorted(positions) == list(range(q))
