"""Property-based tests (hypothesis) for `rtrl.kronecker`.

Inputs: matrices `C = U diag(s) V^T` of every shape up to 8 x 8 (non-square,
1 x n, n x 1), ranks 1..min(m, n), singular values that are distinct,
partly zero, repeated, all zero, or those of a Gaussian matrix, scaled by
10^e with e in [-30, 30]; Kronecker sums with zero, dependent and cancelling
summands and short factors.

Properties (float64, deterministic):
* Exact unbiasedness: `unbiased_low_rank_with_signs` averaged over all
  `2**q` sign patterns (q = min(m, n) <= 7) equals C to 1e-10 * ||C||_2.
* Every sample has rank <= rank (the factor shapes) and squared error
  `||L R^T - C||_F^2` equal to `optimal_variance(C, rank)`, which equals an
  independent NumPy evaluation of Theorem 6's `s1**2 / k - s2`.
* `biased_low_rank` is the truncated SVD: error `sum_{i > rank} s_i**2`,
  never above an unbiased sample's.
* `optimal_diagonal_mixing`: `left == right`, `diag(F F^T) = d` per sample,
  error = `optimal_diagonal_variance(d, rank)` = the NumPy reference,
  invariant under permuting `d`.
* `kronecker_sum_reduce`: per-sample error = the reference variance of the
  unfolded sum `G = us^T As` (unbiased) or its Eckart-Young tail (biased), and
  the exact expectation over the signs equals G (below).
* `sign_trick_mix`: per-sample error = `sign_trick_variance`, and the mean of
  its two outcomes equals the mixed sum.
* Float32: no NaN/Inf from any function at scales 1e-30..1e30, all-zero
  inputs included (outputs that are squares of the scale, the variances, only
  where the square is representable), and the factors agree with float64.

Tolerances are first-order rounding bounds. A backward-stable SVD perturbs
each singular value by <= c (m + n) eps ||C||_2, the factor products add
rounding of the same order, and the variance `s1**2/k - s2` is Lipschitz in
each `s_i` with constant <= 2 ||C||_*, so its error is
<= c (m + n) q eps ||C||_*^2; `kronecker_cases.variance_tolerance` uses
c = 100 (the observed worst case is c = 0.45). Tolerances scale with the input.
"""

from __future__ import annotations

import functools

from hypothesis_profiles import property_tests
import jax
import jax.numpy as jnp
import kronecker_cases as cases
import numpy as np

from rtrl import kronecker

# --------------------------------------------------------------------------
# unbiased_low_rank / biased_low_rank / optimal_variance.
# --------------------------------------------------------------------------

NUM_KEYS = 4


@functools.partial(jax.jit, static_argnums=1)
def _low_rank_samples(C, rank, signs, keys):
  """`L R^T` at each row of `signs` and at each key, and the closed forms."""
  left, right = jax.vmap(
    lambda s: kronecker.unbiased_low_rank_with_signs(C, rank, s)
  )(signs)
  keyed_left, keyed_right = jax.vmap(
    lambda key: kronecker.unbiased_low_rank(C, rank, key)
  )(keys)
  biased_left, biased_right = kronecker.biased_low_rank(C, rank)
  factors = (left, right, keyed_left, keyed_right, biased_left, biased_right)
  products = (
    jnp.einsum("pir,pjr->pij", left, right),
    jnp.einsum("pir,pjr->pij", keyed_left, keyed_right),
    biased_left @ biased_right.T,
  )
  return factors, products, kronecker.optimal_variance(C, rank)


