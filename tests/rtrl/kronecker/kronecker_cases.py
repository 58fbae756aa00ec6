"""Hypothesis strategies and NumPy references for the `rtrl.kronecker`
property tests (tests/rtrl/kronecker/test_properties_kronecker.py).

Every strategy takes `fast`: the default suite draws shapes from small pools
(each new shape or rank costs a JAX compilation), the slow set every shape.
Cases are float64 NumPy arrays built from a drawn seed.
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st
import numpy as np

MAX_DIM = 8
MAX_Q_ENUMERATED = 7  # 2**7 sign patterns per matrix
SPECTRA = ("distinct", "zeros", "repeated", "all_zero", "gaussian")
# Default-suite pools (each new shape or rank costs a JAX compilation); the
# slow set draws every shape up to MAX_DIM.
FAST_MATRIX_CASES = (
  (1, 5, 1),
  (6, 1, 1),
  (3, 3, 1),
  (3, 3, 2),
  (4, 7, 2),
  (7, 4, 3),
)  # (m, n, rank)
FAST_DIAGONAL_CASES = (
  (1, 1),
  (1, 2),
  (4, 1),
  (4, 3),
  (4, 5),
  (7, 2),
  (7, 6),
)  # (q, rank)
FAST_KRONECKER_SHAPES = ((2, 1, 5), (3, 4, 2), (4, 6, 9))  # (r + 1, a, M)
FAST_SIGN_TRICK_SHAPES = ((1, (1, 3)), (4, (3, 2)))  # (a, A shape)


def eps(dtype=np.float64) -> float:
  return float(np.finfo(dtype).eps)


# --------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------


def singular_values(rng, q: int, spectrum: str) -> np.ndarray:
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


def orthonormal_columns(rng, rows: int, cols: int) -> np.ndarray:
  q, r = np.linalg.qr(rng.normal(size=(rows, cols)))
  return q * np.sign(np.where(np.diag(r) == 0, 1, np.diag(r)))


def matrix(m, n, spectrum, exponent, seed) -> np.ndarray:
  rng = np.random.default_rng(seed)
  scale = 10.0**exponent
  if spectrum == "gaussian":
    return rng.normal(size=(m, n)) * scale
  q = min(m, n)
  s = singular_values(rng, q, spectrum)
  u, v = orthonormal_columns(rng, m, q), orthonormal_columns(rng, n, q)
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
  return matrix(m, n, spectrum, exponent, seed), rank


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
    if (rank - i + 1) * d[i - 1] <= d[i - 1 :].sum():
      break
  k = rank - i + 1
  s1, s2 = d[i - 1 :].sum(), (d[i - 1 :] ** 2).sum()
  return max(s1 * s1 / k - s2, 0.0)


def variance_tolerance(C) -> float:
  """First-order rounding bound on variances of C (module docstring)."""
  m, n = C.shape
  nuclear = np.linalg.svd(C, compute_uv=False).sum()
  return 100 * (m + n) * min(m, n) * eps() * nuclear**2


def sign_patterns(q: int) -> np.ndarray:
  return np.array(list(itertools.product([1.0, -1.0], repeat=q)))


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
  d = singular_values(rng, q, spectrum) * 10.0**exponent
  return rng.permutation(d), rank


KRONECKER_STRUCTURES = (
  "random",
  "zero_rows",
  "dependent",
  "cancelling",
  "all_zero",
)


def kronecker_sum(rng, terms, dim, structure, exponent, partner=None):
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
  us = kronecker_sum(rng, terms, dim_u, structure, exponent_u)
  As = kronecker_sum(rng, terms, dim_a, structure, exponent_a, partner=True)
  return us, As


def summand_scale(us, As) -> float:
  """sum_i ||u_i|| ||A_i||: bounds ||G||_* and the rounding of the QRs."""
  return float(np.sum(np.linalg.norm(us, axis=1) * np.linalg.norm(As, axis=1)))


@st.composite
def sign_trick_cases(draw, fast=False):
  """(u1, A1, u2, A2) float64 with zero, equal or cancelling summands."""
  if fast:
    dim_u, shape_a = draw(st.sampled_from(FAST_SIGN_TRICK_SHAPES))
  else:
    dim_u = draw(st.integers(1, 6))
    shape_a = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
  structure = draw(
    st.sampled_from(
      ("random", "zero_u1", "zero_A2", "equal", "cancelling", "all_zero")
    )
  )
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


def tagged(kind, strategy):
  return strategy.map(lambda case: (kind, case))


def float32_cases(fast=False):
  return st.one_of(
    tagged("low_rank", matrix_cases(fast=fast)),
    tagged("diagonal", diagonal_cases(fast=fast)),
    tagged("reduce", kronecker_sum_cases(fast=fast)),
    tagged("sign_trick", sign_trick_cases(fast=fast)),
  )
