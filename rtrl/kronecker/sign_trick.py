"""The sign trick of UORO and KF-RTRL, with norm balancing."""

from __future__ import annotations

import jax.numpy as jnp

from rtrl.kronecker._common import Array
from rtrl.kronecker._common import _random_signs

# --------------------------------------------------------------------------
# The sign trick of UORO and KF-RTRL.
# --------------------------------------------------------------------------


def balance_from_norms(u_norm, a_norm):
  """`sqrt(a_norm / u_norm)`, or 1 if either is 0 (the balancing scale)."""
  both = (u_norm > 0) & (a_norm > 0)
  return jnp.where(
    both,
    jnp.sqrt(jnp.where(both, a_norm, 1)) / jnp.sqrt(jnp.where(both, u_norm, 1)),
    1,
  )


def sign_trick_scales(u1_norm, A1_norm, u2_norm, A2_norm, key, dtype):
  """`(p1, p2, sign)` of `sign_trick_mix` from the four norms alone.

  The mix is `u = p1 u1 + sign p2 u2`, `A = A1 / p1 + sign A2 / p2`; callers
  with structured `A2` (a diagonal `D`) form it without dense temporaries.
  """
  p1 = balance_from_norms(u1_norm, A1_norm).astype(dtype)
  p2 = balance_from_norms(u2_norm, A2_norm).astype(dtype)
  return p1, p2, _random_signs(key, (), dtype)


def sign_trick_mix(u1, A1, u2, A2, key) -> tuple[Array, Array]:
  """Unbiased rank-one mix of `u1 (x) A1 + u2 (x) A2` with one random sign.

  With norm balancing `p_i = sqrt(||A_i|| / ||u_i||)` (1 if a norm is 0) and
  a uniform sign `c`: `u = p1 u1 + c p2 u2`, `A = A1 / p1 + c A2 / p2`. Then
  `u (x) A = u1 (x) A1 + u2 (x) A2 + c (p1/p2 u1 (x) A2 + p2/p1 u2 (x) A1)`,
  unbiased since E[c] = 0.

  Args:
    u1, u2: vectors (any shape, the same for both).
    A1, A2: matrices (any shape, the same for both).
    key: a JAX PRNG key.

  Returns:
    `(u, A)` with the shapes of `u1` and `A1`.

  References:
    Tallec & Ollivier 2017 (UORO); Mujika et al. 2018 (KF-RTRL);
    Benzing et al. 2019, sections 3.2-3.3.
  """
  u1, A1, u2, A2 = map(jnp.asarray, (u1, A1, u2, A2))
  if u1.shape != u2.shape or A1.shape != A2.shape:
    raise ValueError(
      "sign_trick_mix needs u1, u2 of one shape and A1, A2 of one shape, "
      f"got u1 {u1.shape}, u2 {u2.shape}, A1 {A1.shape}, A2 {A2.shape}."
    )
  dtype = jnp.result_type(u1, A1, u2, A2, float)
  norm = lambda x: jnp.linalg.norm(jnp.ravel(x))
  p1, p2, sign = sign_trick_scales(
    norm(u1), norm(A1), norm(u2), norm(A2), key, dtype
  )
  u = p1 * u1 + sign * p2 * u2
  A = A1 / p1 + sign * (A2 / p2)
  return u, A


def _scaled_norm(x):
  """`(x / m, log ||x||, ||x|| > 0)` with `m = max|x|`: no square of an
  entry can overflow or underflow."""
  largest = jnp.max(jnp.abs(x))
  positive = largest > 0
  scaled = x / jnp.where(positive, largest, 1)
  log_norm = jnp.log(jnp.where(positive, largest, 1)) + 0.5 * jnp.log(
    jnp.where(positive, jnp.dot(scaled, scaled), 1)
  )
  return scaled, log_norm, positive


def _cosine(x, y):
  nx, ny = jnp.sqrt(jnp.dot(x, x)), jnp.sqrt(jnp.dot(y, y))
  both = (nx > 0) & (ny > 0)
  return jnp.where(both, jnp.dot(x, y) / jnp.where(both, nx * ny, 1), 0)


def sign_trick_variance(u1, A1, u2, A2) -> Array:
  """Variance of `sign_trick_mix` (its squared error, which is deterministic).

  `||u (x) A - G||^2 = ||(p1/p2) u1 (x) A2 + (p2/p1) u2 (x) A1||^2
  = (p1/p2)^2 |u1|^2 |A2|^2 + (p2/p1)^2 |u2|^2 |A1|^2
  + 2 <u1, u2> <A1, A2>`, which for non-zero norms is
  `2 |u1| |A1| |u2| |A2| + 2 <u1, u2> <A1, A2>`.

  Computed from log-norms and cosines, so it is finite whenever the variance
  itself is representable (squares such as `|u2|^2 |A1|^2` are never formed).

  Args:
    u1, A1, u2, A2: as for `sign_trick_mix`.

  Returns:
    Scalar variance.
  """
  u1, A1, u2, A2 = (jnp.ravel(jnp.asarray(x)) for x in (u1, A1, u2, A2))
  (su1, lu1, nu1), (sa1, la1, na1), (su2, lu2, nu2), (sa2, la2, na2) = (
    _scaled_norm(x) for x in (u1, A1, u2, A2)
  )
  # log p_i = (log|A_i| - log|u_i|) / 2, or 0 if either norm is 0.
  log_p1 = jnp.where(nu1 & na1, 0.5 * (la1 - lu1), 0)
  log_p2 = jnp.where(nu2 & na2, 0.5 * (la2 - lu2), 0)
  log_ratio = log_p1 - log_p2
  first = jnp.where(nu1 & na2, jnp.exp(log_ratio + lu1 + la2), 0)
  second = jnp.where(nu2 & na1, jnp.exp(lu2 + la1 - log_ratio), 0)
  all_nonzero = nu1 & na1 & nu2 & na2
  cross = jnp.where(
    all_nonzero,
    2
    * _cosine(su1, su2)
    * _cosine(sa1, sa2)
    * jnp.exp(jnp.where(all_nonzero, lu1 + la1 + lu2 + la2, 0)),
    0,
  )
  variance = first * first + second * second + cross
  return jnp.maximum(variance, 0)