@property_tests(
  cases.matrix_cases(fast=True),
  cases.matrix_cases(),
  max_examples=25,
  thorough_examples=150,
)
def check_unbiased_low_rank(case):
  """Exact expectation over all 2**q signs; per-sample rank and error."""
  C, rank = case
  m, n = C.shape
  q = min(m, n)
  singular = np.linalg.svd(C, compute_uv=False)
  keys = jax.random.split(jax.random.PRNGKey(0), NUM_KEYS)
  with jax.enable_x64(True):
    factors, (product, keyed, biased), variance = jax.device_get(
      _low_rank_samples(
        jnp.asarray(C), rank, jnp.asarray(cases.sign_patterns(q)), keys
      )
    )
  # Rank <= rank: the factors have `rank` columns.
  assert factors[0].shape == (2**q, m, rank)
  assert factors[1].shape == (2**q, n, rank)
  assert factors[2].shape == (NUM_KEYS, m, rank)
  assert factors[4].shape == (m, rank) and factors[5].shape == (n, rank)
  for array in factors + (variance,):
    assert np.all(np.isfinite(array))
  spectral = singular[0]
  mean_error = np.max(np.abs(product.mean(axis=0) - C))
  assert mean_error <= 1e-10 * spectral, (mean_error, spectral)

  tolerance = cases.variance_tolerance(C)
  expected = cases.reference_variance(singular, rank)
  assert abs(float(variance) - expected) <= tolerance, (variance, expected)
  squared_errors = np.sum(
    (np.concatenate([product, keyed]) - C) ** 2, axis=(1, 2)
  )
  assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
    squared_errors,
    expected,
    tolerance,
  )
  # Eckart-Young: the truncated SVD, never worse than an unbiased sample.
  tail = float(np.sum(singular[rank:] ** 2))
  biased_error = float(np.sum((biased - C) ** 2))
  assert abs(biased_error - tail) <= tolerance, (biased_error, tail)
  assert np.all(squared_errors >= biased_error - tolerance)
  # At most `rank` non-zero singular values: every sample is C itself.
  if np.count_nonzero(singular > 1e-12 * spectral) <= rank:
    assert np.max(np.abs(product - C)) <= 1e-10 * spectral


(
  test_unbiased_low_rank_exact_expectation_rank_and_error,
  test_unbiased_low_rank_exact_expectation_rank_and_error_thorough,
) = check_unbiased_low_rank


# --------------------------------------------------------------------------
# optimal_diagonal_mixing / optimal_diagonal_variance.
# --------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=1)
def _diagonal_samples(d, rank, keys):
  """Mixings at each key; the closed form for d and for d sorted."""
  factors = jax.vmap(
    lambda key: kronecker.optimal_diagonal_mixing(d, rank, key)
  )(keys)
  return (
    factors,
    kronecker.optimal_diagonal_variance(d, rank),
    kronecker.optimal_diagonal_variance(jnp.sort(d), rank),
  )


@property_tests(
  cases.diagonal_cases(fast=True),
  cases.diagonal_cases(),
  max_examples=20,
  thorough_examples=200,
)
def check_optimal_diagonal_mixing(case):
  """Symmetric factor, exact diagonal, closed-form error, any order."""
  d, rank = case
  q = d.shape[0]
  keys = jax.random.split(jax.random.PRNGKey(1), 8)
  with jax.enable_x64(True):
    (left, right), variance, sorted_variance = jax.device_get(
      _diagonal_samples(jnp.asarray(d), rank, keys)
    )
  assert left.shape == (8, q, rank)
  assert np.all(np.isfinite(left)) and np.array_equal(left, right)
  nuclear = d.sum()
  tolerance = 100 * 2 * q * q * cases.eps() * nuclear**2
  expected = cases.reference_variance(d, rank)
  assert abs(variance - expected) <= tolerance, (variance, expected)
  assert abs(sorted_variance - expected) <= tolerance
  product = np.einsum("pir,pjr->pij", left, left)
  diagonal_error = np.abs(np.diagonal(product, axis1=1, axis2=2) - d)
  assert np.max(diagonal_error) <= 100 * q * cases.eps() * max(nuclear, 0.0)
  squared_errors = np.sum((product - np.diag(d)) ** 2, axis=(1, 2))
  assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
    squared_errors,
    expected,
  )


(
  test_optimal_diagonal_mixing_properties,
  test_optimal_diagonal_mixing_properties_thorough,
) = check_optimal_diagonal_mixing


# --------------------------------------------------------------------------
# kronecker_sum_reduce.
# --------------------------------------------------------------------------


