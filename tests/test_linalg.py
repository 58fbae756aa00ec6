"""Gram-Schmidt thin QR used by the Kronecker-sum reduction."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import linalg


def _check(rows, basis, coords, atol):
  rows, basis, coords = map(np.asarray, (rows, basis, coords))
  np.testing.assert_allclose(basis.T @ coords, rows.T, atol=atol)
  assert np.allclose(np.tril(coords, -1), 0)
  kept = np.linalg.norm(basis, axis=1) > 0
  gram = basis[kept] @ basis[kept].T
  np.testing.assert_allclose(gram, np.eye(kept.sum()), atol=atol)
  return kept


def test_matches_numpy_qr_in_float64(x64):
  rows = np.random.default_rng(0).normal(size=(6, 40))
  basis, coords = linalg.thin_qr_rows(jnp.asarray(rows))
  _check(rows, basis, coords, atol=1e-12)
  _, r_ref = np.linalg.qr(rows.T)
  # QR is unique up to the signs of R's rows; ours has a positive diagonal.
  np.testing.assert_allclose(np.asarray(coords), np.sign(np.diag(r_ref))[:, None] * r_ref,
                             atol=1e-12)


def test_dependent_zero_and_badly_scaled_rows_float32():
  rng = np.random.default_rng(1)
  rows = rng.normal(size=(6, 64)).astype(np.float32)
  rows[2] = rows[0] - 2 * rows[1]   # dependent
  rows[4] = 0                       # zero
  rows[5] *= 1e-4                   # badly scaled but independent
  basis, coords = jax.jit(linalg.thin_qr_rows)(jnp.asarray(rows))
  assert np.all(np.isfinite(np.asarray(basis)))
  kept = _check(rows, basis, coords, atol=5e-6)
  assert list(kept) == [True, True, False, True, False, True]


def test_all_zero_gives_zeros_and_vmaps():
  basis, coords = jax.vmap(linalg.thin_qr_rows)(jnp.zeros((3, 4, 10)))
  assert not np.any(np.asarray(basis)) and not np.any(np.asarray(coords))


def test_wide_input_is_rejected():
  with pytest.raises(ValueError, match="c <= M"):
    linalg.thin_qr_rows(jnp.ones((5, 3)))
