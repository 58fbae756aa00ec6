"""Tests for `rtrl.kronecker.kronecker_sum_reduce` (Algorithm 4, r-OK and
r-B-OK): unbiased with the optimal variance, exact at sufficient Kronecker
rank, Eckart-Young when biased, finite on degenerate input; with its small
SVDs on the CPU Jacobi kernel and on `jnp.linalg.svd` (what GPUs run).
Monte Carlo tolerances: `monte_carlo.py`.
"""

import functools

import jax
import jax.numpy as jnp
from monte_carlo import NUM_SAMPLES
from monte_carlo import SMALL
from monte_carlo import assert_mean_error_matches
from monte_carlo import assert_mean_matches
from monte_carlo import keys
import numpy as np
import pytest

from rtrl import kronecker
from rtrl.routing import Routing

# The closed form, jitted: eager dispatch compiles every small op separately.
_optimal_variance = jax.jit(kronecker.optimal_variance, static_argnums=1)


# The route is a static argument: each `Routing` is its own compiled sampler.
@functools.partial(jax.jit, static_argnames=("biased", "kernel_svd"))
def _reduce_samples(us, As, sample_keys, biased=False, kernel_svd=False):
  routing = Routing(cpu_kernel_svd=kernel_svd)
  us_new, As_new = jax.vmap(
    lambda key: kronecker.kronecker_sum_reduce(
      us, As, key, biased=biased, routing=routing
    )
  )(sample_keys)
  return us_new, As_new, jnp.einsum("ska,skm->sam", us_new, As_new)


@pytest.fixture(params=[True, False], ids=["kernel_svd", "lapack_svd"])
def kernel_svd(request):
  """The reduction's small SVDs on the CPU Jacobi kernel (the default on
  CPU where it builds) or on `jnp.linalg.svd` (what GPUs and TPUs run)."""
  if request.param:
    request.getfixturevalue("kernels")  # skips where they cannot be built
  return request.param


def test_each_route_reaches_the_compiled_reduction(kernels):
  """The two routes compile to different programs: the kernel's custom
  call in one, not in the other."""
  us, As = jnp.ones((4, 5)), jnp.ones((4, 9))
  lowered = {
    route: _reduce_samples.lower(us, As, keys(0, 2), kernel_svd=route).as_text()
    for route in (True, False)
  }
  assert "rtrl_small_svd" in lowered[True]
  assert "rtrl_small_svd" not in lowered[False]


def _unfolded(us, As):
  return np.asarray(us, np.float64).T @ np.asarray(As, np.float64)


# Shapes (r + 1, a) = (4, 5) and (4, 9) recur below so that the compiled
# sampler is shared between tests.
@pytest.mark.parametrize("rank,a,M", [(1, 3, 6), (3, 5, 9), (3, 2, 8)])
def test_kronecker_sum_reduce_unbiased_and_optimal(x64, rank, a, M, kernel_svd):
  rng = np.random.default_rng(rank * 7 + a)
  us = jnp.asarray(rng.standard_normal((rank + 1, a)))
  As = jnp.asarray(rng.standard_normal((rank + 1, M)))
  G = _unfolded(us, As)
  us_new, As_new, samples = map(
    np.asarray, _reduce_samples(us, As, keys(rank + 20), kernel_svd=kernel_svd)
  )
  assert us_new.shape == (NUM_SAMPLES, rank, a)
  assert As_new.shape == (NUM_SAMPLES, rank, M)
  assert_mean_matches(samples, G, scale=np.linalg.norm(G))
  # Theorem 3 / Lemma 3: G' has the optimal variance of C = L R^T, whose
  # singular values are G's.
  variance = float(_optimal_variance(jnp.asarray(G), min(rank, a)))
  squared_errors = np.sum((samples - G) ** 2, axis=(1, 2))
  assert_mean_error_matches(squared_errors, variance)
  np.testing.assert_allclose(squared_errors, variance, rtol=1e-9, atol=1e-12)
  if a > rank:
    assert variance > 0
  # Norm balancing: ||u'_j|| = ||A'_j||.
  np.testing.assert_allclose(
    np.linalg.norm(us_new, axis=-1), np.linalg.norm(As_new, axis=-1), rtol=1e-9
  )