@functools.cache
def _key_per_sign_class(q: int) -> np.ndarray:
  """One PRNG key per sign pattern modulo a global flip, (2**(q-1), 2).

  Output of unbiased_low_rank is the same for signs s and -s, and for a
  generic q x q matrix at rank q - 1 (all singular values mixed, q = r + 1 as
  in kronecker_sum_reduce) it differs between the 2**(q-1) classes. Keys
  are matched to classes through the public functions, so this relies only
  on `unbiased_low_rank(C, rank, key) == unbiased_low_rank_with_signs(C,
  rank, signs drawn from key)` for some deterministic key -> signs map that
  kronecker_sum_reduce shares (its step 3 is unbiased_low_rank with `key`).
  """
  reference = np.diag(1.0 - 0.05 * np.arange(q))
  patterns = cases.sign_patterns(q)
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.PRNGKey(2), 16 * 2**q)
    _, (class_products, products, _), _ = jax.device_get(
      _low_rank_samples(
        jnp.asarray(reference), q - 1, jnp.asarray(patterns), keys
      )
    )
  distance = np.abs(products[:, None] - class_products[None]).max(axis=(2, 3))
  pattern_of_key = np.argmin(distance, axis=1)
  assert np.all(distance[np.arange(len(keys)), pattern_of_key] < 1e-12)
  chosen = {}
  for key, pattern in zip(np.asarray(keys), pattern_of_key):
    signs = patterns[pattern]
    chosen.setdefault(tuple(signs * signs[0]), key)
  assert len(chosen) == 2 ** (q - 1), "not every sign class was drawn"
  return np.stack(list(chosen.values()))


@jax.jit
def _reduce_samples(us, As, keys):
  """Unbiased reductions at each key, and the biased one."""
  unbiased = jax.vmap(lambda key: kronecker.kronecker_sum_reduce(us, As, key))(
    keys
  )
  return unbiased, kronecker.kronecker_sum_reduce(us, As, keys[0], biased=True)


@property_tests(
  cases.kronecker_sum_cases(fast=True),
  cases.kronecker_sum_cases(),
  max_examples=12,
  thorough_examples=100,
)
def check_kronecker_sum_reduce(case):
  """Exact expectation over the signs, per-sample error = closed form."""
  us, As = case
  terms, dim_u = us.shape
  dim_a = As.shape[1]
  rank = terms - 1
  G = us.T @ As
  singular = np.linalg.svd(G, compute_uv=False)
  scale = cases.summand_scale(us, As)
  tolerance = 100 * (dim_u + dim_a) * terms * cases.eps() * scale**2
  keys = _key_per_sign_class(terms)
  with jax.enable_x64(True):
    (new_us, new_As), (biased_us, biased_As) = jax.device_get(
      _reduce_samples(us, As, keys)
    )
  assert new_us.shape == (len(keys), rank, dim_u)
  assert new_As.shape == (len(keys), rank, dim_a)
  for array in (new_us, new_As, biased_us, biased_As):
    assert np.all(np.isfinite(array))
  samples = np.einsum("pri,prj->pij", new_us, new_As)
  mean_error = np.max(np.abs(samples.mean(axis=0) - G))
  assert mean_error <= 1e-10 * scale, (mean_error, scale)
  squared_errors = np.sum((samples - G) ** 2, axis=(1, 2))
  expected = cases.reference_variance(singular, rank)
  assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
    squared_errors,
    expected,
    tolerance,
  )
  assert biased_us.shape == (rank, dim_u) and biased_As.shape == (rank, dim_a)
  biased_error = np.sum((biased_us.T @ biased_As - G) ** 2)
  tail = np.sum(singular[rank:] ** 2)
  assert abs(biased_error - tail) <= tolerance, (biased_error, tail)


(
  test_kronecker_sum_reduce_exact_expectation_and_error,
  test_kronecker_sum_reduce_exact_expectation_and_error_thorough,
) = check_kronecker_sum_reduce


# --------------------------------------------------------------------------
# sign_trick_mix.
# --------------------------------------------------------------------------


