"""Tests for rtrl.kronecker: optimal unbiased / biased low-rank approximations,
the sign trick and the optimal diagonal mixing (the Kronecker-sum reduction
is in `test_kronecker_reduce.py`). Monte Carlo tolerances: `monte_carlo.py`.
"""

import functools
import itertools

import jax
import jax.numpy as jnp
from monte_carlo import NUM_SAMPLES
from monte_carlo import SMALL
from monte_carlo import assert_mean_error_matches
from monte_carlo import assert_mean_matches
from monte_carlo import keys as _keys
import numpy as np
import pytest

from rtrl import kronecker
from rtrl.kronecker import diagonal_mixing

# The closed forms, jitted: eager dispatch compiles every small op separately.
_optimal_variance = jax.jit(kronecker.optimal_variance, static_argnums=1)
_diagonal_variance = jax.jit(
  kronecker.optimal_diagonal_variance, static_argnums=1
)
_sign_trick_variance = jax.jit(kronecker.sign_trick_variance)


@functools.partial(jax.jit, static_argnums=1)
def _unbiased_samples(C, rank, keys):
  left, right = jax.vmap(lambda key: kronecker.unbiased_low_rank(C, rank, key))(
    keys
  )
  return jnp.einsum("sik,sjk->sij", left, right)


@jax.jit
def _sign_trick_samples(u1, A1, u2, A2, keys):
  u, A = jax.vmap(lambda key: kronecker.sign_trick_mix(u1, A1, u2, A2, key))(
    keys
  )
  return jnp.einsum("sa,sm->sam", u, A.reshape(A.shape[0], -1))


def _spread_spectrum_matrix(rng, m, n, singular_values):
  """m x n matrix with prescribed singular values, random singular vectors."""
  q = len(singular_values)
  left, _ = np.linalg.qr(rng.standard_normal((m, q)))
  right, _ = np.linalg.qr(rng.standard_normal((n, q)))
  return (left * np.asarray(singular_values)) @ right.T


def _numerical_rank(matrices, relative_tolerance=1e-9):
  s = np.linalg.svd(np.asarray(matrices, np.float64), compute_uv=False)
  return np.sum(
    s > relative_tolerance * np.maximum(s[..., :1], 1e-300), axis=-1
  )


def _kron_matrix(u, A):
  """The unfolded Kronecker product u (x) A as an (a, M) matrix."""
  return np.outer(np.ravel(u), np.ravel(A))


# ---------------------------------------------------------------------------
# unbiased_low_rank (Theorem 2)
# ---------------------------------------------------------------------------

# (m, n, rank, kind): q = min(m, n). q == rank + 1 is Algorithm 5's case, q >
# rank + 1 the general Lemma 6 (Givens) path. "gaussian" spectra are flat, so
# everything is mixed (m = 1, non-trivial rotations); "spread" spectra keep
# some singular values exactly.
UNBIASED_CASES = [
  (4, 4, 3, "gaussian"),
  (3, 5, 2, "gaussian"),
  (5, 7, 2, "gaussian"),
  (7, 5, 3, "spread"),
  (8, 6, 4, "gaussian"),
]


@pytest.mark.parametrize("m,n,rank,kind", UNBIASED_CASES)
def test_unbiased_low_rank_is_unbiased_low_rank_and_optimal(
  x64, m, n, rank, kind
):
  rng = np.random.default_rng(m * 100 + n * 10 + rank)
  q = min(m, n)
  if kind == "gaussian":
    C = rng.standard_normal((m, n))
  else:
    C = _spread_spectrum_matrix(rng, m, n, [10.0, 3.0, 1.0, 0.5, 0.2][:q])
  C = jnp.asarray(C)
  samples = np.asarray(_unbiased_samples(C, rank, _keys(rank)))
  assert samples.shape == (NUM_SAMPLES, m, n)
  assert np.all(np.isfinite(samples))

  # E[C'] = C.
  assert_mean_matches(samples, C, scale=float(jnp.linalg.norm(C)))
  # rank(C') <= rank for every sample.
  assert _numerical_rank(samples).max() <= rank
  # E||C' - C||^2 equals the closed-form minimum of Theorem 6.
  variance = float(_optimal_variance(C, rank))
  assert variance > 0
  squared_errors = np.sum((samples - np.asarray(C)) ** 2, axis=(1, 2))
  assert_mean_error_matches(squared_errors, variance)
  # Stronger: Theorem 6's equality condition makes the squared error the
  # same for every sign vector (see _diagonal_factor_sorted's docstring).
  np.testing.assert_allclose(squared_errors, variance, rtol=1e-9)