def test_kronecker_sum_reduce_exact_when_kronecker_rank_suffices(
  x64, kernel_svd
):
  rng = np.random.default_rng(5)
  rank = 3
  sample_keys = keys(12, SMALL)
  # Linearly dependent u's: G = sum over r+1 terms has Kronecker rank <= r.
  us = rng.standard_normal((rank + 1, 5))
  us[-1] = 0.3 * us[0] - 2.0 * us[1]
  As = rng.standard_normal((rank + 1, 9))
  # Dependent A's instead.
  us2 = rng.standard_normal((rank + 1, 5))
  As2 = rng.standard_normal((rank + 1, 9))
  As2[0] = As2[2]
  # Only one non-zero summand (Kronecker rank 1).
  us3 = np.zeros((rank + 1, 5))
  us3[-1] = rng.standard_normal(5)
  As3 = rng.standard_normal((rank + 1, 9))
  for biased in (False, True):
    for u, A in [(us, As), (us2, As2), (us3, As3)]:
      G = _unfolded(u, A)
      *_, samples = _reduce_samples(
        jnp.asarray(u),
        jnp.asarray(A),
        sample_keys,
        biased=biased,
        kernel_svd=kernel_svd,
      )
      np.testing.assert_allclose(
        np.asarray(samples),
        np.broadcast_to(G, samples.shape),
        atol=1e-12 * max(1.0, np.linalg.norm(G)),
      )


def test_kronecker_sum_reduce_biased_is_eckart_young(x64):
  rng = np.random.default_rng(6)
  us = jnp.asarray(rng.standard_normal((4, 5)))
  As = jnp.asarray(rng.standard_normal((4, 9)))
  G = _unfolded(us, As)
  us_new, As_new, samples = _reduce_samples(us, As, keys(0, SMALL), biased=True)
  u, s, vt = np.linalg.svd(G, full_matrices=False)
  truncated = (u[:, :3] * s[:3]) @ vt[:3]
  np.testing.assert_allclose(np.asarray(samples[0]), truncated, atol=1e-12)
  np.testing.assert_allclose(np.asarray(samples[1]), truncated, atol=1e-12)
  np.testing.assert_allclose(
    np.linalg.norm(us_new, axis=-1), np.linalg.norm(As_new, axis=-1), rtol=1e-9
  )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_kronecker_sum_reduce_degenerate_inputs_no_nan(x64, dtype, kernel_svd):
  rng = np.random.default_rng(7)
  sample_keys = keys(13, SMALL)
  u1 = rng.standard_normal(5)
  A1 = rng.standard_normal(9)
  zero_u, zero_a = np.zeros(5), np.zeros(9)
  cases = {
    # First RTRL step: everything stored is zero, and F = h (x) D too.
    "all_zero": (np.zeros((4, 5)), np.zeros((4, 9)), True),
    # Exact cancellation: u2 = -u1, A2 = A1.
    "cancel": (
      np.stack([u1, -u1, zero_u, zero_u]),
      np.stack([A1, A1, zero_a, zero_a]),
      True,
    ),
    # Stored factors zero, only the new summand h (x) D is non-zero.
    "one_term": (
      np.stack([zero_u, zero_u, zero_u, u1]),
      np.stack([zero_a, zero_a, zero_a, A1]),
      False,
    ),
    "tiny": (
      1e-30 * rng.standard_normal((4, 5)),
      1e-30 * rng.standard_normal((4, 9)),
      False,
    ),
    "ties": (np.eye(4, 5), np.eye(4, 9), False),
  }
  for name, (us, As, is_zero) in cases.items():
    for biased in (False, True):
      us_new, As_new, samples = _reduce_samples(
        jnp.asarray(us, dtype),
        jnp.asarray(As, dtype),
        sample_keys,
        biased=biased,
        kernel_svd=kernel_svd,
      )
      for array in (us_new, As_new, samples):
        assert array.dtype == dtype
        assert np.all(np.isfinite(np.asarray(array))), (name, biased)
      if is_zero:
        np.testing.assert_allclose(
          np.asarray(samples), 0, atol=1e-6, err_msg=name
        )
      if name == "one_term":
        np.testing.assert_allclose(
          np.asarray(samples),
          np.broadcast_to(np.outer(u1, A1), samples.shape),
          rtol=1e-5,
          atol=1e-5,
          err_msg=name,
        )


def test_kronecker_sum_reduce_ties_are_unbiased(x64):
  """Equal singular values (4 orthonormal summands into 3): p = 3/4 each."""
  us = jnp.eye(4, 5)
  As = jnp.eye(4, 9)
  *_, samples = _reduce_samples(us, As, keys(14))
  G = _unfolded(us, As)
  assert_mean_matches(np.asarray(samples), G, scale=1.0)
  # s1 = 4, k = 3, s2 = 4: s1^2 / k - s2 = 4/3.
  np.testing.assert_allclose(
    np.sum((np.asarray(samples) - G) ** 2, axis=(1, 2)), 16 / 3 - 4, rtol=1e-9
  )