@jax.jit
def _sign_trick_samples(u1, A1, u2, A2, keys):
  mixed = jax.vmap(
    kronecker.sign_trick_mix, in_axes=(None, None, None, None, 0)
  )(u1, A1, u2, A2, keys)
  return mixed, kronecker.sign_trick_variance(u1, A1, u2, A2)


@property_tests(
  cases.sign_trick_cases(fast=True),
  cases.sign_trick_cases(),
  max_examples=15,
  thorough_examples=200,
)
def check_sign_trick_mix(case):
  """Both outcomes average to the sum; error = sign_trick_variance."""
  u1, A1, u2, A2 = case
  G = np.einsum("i,jk->ijk", u1, A1) + np.einsum("i,jk->ijk", u2, A2)
  scale = np.linalg.norm(u1) * np.linalg.norm(A1) + np.linalg.norm(
    u2
  ) * np.linalg.norm(A2)
  keys = jax.random.split(jax.random.PRNGKey(3), 32)
  with jax.enable_x64(True):
    (u, A), variance = jax.device_get(_sign_trick_samples(u1, A1, u2, A2, keys))
  assert u.shape == (32,) + u1.shape and A.shape == (32,) + A1.shape
  assert np.all(np.isfinite(u)) and np.all(np.isfinite(A))
  samples = np.einsum("pi,pjk->pijk", u, A)
  # Rounding is relative to the computed terms, which can be far larger than
  # the summands: with u1 = 0 the balance factor p1 is 1 and the noise term
  # p2 u2 (x) A1 is unbounded relative to G (see sign_trick_variance).
  magnitude = scale + np.max(
    np.linalg.norm(u, axis=1) * np.linalg.norm(A.reshape(len(A), -1), axis=1)
  )
  tolerance = 100 * G.size * cases.eps() * magnitude
  # The outcome takes one of two values (sign +-1): the 32 keys draw both
  # (unless the cross term is 0 and both are equal) with prob. 1 - 2**-31.
  first = samples[0]
  other = [s for s in samples if np.max(np.abs(s - first)) > tolerance]
  mean = first if not other else (first + other[0]) / 2
  assert np.max(np.abs(mean - G)) <= tolerance, (mean, G)
  squared_errors = np.sum((samples - G) ** 2, axis=(1, 2, 3))
  assert np.max(np.abs(squared_errors - variance)) <= 10 * tolerance * magnitude


(
  test_sign_trick_mix_exact_expectation_and_error,
  test_sign_trick_mix_exact_expectation_and_error_thorough,
) = check_sign_trick_mix


# --------------------------------------------------------------------------
# Float32: finite at every scale and as accurate as float32 allows.
# --------------------------------------------------------------------------


def _assert_finite_float32(*arrays):
  for array in arrays:
    assert array.dtype == np.float32, array.dtype
    assert np.all(np.isfinite(array)), array


def _assert_close_variance(got, expected, tolerance):
  """A float32 closed form vs the float64 reference. The variance is the
  scale squared: above 3.4e38 it may be inf (never NaN), and below float32's
  smallest normal number (1.2e-38; XLA flushes subnormals) it may be 0."""
  got = np.float64(got)
  assert not np.isnan(got)
  if expected < 1e37:
    floor = 10 * np.finfo(np.float32).tiny
    assert abs(got - expected) <= tolerance + floor, (got, expected, tolerance)