def test_spread_spectrum_keeps_large_singular_values(x64):
  """d = (10, 3, 1, .5, .2), rank 3: m = 3, so the top two are kept."""
  rng = np.random.default_rng(0)
  singular_values = [10.0, 3.0, 1.0, 0.5, 0.2]
  C = _spread_spectrum_matrix(rng, 5, 7, singular_values)
  u, _, vt = np.linalg.svd(C)
  samples = np.asarray(_unbiased_samples(jnp.asarray(C), 3, _keys(3, SMALL)))
  projected = np.einsum("ia,sij,jb->sab", u[:, :2], samples, vt[:2].T)
  np.testing.assert_allclose(
    projected,
    np.broadcast_to(np.diag([10.0, 3.0]), projected.shape),
    atol=1e-10,
  )
  # s1 = 1.7 mixed into k = 1: variance 1.7^2 - (1 + .25 + .04).
  np.testing.assert_allclose(
    _optimal_variance(jnp.asarray(C), 3), 1.7**2 - 1.29, rtol=1e-10
  )


@pytest.mark.parametrize(
  "m,n,inner,rank", [(5, 7, 2, 2), (6, 4, 1, 3), (4, 4, 3, 3), (4, 4, 4, 4)]
)
def test_unbiased_low_rank_is_exact_when_rank_suffices(x64, m, n, inner, rank):
  rng = np.random.default_rng(inner * 10 + rank)
  C = rng.standard_normal((m, inner)) @ rng.standard_normal((inner, n))
  samples = np.asarray(_unbiased_samples(jnp.asarray(C), rank, _keys(5, SMALL)))
  np.testing.assert_allclose(
    samples,
    np.broadcast_to(C, samples.shape),
    rtol=0,
    atol=1e-12 * max(1.0, np.linalg.norm(C)),
  )
  assert float(_optimal_variance(jnp.asarray(C), rank)) == 0.0


def test_unbiased_low_rank_jit_and_float32_finite():
  C = jnp.zeros((4, 5), jnp.float32).at[0, 0].set(1.0)
  fn = jax.jit(kronecker.unbiased_low_rank, static_argnums=1)
  left, right = fn(C, 2, jax.random.key(0))
  assert left.shape == (4, 2) and right.shape == (5, 2)
  assert left.dtype == jnp.float32
  np.testing.assert_allclose(left @ right.T, C, atol=1e-6)
  for C in [
    jnp.zeros((4, 5)),
    jnp.full((4, 5), 1e-30),
    jnp.ones((4, 5)),
    jnp.eye(4, 5),
  ]:
    left, right = fn(C.astype(jnp.float32), 2, jax.random.key(1))
    assert np.all(np.isfinite(left)) and np.all(np.isfinite(right))
    assert np.all(np.isfinite(_optimal_variance(C, 2)))


# ---------------------------------------------------------------------------
# The paper's comparison with the sign trick (section 3.6)
# ---------------------------------------------------------------------------


def _two_summands(rng, a=4, shape=(3, 2)):
  return (
    rng.standard_normal(a),
    rng.standard_normal(shape),
    rng.standard_normal(a),
    rng.standard_normal(shape),
  )


def test_sign_trick_is_unbiased_with_closed_form_variance(x64):
  u1, A1, u2, A2 = _two_summands(np.random.default_rng(1))
  C = _kron_matrix(u1, A1) + _kron_matrix(u2, A2)
  samples = np.asarray(_sign_trick_samples(u1, A1, u2, A2, _keys(7)))
  assert_mean_matches(samples, C, scale=np.linalg.norm(C))
  squared_errors = np.sum((samples - C) ** 2, axis=(1, 2))
  variance = float(_sign_trick_variance(u1, A1, u2, A2))
  # With one random sign the squared error is deterministic.
  np.testing.assert_allclose(squared_errors, variance, rtol=1e-10)
  expected = 2 * np.linalg.norm(u1) * np.linalg.norm(A1) * np.linalg.norm(
    u2
  ) * np.linalg.norm(A2) + 2 * (u1 @ u2) * np.sum(A1 * A2)
  np.testing.assert_allclose(variance, expected, rtol=1e-10)


def test_ok_variance_is_below_sign_trick(x64):
  rng = np.random.default_rng(2)
  for _ in range(3):
    u1, A1, u2, A2 = _two_summands(rng)
    C = _kron_matrix(u1, A1) + _kron_matrix(u2, A2)
    ok_samples = np.asarray(_unbiased_samples(jnp.asarray(C), 1, _keys(8)))
    sign_samples = np.asarray(_sign_trick_samples(u1, A1, u2, A2, _keys(9)))
    ok_var = np.mean(np.sum((ok_samples - C) ** 2, axis=(1, 2)))
    sign_var = np.mean(np.sum((sign_samples - C) ** 2, axis=(1, 2)))
    # Generic summands: strictly smaller, both measured and in closed form.
    assert ok_var < sign_var
    assert float(_optimal_variance(jnp.asarray(C), 1)) < float(
      _sign_trick_variance(u1, A1, u2, A2)
    )


