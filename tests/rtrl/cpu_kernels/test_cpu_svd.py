"""`rtrl.cpu_kernels.svd`: the batched one-sided Jacobi SVD of r-OK's small
square matrices, and `rtrl.linalg.small_svd`, which routes to it.

It must be an SVD to working precision (float64 against numpy's, any batch
axes, batches that do not fill the SIMD lanes), keep rank-deficient and
badly scaled input exact, give each matrix the same factors whatever batch
it is in, have the derivatives of an SVD, and refuse what it was not built
for."""

from helpers import random_normal
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import linalg
from rtrl.routing import Routing


def _check_is_svd(matrices, u, s, vt, tolerance):
  """a = u diag(s) vt, s non-increasing and non-negative, vt orthogonal, u
  orthonormal on the columns with s > 0 (zero on the others)."""
  matrices, u, s, vt = map(np.asarray, (matrices, u, s, vt))
  c = matrices.shape[-1]
  scale = np.abs(matrices).max(axis=(-2, -1), keepdims=True)
  np.testing.assert_allclose(
    np.einsum("...ik,...k,...kj->...ij", u, s, vt) / np.maximum(scale, 1e-300),
    matrices / np.maximum(scale, 1e-300),
    atol=tolerance,
  )
  assert np.all(s >= 0) and np.all(np.diff(s, axis=-1) <= 0)
  np.testing.assert_allclose(
    np.einsum("...ki,...kj->...ij", vt, vt),
    np.broadcast_to(np.eye(c), vt.shape),
    atol=tolerance,
  )
  positive = (s > 0)[..., None, :] & (s > 0)[..., :, None]
  gram = np.einsum("...ki,...kj->...ij", u, u)
  np.testing.assert_allclose(
    np.where(positive, gram, 0),
    np.where(positive, np.eye(c), 0),
    atol=tolerance,
  )
  np.testing.assert_array_equal(np.where((s == 0)[..., None, :], u, 0), 0)


@pytest.mark.parametrize("size", [1, 2, 3, 9, 17, 32])
def test_an_svd_in_float64(kernels, size, x64):
  """Batch axes of rank 0 to 2, and 37 matrices (not a multiple of the 8
  float64 lanes): an SVD to rounding, singular values numpy's."""
  for batch in [(), (37,), (2, 3)]:
    a = random_normal(batch + (size, size), np.float64, seed=size)
    u, s, vt = kernels.svd(jnp.asarray(a))
    _check_is_svd(a, u, s, vt, tolerance=1e-13)
    np.testing.assert_allclose(
      s,
      np.linalg.svd(a, compute_uv=False),
      rtol=1e-13,
      atol=1e-13 * np.abs(a).max(),
    )


def test_float32_is_accurate_to_its_precision(kernels):
  a = random_normal((50, 17, 17), np.float32, seed=1)
  u, s, vt = kernels.svd(jnp.asarray(a))
  _check_is_svd(a, u, s, vt, tolerance=2e-5)
  np.testing.assert_allclose(
    s,
    np.linalg.svd(a.astype(np.float64), compute_uv=False),
    rtol=1e-5,
    atol=1e-5,
  )


def test_rank_deficient_and_zero_matrices(kernels, x64):
  """r-OK's first step has zero summands, and dependent ones later: the
  zero singular values come out exactly zero (with zero columns of u), and
  the factors are still an SVD."""
  rng = np.random.default_rng(2)
  a = rng.standard_normal((6, 17, 3)) @ rng.standard_normal((6, 3, 17))
  a[1] = 0
  a[2] = np.outer(np.arange(17.0), np.ones(17))
  u, s, vt = kernels.svd(jnp.asarray(a))
  _check_is_svd(a, u, s, vt, tolerance=1e-13)
  s = np.asarray(s)
  assert np.all(s[1] == 0)
  assert np.all(s[2, 1:] <= 1e-13 * s[2, 0])
  assert np.all(s[[0, 3, 4, 5], 3:] <= 1e-13 * s[[0, 3, 4, 5], :1])


@pytest.mark.parametrize("exponent", [-100, 100])
def test_extreme_scales_neither_overflow_nor_underflow(kernels, exponent):
  """float32 squared norms of 2**100 entries would overflow (of 2**-100,
  underflow): each matrix is first scaled by a power of two, so the factors
  of `a * 2**e` are exactly those of `a`, with `s * 2**e`."""
  a = random_normal((20, 9, 9), np.float32, seed=3)
  u, s, vt = kernels.svd(jnp.asarray(a))
  magnitude = np.float32(2.0**exponent)
  u_big, s_big, vt_big = kernels.svd(jnp.asarray(a * magnitude))
  np.testing.assert_array_equal(s_big, np.asarray(s) * magnitude)
  np.testing.assert_array_equal(u_big, u)
  np.testing.assert_array_equal(vt_big, vt)


