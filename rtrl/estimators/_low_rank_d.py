"""KF-APPROX's `D'`: the optimal unbiased rank-`r` approximation of the
block-diagonal `D` (Benzing et al. 2019, section 4.3), from `D`'s per-unit
block SVD: its Kronecker factors, the dense right factor, and its norm in
closed form (so no reduction reads `D'`, which XLA:GPU took minutes to
compile in the batch-256 program)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import kronecker
from rtrl import routing as routing_lib
from rtrl import tangents


def low_rank_D_factors(
  jac,
  rank: int,
  key,
  routing: routing_lib.Routing | None = None,
  *,
  block_svd=None,
):
  """`D' = Σ_i l_i ⊗ r_i`, the optimal unbiased rank-`rank` approximation of
  the block-diagonal `D`, from its per-unit block SVD (`block_svd`, that of
  `tangents.block_svd_of_D(jac)` when a caller has it; None: computed).

  Returns:
    `(state_vectors (r, S, n), column_vectors (r, K, n))`.
  """
  if block_svd is None:
    block_svd = tangents.block_svd_of_D(jac)
  left, singular_values, right = block_svd
  n, num_values = singular_values.shape
  left_coef, right_coef = kronecker.optimal_diagonal_mixing(
    singular_values.reshape(-1),
    rank,
    key,
    pairwise_sort_max=routing_lib.or_xla(routing).pairwise_sort_max,
  )
  left_coef = left_coef.reshape(n, num_values, rank)
  right_coef = right_coef.reshape(n, num_values, rank)
  state_vectors = jnp.einsum("isb,ibr->rsi", left, left_coef)
  column_vectors = jnp.einsum("ikb,ibr->rki", right, right_coef)
  return state_vectors, column_vectors


def dense_low_rank_D(state_vectors, column_vectors) -> jax.Array:
  """`D' = Σ_r state_vectors[r] ⊗ column_vectors[r]` as a dense state-major
  right factor `(S n, K, n)`, from `low_rank_D_factors`' `(r, S, n)` and
  `(r, K, n)`."""
  dense = jnp.einsum("rkj,rsi->sikj", column_vectors, state_vectors)
  return dense.reshape((-1,) + dense.shape[2:])


def low_rank_D_norm(
  jac,
  rank: int,
  *,
  singular_values=None,
  routing: routing_lib.Routing | None = None,
) -> jax.Array:
  """`‖D'‖_F` of the optimal unbiased rank-`rank` `D'` without forming it:
  every sample has `‖D' - D‖² = s1²/k - s2` (Theorem 6's variance) and
  `<D, D' - D> = 0`, so `‖D'‖² = ‖D‖² + variance`. No reduction reads
  `D'` or its factors: one over `D'`'s product was what XLA:GPU took
  minutes to compile in KF-APPROX's batch-256 program
  (docs/benchmarks/gpu.md). `singular_values` `(n, min(S, K))`: those of
  `tangents.block_svd_of_D(jac)` when a caller has them; `routing` orders
  them as `low_rank_D_factors` does (one ordering for both in the program)."""
  if singular_values is None:
    _, singular_values, _ = tangents.block_svd_of_D(jac)
  variance = kronecker.optimal_diagonal_variance(
    singular_values.reshape(-1),
    rank,
    pairwise_sort_max=routing_lib.or_xla(routing).pairwise_sort_max,
  )
  return jnp.sqrt(jnp.sum(jac.D * jac.D) + variance)


def unbiased_low_rank_D(
  jac, rank: int, key, routing: routing_lib.Routing | None = None
) -> jax.Array:
  """`D'` as a dense state-major right factor `(S n, K, n)`."""
  return dense_low_rank_D(*low_rank_D_factors(jac, rank, key, routing))