def test_extreme_case_equal_vectors_gives_zero_variance(x64):
  """Section 3.6, case 1: u1 = u2 = h, so C = h (x) (A + D) has rank 1."""
  rng = np.random.default_rng(3)
  h = rng.standard_normal(4)
  A, D = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
  h, A, D = h / np.linalg.norm(h), A / np.linalg.norm(A), D / np.linalg.norm(D)
  C = _kron_matrix(h, A) + _kron_matrix(h, D)
  assert float(_optimal_variance(jnp.asarray(C), 1)) == 0.0
  samples = np.asarray(_unbiased_samples(jnp.asarray(C), 1, _keys(4, SMALL)))
  np.testing.assert_allclose(
    samples, np.broadcast_to(C, samples.shape), atol=1e-12
  )
  # The sign trick pays ||A + D||^2 here (unit norms: no balancing effect).
  np.testing.assert_allclose(
    _sign_trick_variance(h, A, h, D), np.sum((A + D) ** 2), rtol=1e-10
  )
  assert float(_sign_trick_variance(h, A, h, D)) > 0.1


def test_extreme_case_orthogonal_summands_ok_equals_sign_trick(x64):
  """Section 3.6, case 2: u1 _|_ u2 and A1 _|_ A2: the sign trick is optimal."""
  rng = np.random.default_rng(4)
  us, _ = np.linalg.qr(rng.standard_normal((4, 2)))
  As, _ = np.linalg.qr(rng.standard_normal((6, 2)))
  u1, u2 = 2.0 * us[:, 0], 0.5 * us[:, 1]
  A1, A2 = 1.5 * As[:, 0].reshape(3, 2), 3.0 * As[:, 1].reshape(3, 2)
  C = _kron_matrix(u1, A1) + _kron_matrix(u2, A2)
  ok_variance = float(_optimal_variance(jnp.asarray(C), 1))
  sign_variance = float(_sign_trick_variance(u1, A1, u2, A2))
  np.testing.assert_allclose(ok_variance, sign_variance, rtol=1e-10)
  ok_samples = np.asarray(_unbiased_samples(jnp.asarray(C), 1, _keys(10)))
  sign_samples = np.asarray(_sign_trick_samples(u1, A1, u2, A2, _keys(11)))
  np.testing.assert_allclose(
    np.sum((ok_samples - C) ** 2, axis=(1, 2)), ok_variance, rtol=1e-9
  )
  np.testing.assert_allclose(
    np.sum((sign_samples - C) ** 2, axis=(1, 2)), sign_variance, rtol=1e-9
  )


def test_sign_trick_zero_norms_are_finite():
  zeros_u, zeros_A = jnp.zeros(3), jnp.zeros((2, 2))
  u, A = kronecker.sign_trick_mix(
    zeros_u, zeros_A, zeros_u, zeros_A, jax.random.key(0)
  )
  assert np.all(np.isfinite(u)) and np.all(np.isfinite(A))
  np.testing.assert_array_equal(np.outer(u, A), 0)
  h, D = jnp.ones(3), jnp.eye(2)
  # First KF-RTRL step: the stored product is zero.
  for key in jax.random.split(jax.random.key(1), 4):
    u, A = kronecker.sign_trick_mix(zeros_u, zeros_A, h, D, key)
    np.testing.assert_allclose(np.outer(u, A), np.outer(h, D), atol=1e-6)
  assert float(_sign_trick_variance(zeros_u, zeros_A, h, D)) == 0.0


# ---------------------------------------------------------------------------
# biased_low_rank (Algorithm 6)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
  "m,n,rank", [(4, 4, 3), (5, 7, 2), (7, 3, 1), (6, 6, 6)]
)
def test_biased_low_rank_is_truncated_svd(x64, m, n, rank):
  C = np.random.default_rng(m + n + rank).standard_normal((m, n))
  left, right = kronecker.biased_low_rank(jnp.asarray(C), rank)
  assert left.shape == (m, rank) and right.shape == (n, rank)
  u, s, vt = np.linalg.svd(C, full_matrices=False)
  truncated = (u[:, :rank] * s[:rank]) @ vt[:rank]
  np.testing.assert_allclose(np.asarray(left @ right.T), truncated, atol=1e-12)
  # Equal factor norms per column (sqrt of the singular value on each side).
  np.testing.assert_allclose(
    np.linalg.norm(left, axis=0), np.linalg.norm(right, axis=0), rtol=1e-12
  )


