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
<= c (m + n) q eps ||C||_*^2; `_variance_tolerance` uses c = 100 (the observed
worst case is below c = 1). Tolerances scale with the input.
"""

from __future__ import annotations

import functools
import itertools

from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hypothesis_profiles import property_tests
from rtrl import kronecker

MAX_DIM = 8
MAX_Q_ENUMERATED = 7      # 2**7 sign patterns per matrix
SPECTRA = ("distinct", "zeros", "repeated", "all_zero", "gaussian")
# Default-suite pools (each new shape or rank costs a JAX compilation); the
# slow set draws every shape up to MAX_DIM.
FAST_MATRIX_CASES = ((1, 5, 1), (6, 1, 1), (3, 3, 1), (3, 3, 2), (4, 7, 2),
                     (7, 4, 3))                      # (m, n, rank)
FAST_DIAGONAL_CASES = ((1, 1), (1, 2), (4, 1), (4, 3), (4, 5), (7, 2),
                       (7, 6))                       # (q, rank)
FAST_KRONECKER_SHAPES = ((2, 1, 5), (3, 4, 2), (4, 6, 9))  # (r + 1, a, M)
FAST_SIGN_TRICK_SHAPES = ((1, (1, 3)), (4, (3, 2)))       # (a, A shape)


def _eps(dtype=np.float64) -> float:
  return float(np.finfo(dtype).eps)


# --------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------


def _singular_values(rng, q: int, spectrum: str) -> np.ndarray:
  """Non-increasing non-negative (q,) values of the given kind, max ~1."""
  if spectrum == "all_zero":
    return np.zeros(q)
  if spectrum == "repeated":
    values = rng.choice([1.0, 0.5, 0.25], size=q)
  else:
    values = np.exp(rng.uniform(-4, 0, size=q))
  if spectrum == "zeros":
    values[rng.random(q) < 0.5] = 0.0
  return np.sort(values)[::-1]


def _orthonormal_columns(rng, rows: int, cols: int) -> np.ndarray:
  q, r = np.linalg.qr(rng.normal(size=(rows, cols)))
  return q * np.sign(np.where(np.diag(r) == 0, 1, np.diag(r)))


def _matrix(m, n, spectrum, exponent, seed) -> np.ndarray:
  rng = np.random.default_rng(seed)
  scale = 10.0 ** exponent
  if spectrum == "gaussian":
    return rng.normal(size=(m, n)) * scale
  q = min(m, n)
  s = _singular_values(rng, q, spectrum)
  u, v = _orthonormal_columns(rng, m, q), _orthonormal_columns(rng, n, q)
  return (u * (s * scale)) @ v.T


@st.composite
def matrix_cases(draw, fast=False, max_q=MAX_Q_ENUMERATED):
  """(C float64 (m, n), rank) with min(m, n) <= max_q."""
  if fast:
    m, n, rank = draw(st.sampled_from(FAST_MATRIX_CASES))
  else:
    m = draw(st.integers(1, MAX_DIM))
    n = draw(st.integers(1, min(MAX_DIM, max_q) if m > max_q else MAX_DIM))
    rank = draw(st.integers(1, min(m, n)))
  spectrum = draw(st.sampled_from(SPECTRA))
  exponent = draw(st.integers(-30, 30))
  seed = draw(st.integers(0, 2**32 - 1))
  return _matrix(m, n, spectrum, exponent, seed), rank


# --------------------------------------------------------------------------
# Independent NumPy reference of Theorem 6.
# --------------------------------------------------------------------------


def reference_variance(values, rank: int) -> float:
  """`s1**2 / k - s2` (Theorem 6) for non-negative `values`, any order.

  m = min{i : (r - i + 1) d_i <= sum_{j >= i} d_j} (1-based, d sorted
  non-increasing), k = r - m + 1, s1, s2 = sum and sum of squares of
  d_m..d_q. 0 when at most `rank` values are non-zero.
  """
  d = np.sort(np.maximum(np.asarray(values, np.float64), 0))[::-1]
  if np.count_nonzero(d) <= rank:
    return 0.0
  for i in range(1, rank + 1):
    if (rank - i + 1) * d[i - 1] <= d[i - 1:].sum():
      break
  k = rank - i + 1
  s1, s2 = d[i - 1:].sum(), (d[i - 1:] ** 2).sum()
  return max(s1 * s1 / k - s2, 0.0)


def _variance_tolerance(C) -> float:
  """First-order rounding bound on variances of C (module docstring)."""
  m, n = C.shape
  nuclear = np.linalg.svd(C, compute_uv=False).sum()
  return 100 * (m + n) * min(m, n) * _eps() * nuclear**2


def _sign_patterns(q: int) -> np.ndarray:
  return np.array(list(itertools.product([1.0, -1.0], repeat=q)))


# --------------------------------------------------------------------------
# unbiased_low_rank / biased_low_rank / optimal_variance.
# --------------------------------------------------------------------------

NUM_KEYS = 4


@functools.partial(jax.jit, static_argnums=1)
def _low_rank_samples(C, rank, signs, keys):
  """`L R^T` at each row of `signs` and at each key, and the closed forms."""
  left, right = jax.vmap(
      lambda s: kronecker.unbiased_low_rank_with_signs(C, rank, s))(signs)
  keyed_left, keyed_right = jax.vmap(
      lambda key: kronecker.unbiased_low_rank(C, rank, key))(keys)
  biased_left, biased_right = kronecker.biased_low_rank(C, rank)
  factors = (left, right, keyed_left, keyed_right, biased_left, biased_right)
  products = (jnp.einsum("pir,pjr->pij", left, right),
              jnp.einsum("pir,pjr->pij", keyed_left, keyed_right),
              biased_left @ biased_right.T)
  return factors, products, kronecker.optimal_variance(C, rank)


@property_tests(matrix_cases(fast=True), matrix_cases(), max_examples=25,
                thorough_examples=300)
def check_unbiased_low_rank(case):
  """Exact expectation over all 2**q signs; per-sample rank and error."""
  C, rank = case
  m, n = C.shape
  q = min(m, n)
  singular = np.linalg.svd(C, compute_uv=False)
  keys = jax.random.split(jax.random.PRNGKey(0), NUM_KEYS)
  with jax.enable_x64(True):
    factors, (product, keyed, biased), variance = jax.device_get(
        _low_rank_samples(jnp.asarray(C), rank,
                          jnp.asarray(_sign_patterns(q)), keys))
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

  tolerance = _variance_tolerance(C)
  expected = reference_variance(singular, rank)
  assert abs(float(variance) - expected) <= tolerance, (variance, expected)
  squared_errors = np.sum((np.concatenate([product, keyed]) - C) ** 2,
                          axis=(1, 2))
  assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors, expected, tolerance)
  # Eckart-Young: the truncated SVD, never worse than an unbiased sample.
  tail = float(np.sum(singular[rank:] ** 2))
  biased_error = float(np.sum((biased - C) ** 2))
  assert abs(biased_error - tail) <= tolerance, (biased_error, tail)
  assert np.all(squared_errors >= biased_error - tolerance)
  # At most `rank` non-zero singular values: every sample is C itself.
  if np.count_nonzero(singular > 1e-12 * spectral) <= rank:
    assert np.max(np.abs(product - C)) <= 1e-10 * spectral


(test_unbiased_low_rank_exact_expectation_rank_and_error,
 test_unbiased_low_rank_exact_expectation_rank_and_error_thorough) = (
     check_unbiased_low_rank)


# --------------------------------------------------------------------------
# optimal_diagonal_mixing / optimal_diagonal_variance.
# --------------------------------------------------------------------------


@st.composite
def diagonal_cases(draw, fast=False):
  """(d (q,) float64 in a random order, rank >= 1, may exceed q)."""
  if fast:
    q, rank = draw(st.sampled_from(FAST_DIAGONAL_CASES))
  else:
    q = draw(st.integers(1, 10))
    rank = draw(st.integers(1, q + 1))
  spectrum = draw(st.sampled_from(SPECTRA[:4]))
  exponent = draw(st.integers(-30, 30))
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  d = _singular_values(rng, q, spectrum) * 10.0**exponent
  return rng.permutation(d), rank


@functools.partial(jax.jit, static_argnums=1)
def _diagonal_samples(d, rank, keys):
  """Mixings at each key; the closed form for d and for d sorted."""
  factors = jax.vmap(lambda key: kronecker.optimal_diagonal_mixing(
      d, rank, key))(keys)
  return (factors, kronecker.optimal_diagonal_variance(d, rank),
          kronecker.optimal_diagonal_variance(jnp.sort(d), rank))


@property_tests(diagonal_cases(fast=True), diagonal_cases(), max_examples=20,
                thorough_examples=300)
def check_optimal_diagonal_mixing(case):
  """Symmetric factor, exact diagonal, closed-form error, any order."""
  d, rank = case
  q = d.shape[0]
  keys = jax.random.split(jax.random.PRNGKey(1), 8)
  with jax.enable_x64(True):
    (left, right), variance, sorted_variance = jax.device_get(
        _diagonal_samples(jnp.asarray(d), rank, keys))
  assert left.shape == (8, q, rank)
  assert np.all(np.isfinite(left)) and np.array_equal(left, right)
  nuclear = d.sum()
  tolerance = 100 * 2 * q * q * _eps() * nuclear**2
  expected = reference_variance(d, rank)
  assert abs(variance - expected) <= tolerance, (variance, expected)
  assert abs(sorted_variance - expected) <= tolerance
  product = np.einsum("pir,pjr->pij", left, left)
  diagonal_error = np.abs(np.diagonal(product, axis1=1, axis2=2) - d)
  assert np.max(diagonal_error) <= 100 * q * _eps() * max(nuclear, 0.0)
  squared_errors = np.sum((product - np.diag(d)) ** 2, axis=(1, 2))
  assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors, expected)


(test_optimal_diagonal_mixing_properties,
 test_optimal_diagonal_mixing_properties_thorough) = (
     check_optimal_diagonal_mixing)


# --------------------------------------------------------------------------
# kronecker_sum_reduce.
# --------------------------------------------------------------------------

KRONECKER_STRUCTURES = ("random", "zero_rows", "dependent", "cancelling",
                        "all_zero")


def _kronecker_sum(rng, terms, dim, structure, exponent, partner=None):
  """(terms, dim) rows at scale 10**exponent with the given structure."""
  rows = rng.normal(size=(terms, dim)) * np.exp(rng.uniform(-3, 0, (terms, 1)))
  if structure == "all_zero":
    rows[:] = 0
  elif structure == "zero_rows":
    rows[rng.random(terms) < 0.5] = 0
  elif structure == "dependent":
    rows[-1] = rng.normal(size=terms - 1) @ rows[:-1]
  elif structure == "cancelling":
    rows[1] = rows[0] if partner is None else -rows[0]
  return rows * 10.0**exponent


@st.composite
def kronecker_sum_cases(draw, fast=False):
  """(us (r+1, a), As (r+1, M)) float64; factor scales 1e-15..1e15 each."""
  if fast:
    terms, dim_u, dim_a = draw(st.sampled_from(FAST_KRONECKER_SHAPES))
  else:
    terms = draw(st.integers(2, 5))
    dim_u = draw(st.integers(1, 6))
    dim_a = draw(st.integers(1, 12))
  structure = draw(st.sampled_from(KRONECKER_STRUCTURES))
  exponent_u = draw(st.integers(-15, 15))
  exponent_a = draw(st.integers(-15, 15))
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  us = _kronecker_sum(rng, terms, dim_u, structure, exponent_u)
  As = _kronecker_sum(rng, terms, dim_a, structure, exponent_a, partner=True)
  return us, As


def _summand_scale(us, As) -> float:
  """sum_i ||u_i|| ||A_i||: bounds ||G||_* and the rounding of the QRs."""
  return float(np.sum(np.linalg.norm(us, axis=1) * np.linalg.norm(As, axis=1)))


@functools.lru_cache(maxsize=None)
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
  patterns = _sign_patterns(q)
  with jax.enable_x64(True):
    keys = jax.random.split(jax.random.PRNGKey(2), 16 * 2**q)
    class_products, products = jax.device_get(jax.jit(
        lambda signs, keys: _low_rank_samples(reference, q - 1, signs, keys)[1][:2]
    )(jnp.asarray(patterns), keys))
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
  unbiased = jax.vmap(lambda key: kronecker.kronecker_sum_reduce(
      us, As, key))(keys)
  return unbiased, kronecker.kronecker_sum_reduce(us, As, keys[0],
                                                  biased=True)


@property_tests(kronecker_sum_cases(fast=True), kronecker_sum_cases(),
                max_examples=12, thorough_examples=200)
def check_kronecker_sum_reduce(case):
  """Exact expectation over the signs, per-sample error = closed form."""
  us, As = case
  terms, dim_u = us.shape
  dim_a = As.shape[1]
  rank = terms - 1
  G = us.T @ As
  singular = np.linalg.svd(G, compute_uv=False)
  scale = _summand_scale(us, As)
  tolerance = 100 * (dim_u + dim_a) * terms * _eps() * scale**2
  keys = _key_per_sign_class(terms)
  with jax.enable_x64(True):
    (new_us, new_As), (biased_us, biased_As) = jax.device_get(
        _reduce_samples(us, As, keys))
  assert new_us.shape == (len(keys), rank, dim_u)
  assert new_As.shape == (len(keys), rank, dim_a)
  for array in (new_us, new_As, biased_us, biased_As):
    assert np.all(np.isfinite(array))
  samples = np.einsum("pri,prj->pij", new_us, new_As)
  mean_error = np.max(np.abs(samples.mean(axis=0) - G))
  assert mean_error <= 1e-10 * scale, (mean_error, scale)
  squared_errors = np.sum((samples - G) ** 2, axis=(1, 2))
  expected = reference_variance(singular, rank)
  assert np.max(np.abs(squared_errors - expected)) <= tolerance, (
      squared_errors, expected, tolerance)
  assert biased_us.shape == (rank, dim_u) and biased_As.shape == (rank, dim_a)
  biased_error = np.sum((biased_us.T @ biased_As - G) ** 2)
  tail = np.sum(singular[rank:] ** 2)
  assert abs(biased_error - tail) <= tolerance, (biased_error, tail)


(test_kronecker_sum_reduce_exact_expectation_and_error,
 test_kronecker_sum_reduce_exact_expectation_and_error_thorough) = (
     check_kronecker_sum_reduce)


# --------------------------------------------------------------------------
# sign_trick_mix.
# --------------------------------------------------------------------------


@st.composite
def sign_trick_cases(draw, fast=False):
  """(u1, A1, u2, A2) float64 with zero, equal or cancelling summands."""
  if fast:
    dim_u, shape_a = draw(st.sampled_from(FAST_SIGN_TRICK_SHAPES))
  else:
    dim_u = draw(st.integers(1, 6))
    shape_a = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
  structure = draw(st.sampled_from(
      ("random", "zero_u1", "zero_A2", "equal", "cancelling", "all_zero")))
  exponents = draw(st.lists(st.integers(-15, 15), min_size=4, max_size=4))
  seed = draw(st.integers(0, 2**32 - 1))
  rng = np.random.default_rng(seed)
  u1, u2 = rng.normal(size=(2, dim_u))
  A1, A2 = rng.normal(size=(2,) + shape_a)
  if structure == "zero_u1":
    u1 = 0 * u1
  elif structure == "zero_A2":
    A2 = 0 * A2
  elif structure in ("equal", "cancelling"):
    u2, A2 = u1, (A1 if structure == "equal" else -A1)
    exponents[2:] = exponents[:2]
  elif structure == "all_zero":
    u1, u2, A1, A2 = 0 * u1, 0 * u2, 0 * A1, 0 * A2
  u1, A1, u2, A2 = (x * 10.0**e for x, e in zip((u1, A1, u2, A2), exponents))
  return u1, A1, u2, A2


@jax.jit
def _sign_trick_samples(u1, A1, u2, A2, keys):
  mixed = jax.vmap(kronecker.sign_trick_mix,
                   in_axes=(None, None, None, None, 0))(u1, A1, u2, A2, keys)
  return mixed, kronecker.sign_trick_variance(u1, A1, u2, A2)


@property_tests(sign_trick_cases(fast=True), sign_trick_cases(),
                max_examples=15, thorough_examples=300)
def check_sign_trick_mix(case):
  """Both outcomes average to the sum; error = sign_trick_variance."""
  u1, A1, u2, A2 = case
  G = np.einsum("i,jk->ijk", u1, A1) + np.einsum("i,jk->ijk", u2, A2)
  scale = (np.linalg.norm(u1) * np.linalg.norm(A1)
           + np.linalg.norm(u2) * np.linalg.norm(A2))
  keys = jax.random.split(jax.random.PRNGKey(3), 32)
  with jax.enable_x64(True):
    (u, A), variance = jax.device_get(_sign_trick_samples(u1, A1, u2, A2,
                                                          keys))
  assert u.shape == (32,) + u1.shape and A.shape == (32,) + A1.shape
  assert np.all(np.isfinite(u)) and np.all(np.isfinite(A))
  samples = np.einsum("pi,pjk->pijk", u, A)
  # Rounding is relative to the computed terms, which can be far larger than
  # the summands: with u1 = 0 the balance factor p1 is 1 and the noise term
  # p2 u2 (x) A1 is unbounded relative to G (see sign_trick_variance).
  magnitude = scale + np.max(np.linalg.norm(u, axis=1)
                             * np.linalg.norm(A.reshape(len(A), -1), axis=1))
  tolerance = 100 * G.size * _eps() * magnitude
  # The outcome takes one of two values (sign +-1): the 32 keys draw both
  # (unless the cross term is 0 and both are equal) with prob. 1 - 2**-31.
  first = samples[0]
  other = [s for s in samples if np.max(np.abs(s - first)) > tolerance]
  mean = first if not other else (first + other[0]) / 2
  assert np.max(np.abs(mean - G)) <= tolerance, (mean, G)
  squared_errors = np.sum((samples - G) ** 2, axis=(1, 2, 3))
  assert np.max(np.abs(squared_errors - variance)) <= 10 * tolerance * magnitude


(test_sign_trick_mix_exact_expectation_and_error,
 test_sign_trick_mix_exact_expectation_and_error_thorough) = (
     check_sign_trick_mix)
