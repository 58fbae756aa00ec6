"""Monte Carlo checks shared by the `rtrl.kronecker` tests.

Monte Carlo means are checked entry-wise against `z * sd / sqrt(N)` with
`sd` the sample standard deviation of that entry and `z` the two-sided
normal quantile for a family-wise false-alarm probability of 1e-6 over all
checked entries (Bonferroni). The estimators are bounded, so with
N >= 10^4 the normal approximation of the sample mean is accurate. The PRNG
seeds are fixed, so the tests are deterministic; the bound says how
unlikely a false failure would be for a fresh seed. Entries whose sample
variance is 0 (deterministic entries) must match to rounding (1e-10).
"""

from __future__ import annotations

import statistics

import jax
import numpy as np

FAMILY_WISE_ALPHA = 1e-6
NUM_SAMPLES = 20_000
SMALL = 64  # samples for checks that hold for every sample


def z_for(num_tests: int) -> float:
  """Two-sided normal quantile with Bonferroni correction."""
  return statistics.NormalDist().inv_cdf(
    1 - FAMILY_WISE_ALPHA / (2 * num_tests)
  )


def assert_mean_matches(samples, target, scale=1.0):
  """Entry-wise CLT check of a Monte Carlo mean (see module docstring)."""
  samples = np.asarray(samples, np.float64)
  target = np.asarray(target, np.float64)
  n = samples.shape[0]
  mean = samples.mean(axis=0)
  sd = samples.std(axis=0, ddof=1)
  z = z_for(target.size)
  tolerance = z * sd / np.sqrt(n) + 1e-10 * scale
  excess = np.abs(mean - target) - tolerance
  assert np.all(excess <= 0), (
    f"Monte Carlo mean off by up to {np.max(np.abs(mean - target)):.3g}, "
    f"worst excess over the {z:.2f}-sigma bound: {excess.max():.3g}"
  )


def assert_mean_error_matches(squared_errors, expected):
  """Checks E||X' - X||^2 against its closed form, CLT tolerance."""
  squared_errors = np.asarray(squared_errors, np.float64)
  n = squared_errors.shape[0]
  tolerance = z_for(1) * squared_errors.std(ddof=1) / np.sqrt(n) + 1e-9 * max(
    expected, 1e-12
  )
  assert abs(squared_errors.mean() - expected) <= tolerance, (
    squared_errors.mean(),
    expected,
    tolerance,
  )


def keys(seed, n=NUM_SAMPLES):
  """`n` independent PRNG keys from `seed`."""
  # "rbg" keys: the same statistical quality for these tests, and much
  # cheaper for XLA to compile than threefry under vmap.
  return jax.random.split(jax.random.key(seed, impl="rbg"), n)