@property_tests(
  cases.float32_cases(fast=True),
  cases.float32_cases(),
  max_examples=16,
  thorough_examples=200,
)
def check_float32(case):
  """No NaN/Inf in float32 at scales 1e-30..1e30 (all-zero inputs too);
  per-sample errors equal the float64 closed forms to float32 rounding."""
  kind, data = case
  eps = cases.eps(np.float32)
  assert jnp.asarray(0.0).dtype == jnp.float32
  if kind == "low_rank":
    C, rank = data
    m, n = C.shape
    q = min(m, n)
    keys = jax.random.split(jax.random.PRNGKey(0), NUM_KEYS)
    factors, products, variance = jax.device_get(
      _low_rank_samples(
        jnp.asarray(C, jnp.float32),
        rank,
        jnp.asarray(cases.sign_patterns(q), jnp.float32),
        keys,
      )
    )
    _assert_finite_float32(*factors)
    singular = np.linalg.svd(C, compute_uv=False)
    expected = cases.reference_variance(singular, rank)
    tolerance = 100 * (m + n) * q * eps * singular.sum() ** 2
    _assert_close_variance(variance, expected, tolerance)
    left, right = (np.float64(f) for f in factors[:2])
    samples = np.einsum("pir,pjr->pij", left, right)
    squared_errors = np.sum((samples - C) ** 2, axis=(1, 2))
    assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors,
      expected,
      tolerance,
    )
    mean_error = np.max(np.abs(samples.mean(axis=0) - C))
    assert mean_error <= 100 * q * eps * singular.sum(), mean_error
  elif kind == "diagonal":
    d, rank = data
    q = d.shape[0]
    keys = jax.random.split(jax.random.PRNGKey(1), 8)
    (left, right), variance, _ = jax.device_get(
      _diagonal_samples(jnp.asarray(d, jnp.float32), rank, keys)
    )
    _assert_finite_float32(left, right)
    expected = cases.reference_variance(d, rank)
    tolerance = 100 * 2 * q * q * eps * d.sum() ** 2
    _assert_close_variance(variance, expected, tolerance)
    product = np.einsum("pir,pjr->pij", np.float64(left), np.float64(left))
    squared_errors = np.sum((product - np.diag(d)) ** 2, axis=(1, 2))
    assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors,
      expected,
      tolerance,
    )
  elif kind == "reduce":
    us, As = data
    terms, dim_u = us.shape
    dim_a = As.shape[1]
    keys = jax.random.split(jax.random.PRNGKey(4), NUM_KEYS)
    (new_us, new_As), (biased_us, biased_As) = jax.device_get(
      _reduce_samples(
        jnp.asarray(us, jnp.float32), jnp.asarray(As, jnp.float32), keys
      )
    )
    _assert_finite_float32(new_us, new_As, biased_us, biased_As)
    G = us.T @ As
    singular = np.linalg.svd(G, compute_uv=False)
    scale = cases.summand_scale(us, As)
    tolerance = 100 * (dim_u + dim_a) * terms * eps * scale**2
    samples = np.einsum("pri,prj->pij", np.float64(new_us), np.float64(new_As))
    squared_errors = np.sum((samples - G) ** 2, axis=(1, 2))
    expected = cases.reference_variance(singular, terms - 1)
    assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors,
      expected,
      tolerance,
    )
    biased = np.float64(biased_us).T @ np.float64(biased_As)
    tail = np.sum(singular[terms - 1 :] ** 2)
    assert abs(np.sum((biased - G) ** 2) - tail) <= tolerance
  else:
    u1, A1, u2, A2 = data
    keys = jax.random.split(jax.random.PRNGKey(3), 8)
    (u, A), variance = jax.device_get(
      _sign_trick_samples(*(jnp.asarray(x, jnp.float32) for x in data), keys)
    )
    _assert_finite_float32(u, A)
    G = np.einsum("i,jk->ijk", u1, A1) + np.einsum("i,jk->ijk", u2, A2)
    samples = np.einsum("pi,pjk->pijk", np.float64(u), np.float64(A))
    magnitude = (
      np.linalg.norm(u1) * np.linalg.norm(A1)
      + np.linalg.norm(u2) * np.linalg.norm(A2)
      + np.max(
        np.linalg.norm(np.float64(u), axis=1)
        * np.linalg.norm(np.float64(A).reshape(8, -1), axis=1)
      )
    )
    with jax.enable_x64(True):
      expected = float(kronecker.sign_trick_variance(u1, A1, u2, A2))
    tolerance = 1000 * G.size * eps * magnitude**2
    _assert_close_variance(variance, expected, tolerance)
    squared_errors = np.sum((samples - G) ** 2, axis=(1, 2, 3))
    assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors,
      expected,
      tolerance,
    )


(
  test_float32_finite_and_accurate_at_every_scale,
  test_float32_finite_and_accurate_at_every_scale_thorough,
) = check_float32