# ---------------------------------------------------------------------------
# optimal_diagonal_mixing (Theorems 6 and 7, Lemmas 5 and 6)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
  "d,rank",
  [
    ([0.2, 10.0, 0.5, 3.0, 1.0], 3),  # unsorted, keeps 10 and 3
    ([4.0, 1.0, 1.0, 1.0], 3),  # q = rank + 1 with ties
    ([2.0, 1.0, 1.0], 2),  # tie at the boundary of m
    ([0.3, 0.3, 0.3, 0.3, 0.3, 0.3], 4),
  ],
)
def test_diagonal_mixing_exact_expectation_over_all_signs(x64, d, rank):
  """Averages over all 2^q sign vectors: E[F F^T] = diag(d) exactly."""
  d = np.asarray(d)
  q = d.size
  order = np.argsort(-d, kind="stable")
  signs = jnp.asarray(list(itertools.product([-1.0, 1.0], repeat=q)))
  factors = jax.jit(
    jax.vmap(
      lambda s: diagonal_mixing.diagonal_mixing_with_signs(
        jnp.asarray(d), rank, s
      )
    )
  )(signs)
  products = np.asarray(jnp.einsum("sik,sjk->sij", factors, factors))
  np.testing.assert_allclose(products.mean(axis=0), np.diag(d), atol=1e-12)
  variance = float(_diagonal_variance(jnp.asarray(d), rank))
  np.testing.assert_allclose(
    np.sum((products - np.diag(d)) ** 2, axis=(1, 2)), variance, rtol=1e-10
  )
  assert _numerical_rank(products).max() <= rank
  # Theorem 6's closed form, computed independently here.
  sorted_d = d[order]
  m = min(
    i
    for i in range(1, q + 1)
    if (rank - i + 1) * sorted_d[i - 1] <= sorted_d[i - 1 :].sum()
  )
  mixed = sorted_d[m - 1 :]
  k, s1, s2 = rank - m + 1, mixed.sum(), (mixed**2).sum()
  np.testing.assert_allclose(variance, s1**2 / k - s2, rtol=1e-12)


def test_diagonal_mixing_keeps_large_entries_deterministically(x64):
  d = jnp.asarray([0.2, 10.0, 0.5, 3.0, 1.0])
  left, right = jax.jit(
    jax.vmap(lambda key: kronecker.optimal_diagonal_mixing(d, 3, key))
  )(_keys(15))
  products = np.asarray(jnp.einsum("sik,sjk->sij", left, right))
  for kept in (1, 3):
    np.testing.assert_allclose(products[:, kept, kept], d[kept], rtol=1e-12)
    others = np.delete(products[:, kept, :], kept, axis=1)
    np.testing.assert_allclose(others, 0, atol=1e-12)
  mixed = products[:, [0, 2, 4]][:, :, [0, 2, 4]]
  # The three small entries are mixed into rank one and do vary.
  assert np.std(mixed[:, 0, 1]) > 0.1
  assert_mean_matches(products, np.diag(d), scale=10.0)


def test_diagonal_mixing_degenerate_inputs_no_nan():
  cases = [
    jnp.zeros(5),
    jnp.asarray([3.0, 0.0, 0.0, 0.0, 0.0]),
    jnp.asarray([1.0, 1.0, 1.0, 1.0, 1.0]),
    jnp.asarray([2.0, 2.0, 0.0, 1e-30, 0.0]),
    jnp.asarray([1e-38, 1e-38, 1e-39, 0.0, 0.0]),
    jnp.asarray([5.0, 4.0, 0.0, 0.0, 0.0]),
  ]
  mix = jax.jit(kronecker.optimal_diagonal_mixing, static_argnums=1)
  for rank in (1, 2, 4, 6):
    for d in cases:
      left, right = mix(d.astype(jnp.float32), rank, jax.random.key(rank))
      assert left.shape == (5, rank)
      assert np.all(np.isfinite(left)) and np.all(np.isfinite(right))
      variance = _diagonal_variance(d, rank)
      assert np.isfinite(variance) and variance >= 0
      if rank >= 5 or int(jnp.sum(d > 0)) <= rank:
        # Exactly representable: the output is diag(d), deterministically.
        np.testing.assert_allclose(
          left @ right.T, jnp.diag(d), rtol=1e-6, atol=1e-30
        )


