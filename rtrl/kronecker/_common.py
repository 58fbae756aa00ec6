"""Argument checks and small helpers shared by the `rtrl.kronecker` modules."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp

Array = jax.Array


def _static_rank(rank, max_rank=None, what=""):
  """Returns `rank` as a Python int after checking 1 <= rank <= max_rank."""
  if isinstance(rank, bool):
    raise ValueError(f"rank must be a Python int >= 1, got the bool {rank!r}.")
  try:
    rank_int = operator.index(rank)
  except TypeError:
    raise ValueError(
      "rank must be a static Python int >= 1 (it fixes output shapes; pass "
      f"it as a static argument under jit), got {rank!r} of type "
      f"{type(rank).__name__}."
    ) from None
  if rank_int < 1:
    raise ValueError(f"rank must be >= 1, got rank={rank_int}.")
  if max_rank is not None and rank_int > max_rank:
    raise ValueError(
      f"rank must be <= min(m, n) = {max_rank} for {what}, got "
      f"rank={rank_int}. A rank-{max_rank} factorisation already "
      "represents the matrix exactly."
    )
  return rank_int


def _check_matrix(C, name="C") -> Array:
  C = jnp.asarray(C)
  if C.ndim != 2:
    raise ValueError(
      f"{name} must be a 2-D matrix of shape (m, n), got an array of shape "
      f"{C.shape}."
    )
  if C.shape[0] == 0 or C.shape[1] == 0:
    raise ValueError(f"{name} must be non-empty, got shape {C.shape}.")
  if not jnp.issubdtype(C.dtype, jnp.floating):
    C = C.astype(jnp.result_type(float))
  return C


def _check_vector(d, name="d") -> Array:
  d = jnp.asarray(d)
  if d.ndim != 1 or d.shape[0] == 0:
    raise ValueError(
      f"{name} must be a non-empty 1-D vector of shape (q,), got an array "
      f"of shape {d.shape}."
    )
  if not jnp.issubdtype(d.dtype, jnp.floating):
    d = d.astype(jnp.result_type(float))
  return d


def _safe_divide(numerator, denominator):
  """`numerator / denominator`, and 0 where the denominator is not > 0."""
  positive = denominator > 0
  return jnp.where(positive, numerator / jnp.where(positive, denominator, 1), 0)


def _random_signs(key, shape, dtype):
  return jax.random.rademacher(key, shape, dtype=dtype)
