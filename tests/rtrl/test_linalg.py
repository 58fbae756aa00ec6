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
  np.testing.assert_allclose(
    np.asarray(coords), np.sign(np.diag(r_ref))[:, None] * r_ref, atol=1e-12
  )


def test_dependent_zero_and_badly_scaled_rows_float32():
  rng = np.random.default_rng(1)
  rows = rng.normal(size=(6, 64)).astype(np.float32)
  rows[2] = rows[0] - 2 * rows[1]  # dependent
  rows[4] = 0  # zero
  rows[5] *= 1e-4  # badly scaled but independent
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


@pytest.mark.parametrize("refine", [True, False])
def test_gram_qr_rows_orthonormal_and_reconstructs_float64(x64, refine):
  rng = np.random.default_rng(2)
  rows = rng.normal(size=(6, 40)) * np.exp(rng.uniform(-3, 3, (6, 1)))
  rows[3] = rows[0] - 2 * rows[1]  # dependent
  rows[4] = 0  # zero
  transform, coords = linalg.gram_qr_rows(jnp.asarray(rows), refine)
  basis = np.asarray(transform) @ rows
  np.testing.assert_allclose(
    np.asarray(coords).T @ basis, rows, atol=1e-12 * np.abs(rows).max()
  )
  kept = np.linalg.norm(basis, axis=1) > 0.5
  assert kept.sum() == 4 and np.allclose(basis[~kept], 0, atol=1e-6)
  np.testing.assert_allclose(
    basis[kept] @ basis[kept].T, np.eye(4), atol=1e-12 if refine else 1e-9
  )


@pytest.mark.parametrize("refine", [True, False])
def test_gram_qr_together_is_each_gram_qr_exactly(x64, refine):
  """Factorised by one stacked call, each set of rows gets the very
  transform and coordinates it gets alone (bit for bit: the batched
  decomposition treats every matrix on its own)."""
  rng = np.random.default_rng(4)
  left = jnp.asarray(rng.normal(size=(5, 30)))
  right = np.asarray(rng.normal(size=(5, 200)))
  right[2] = 0
  right = jnp.asarray(right)
  together = linalg.gram_qr_together(
    [linalg.gram_of_rows(left), linalg.gram_of_rows(right)], refine
  )
  alone = [
    linalg.gram_qr_rows(left, refine),
    linalg.gram_qr_rows(right, refine),
  ]
  for (t, c), (t_ref, c_ref) in zip(together, alone):
    np.testing.assert_array_equal(np.asarray(t), np.asarray(t_ref))
    np.testing.assert_array_equal(np.asarray(c), np.asarray(c_ref))


def test_gram_qr_together_rejects_different_sizes():
  with pytest.raises(ValueError, match=r"one square shape \(c, c\)"):
    linalg.gram_qr_together(
      [
        linalg.gram_of_rows(jnp.ones((3, 8))),
        linalg.gram_of_rows(jnp.ones((4, 8))),
      ],
      False,
    )


def test_gram_qr_rows_zero_and_short_rows_float32():
  transform, coords = jax.jit(linalg.gram_qr_rows)(jnp.zeros((4, 3)))
  assert np.all(np.asarray(transform) == 0) and np.all(np.asarray(coords) == 0)
  rows = jnp.asarray(np.random.default_rng(3).normal(size=(4, 3)), jnp.float32)
  transform, coords = linalg.gram_qr_rows(rows)  # M < c: rank 3
  assert np.all(np.isfinite(np.asarray(transform)))
  np.testing.assert_allclose(
    np.asarray(coords.T @ (transform @ rows)), np.asarray(rows), atol=1e-5
  )


def test_matmul_precision_default_and_names():
  assert linalg.matmul_precision() == jax.lax.Precision.HIGHEST
  with pytest.raises(ValueError, match="matmul precision"):
    linalg.check_matmul_precision("fp8")
  with jax.default_matmul_precision("tensorfloat32"):
    assert linalg.matmul_precision() == jax.lax.Precision.HIGH


def test_jit_retraces_when_the_precision_context_changes():
  """`jax.default_matmul_precision` is in the jit cache key: one jitted
  function called under 'highest' and then 'bfloat16' is traced twice, each
  trace with its own precision, and back under 'highest' reuses the first."""
  traced = []

  @jax.jit
  def product(a, b):
    traced.append(linalg.matmul_precision())
    return linalg.matmul(a, b)

  a = jnp.ones((4, 4))
  with jax.default_matmul_precision("highest"):
    product(a, a)
    highest = str(jax.make_jaxpr(linalg.matmul)(a, a))
  with jax.default_matmul_precision("bfloat16"):
    product(a, a)
    bfloat16 = str(jax.make_jaxpr(linalg.matmul)(a, a))
  with jax.default_matmul_precision("highest"):
    product(a, a)
  assert traced == [jax.lax.Precision.HIGHEST, jax.lax.Precision.DEFAULT]
  assert "HIGHEST" in highest and "HIGHEST" not in bfloat16


@pytest.mark.parametrize("shape", [(16, 128, 1, 4), (7, 3), (5,), (1,)])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_computed_once_returns_its_input_exactly(shape, dtype, x64):
  """Routing through the identity changes no finite value (odd sizes are
  returned as they are), under jit and vmap too."""
  x = jax.random.normal(jax.random.PRNGKey(0), shape, dtype) * 1e3
  np.testing.assert_array_equal(jax.jit(linalg.computed_once)(x), x)
  np.testing.assert_array_equal(
    jax.vmap(linalg.computed_once)(x[None]), x[None]
  )


def test_computed_once_is_a_dot_in_the_compiled_step():
  """The point of it: the compiled function holds a dot where the identity
  is applied (XLA keeps it, so the producer is written out once)."""
  x = jnp.ones((16, 128, 4))
  text = (
    jax.jit(lambda a: jnp.tanh(linalg.computed_once(jax.nn.sigmoid(a))))
    .lower(x)
    .compile()
    .as_text()
  )
  assert "dot(" in text


@pytest.mark.parametrize("k", [1, 3, 8])
def test_matmul_unrolled_is_the_product(k, x64):
  """The multiply-add form of `a @ b` equals the product in float64 (to the
  rounding of a k-term sum), under jit and vmap."""
  a = jax.random.normal(jax.random.PRNGKey(0), (4, 300, k))
  b = jax.random.normal(jax.random.PRNGKey(1), (4, k, 5))
  expected = np.einsum("bmk,bkj->bmj", np.asarray(a), np.asarray(b))
  np.testing.assert_allclose(
    jax.jit(jax.vmap(linalg.matmul_unrolled))(a, b),
    expected,
    rtol=1e-13,
    atol=1e-13,
  )
  np.testing.assert_allclose(
    linalg.matmul_unrolled(a[0], b[0]), expected[0], rtol=1e-13, atol=1e-13
  )


@pytest.mark.parametrize(
  "a_shape, b_shape", [((5, 3), (4, 2)), ((5, 0), (0, 2)), ((5,), (5, 2))]
)
def test_matmul_unrolled_rejects_bad_shapes(a_shape, b_shape):
  with pytest.raises(ValueError, match=r"a \(M, k\) and b \(k, m\)"):
    linalg.matmul_unrolled(jnp.ones(a_shape), jnp.ones(b_shape))