def test_a_matrix_gets_the_same_factors_in_any_batch(kernels):
  """Lanes converge independently (a converged lane takes identity
  rotations, which are exact), so a matrix's factors are bitwise those it
  gets alone, whatever shares its SIMD register."""
  a = random_normal((40, 17, 17), np.float32, seed=4)
  a[5] *= 1e-3
  a[6] = np.eye(17)
  together = [np.asarray(x) for x in kernels.svd(jnp.asarray(a))]
  for i in (0, 5, 6, 17, 39):
    alone = kernels.svd(jnp.asarray(a[i : i + 1]))
    for x, y in zip(together, alone):
      np.testing.assert_array_equal(x[i], np.asarray(y)[0])


def test_non_finite_input_gives_non_finite_output_and_returns(kernels):
  a = random_normal((3, 5, 5), np.float32, seed=5)
  a[0, 1, 2] = np.nan
  a[1, 0, 0] = np.inf
  _, s, _ = kernels.svd(jnp.asarray(a))
  assert np.isnan(np.asarray(s)[0]).any()
  assert not np.isfinite(np.asarray(s)[1]).all()
  np.testing.assert_allclose(
    s[2], np.linalg.svd(a[2], compute_uv=False), rtol=1e-5
  )


def test_under_vmap_jit_and_scan(kernels, x64):
  a = jnp.asarray(random_normal((4, 3, 9, 9), np.float64, seed=6))
  s = jax.jit(jax.vmap(lambda m: kernels.svd(m)[1]))(a)
  np.testing.assert_allclose(
    s, np.linalg.svd(np.asarray(a), compute_uv=False), rtol=1e-13
  )

  def body(carry, _):
    u, s, vt = kernels.svd(carry)
    return carry + (u * s[..., None, :]) @ vt, s

  _, values = jax.jit(lambda c: jax.lax.scan(body, c, None, length=3))(a)
  expected = [
    np.linalg.svd(np.asarray(a) * 2**k, compute_uv=False) for k in range(3)
  ]
  np.testing.assert_allclose(values, np.stack(expected), rtol=1e-12)


def test_derivatives_are_those_of_the_svd(kernels, x64):
  """Forward and reverse mode of functions that do not depend on the
  singular vectors' signs, against the same through `jnp.linalg.svd`."""
  a = jnp.asarray(random_normal((3, 6, 6), np.float64, seed=7))
  d = jnp.asarray(random_normal((3, 6, 6), np.float64, seed=8))

  def invariants(svd_fn):
    def f(m):
      u, s, vt = svd_fn(m)
      return jnp.sum(jnp.sin(s)) + jnp.sum(
        jnp.cos((u * s[..., None, :] ** 2) @ vt)
      )

    return f

  lapack = lambda m: jnp.linalg.svd(m, full_matrices=False)
  ours, reference = (
    jax.jvp(invariants(fn), (a,), (d,))[1] for fn in (kernels.svd, lapack)
  )
  np.testing.assert_allclose(ours, reference, rtol=1e-10)
  np.testing.assert_allclose(
    jax.grad(invariants(kernels.svd))(a),
    jax.grad(invariants(lapack))(a),
    rtol=1e-10,
    atol=1e-12,
  )


def test_svd_usable_says_no_outside_what_is_built(kernels):
  assert kernels.svd_usable(1, jnp.float64)
  assert kernels.svd_usable(32, jnp.float32)
  assert not kernels.svd_usable(33, jnp.float32)
  assert not kernels.svd_usable(0, jnp.float32)
  assert not kernels.svd_usable(4, jnp.int32)
  assert not kernels.svd_usable(4, jnp.bfloat16)


@pytest.mark.parametrize(
  "shape, dtype",
  [
    ((4, 5), jnp.float32),
    ((33, 33), jnp.float32),
    ((5,), jnp.float32),
    ((3, 3), jnp.int32),
  ],
)
def test_bad_input_is_refused_by_name(kernels, shape, dtype):
  with pytest.raises(ValueError, match="svd needs"):
    kernels.svd(jnp.ones(shape, dtype))


def test_small_svd_routes_square_matrices_to_the_kernel(kernels, x64):
  """`linalg.small_svd` with `Routing(cpu_kernel_svd=True)`: square matrices
  up to 32 on the kernel (the same values as the kernel's), others on
  LAPACK; `Routing()` (the default) sends all to LAPACK."""
  on_kernel = Routing(cpu_kernel_svd=True)
  square = jnp.asarray(random_normal((5, 9, 9), np.float64, seed=9))
  for x, y in zip(
    linalg.small_svd(square, routing=on_kernel), kernels.svd(square)
  ):
    np.testing.assert_array_equal(x, y)
  tall = random_normal((5, 9, 4), np.float64, seed=10)
  for x, y in zip(
    linalg.small_svd(jnp.asarray(tall), routing=on_kernel),
    np.linalg.svd(tall, full_matrices=False),
  ):
    np.testing.assert_allclose(np.abs(x), np.abs(y), rtol=1e-12, atol=1e-12)
  for routing in (None, Routing()):
    lowered = (
      jax.jit(lambda m, r=routing: linalg.small_svd(m, routing=r))
      .lower(square)
      .as_text()
    )
    assert "rtrl_small_svd" not in lowered
  lowered = (
    jax.jit(lambda m: linalg.small_svd(m, routing=on_kernel))
    .lower(square)
    .as_text()
  )
  assert "rtrl_small_svd" in lowered