def test_diagonal_mixing_jit_vmap_over_vectors_and_keys(x64):
  rng = np.random.default_rng(8)
  d_batch = jnp.asarray(rng.random((6, 7)))
  keys = jax.random.split(jax.random.key(0), 6)
  fn = jax.jit(
    jax.vmap(lambda d, key: kronecker.optimal_diagonal_mixing(d, 2, key))
  )
  left, right = fn(d_batch, keys)
  assert left.shape == (6, 7, 2)
  variances = jax.jit(
    jax.vmap(lambda d: kronecker.optimal_diagonal_variance(d, 2))
  )(d_batch)
  for i in range(6):
    error = left[i] @ right[i].T - jnp.diag(d_batch[i])
    np.testing.assert_allclose(jnp.sum(error**2), variances[i], rtol=1e-10)


@pytest.mark.parametrize("q,rank", [(9, 4), (4, 3), (10, 1), (17, 16)])
def test_projection_constructions_have_prescribed_diagonal(x64, q, rank):
  """Lemma 6: orthonormal columns, diag(Z Z^T) = p, both constructions."""
  rng = np.random.default_rng(q * rank)
  targets = []
  uniform = rank / q
  for step in range(8):
    # Move from the uniform diagonal along a random zero-sum direction, as
    # far as [0, 1] allows (the last step hits the boundary exactly).
    direction = rng.random(q) ** 3
    direction -= direction.mean()
    reach = min((1 - uniform) / direction.max(), uniform / -direction.min())
    p = uniform + (step + 1) / 8 * reach * direction
    targets.append(-np.sort(-np.clip(p, 0, 1)))
  # Ties and exact zeros / ones.
  targets.append(np.full(q, rank / q))
  num_mixed = q - rank + 1
  targets.append(
    np.concatenate([np.ones(rank - 1), np.full(num_mixed, 1 / num_mixed)])
  )
  targets = np.stack(targets)
  builders = [
    lambda p: diagonal_mixing.projection_with_diagonal_givens(p, rank)
  ]
  if q == rank + 1:
    builders.append(diagonal_mixing.projection_with_diagonal_householder)
  for build in builders:
    z = np.asarray(jax.jit(jax.vmap(build))(jnp.asarray(targets)))
    assert z.shape == (len(targets), q, rank)
    np.testing.assert_allclose(
      np.einsum("bqi,bqj->bij", z, z),
      np.broadcast_to(np.eye(rank), (len(targets), rank, rank)),
      atol=1e-12,
    )
    np.testing.assert_allclose(np.sum(z**2, axis=2), targets, atol=1e-12)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
  C = jnp.ones((3, 5))
  key = jax.random.key(0)
  for fn in (
    lambda r: kronecker.unbiased_low_rank(C, r, key),
    lambda r: kronecker.biased_low_rank(C, r),
    lambda r: kronecker.optimal_variance(C, r),
  ):
    with pytest.raises(ValueError, match=r"rank must be >= 1"):
      fn(0)
    with pytest.raises(ValueError, match=r"rank must be <= min\(m, n\) = 3"):
      fn(4)
    with pytest.raises(ValueError, match=r"static Python int"):
      fn(2.5)
  with pytest.raises(ValueError, match=r"C must be a 2-D matrix"):
    kronecker.unbiased_low_rank(jnp.ones(5), 1, key)
  with pytest.raises(ValueError, match=r"C must be a 2-D matrix"):
    kronecker.biased_low_rank(jnp.ones((2, 3, 4)), 1)
  with pytest.raises(ValueError, match=r"d must be a non-empty 1-D vector"):
    kronecker.optimal_diagonal_mixing(jnp.ones((2, 2)), 1, key)
  with pytest.raises(ValueError, match=r"rank must be >= 1"):
    kronecker.optimal_diagonal_mixing(jnp.ones(3), 0, key)
  with pytest.raises(ValueError, match=r"same number r \+ 1"):
    kronecker.kronecker_sum_reduce(jnp.ones((3, 4)), jnp.ones((2, 6)), key)
  with pytest.raises(ValueError, match=r"must be 2-D"):
    kronecker.kronecker_sum_reduce(jnp.ones((3, 4)), jnp.ones((3, 2, 3)), key)
  with pytest.raises(ValueError, match=r"r \+ 1 >= 2 summands"):
    kronecker.kronecker_sum_reduce(jnp.ones((1, 4)), jnp.ones((1, 6)), key)
  with pytest.raises(ValueError, match=r"u1, u2 of one shape"):
    kronecker.sign_trick_mix(
      jnp.ones(3), jnp.ones((2, 2)), jnp.ones(4), jnp.ones((2, 2)), key
    )
