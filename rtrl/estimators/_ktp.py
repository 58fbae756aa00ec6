"""KTP, the Kronecker triple product (Benzing et al. 2019, section 3.5).

`G ≈ Σ_i a_i ⊗ b_i ⊗ c_i` with `a_i` `(P,)` (over `hhat`), `b_i` `(S, n)`
(state) and `c_i` `(K, n)` (gate columns): memory `r (P + S n + K n) ~ r n`.
`H (a ⊗ b ⊗ c) = a ⊗ (H b) ⊗ c`, and `H b` is a Jacobian-vector product
(`tangents.apply_recurrent_jacobian`: one `(n,) @ (n, K n)` product, no
`n x n` matrix per example), so time is `~ r n^2`. `F = hhat ⊗ D` becomes
`Σ_i hhat ⊗ l_i ⊗ r_i` with `D' = Σ_i l_i r_iᵀ` the optimal unbiased
rank-r approximation of `D` (its per-unit blocks have disjoint supports, so
its singular values are the blocks' singular values). The i-th summands are
mixed with the three-sign trick `(a + s1 hhat) ⊗ (Hb + s2 l) ⊗ (c + s1 s2 r)`
after balancing the three factors of each triple to equal norms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import _base as base
from rtrl.estimators._kronecker_sum import check_rank
from rtrl.estimators._kronecker_sum import low_rank_D_factors
from rtrl.estimators._kronecker_sum import max_rank_of_D
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


def _norm(x):
  return jnp.sqrt(jnp.sum(x * x))


def _balance_triple(a, b, c):
  """Rescales `a, b, c` to a common norm, keeping `a ⊗ b ⊗ c`; a zero
  factor leaves the (zero) triple unchanged."""
  norms = jnp.stack([_norm(a), _norm(b), _norm(c)])
  nonzero = jnp.all(norms > 0)
  safe = jnp.where(nonzero, norms, 1.0)
  target = jnp.exp(jnp.mean(jnp.log(safe)))
  scale = jnp.where(nonzero, target / safe, 1.0)
  return a * scale[0], b * scale[1], c * scale[2]


def ktp(
  cell: Cell, rank: int, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """KTP, the Kronecker triple product (Benzing et al. 2019, section 3.5).

  `G ≈ Σ_{i<=r} a_i ⊗ b_i ⊗ c_i` over `hhat`, the state and the gate
  columns; `H b` is a Jacobian-vector product and `D` is replaced by its
  optimal unbiased rank-`r` approximation, mixed in by the three-sign
  trick. Unbiased. Cost per example and step: memory
  `r (P + S n + K n) ~ r n`, time `~ r n^2`.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`.
    rank: an int, `1 <= rank <= n min(S, K)` (the rank of `D`).
    routing: speed choices (`rtrl.routing.Routing`); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='ktp'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form, or `rank` out of range.
  """
  base.require_lemma1_cell(cell, "ktp")
  rank = check_rank(rank, "ktp")
  routing = routing_lib.resolve(routing)
  if rank > max_rank_of_D(cell):
    raise ValueError(
      f"rank must be at most {max_rank_of_D(cell)} (the rank "
      f"of D for {cell!r}) for estimator 'ktp', got {rank}"
    )

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    dtype = params["W"].dtype
    return (
      jnp.zeros((rank, p), dtype),
      jnp.zeros((rank, s, n), dtype),
      jnp.zeros((rank, k, n), dtype),
    )

  def update(tangent, jac, key):
    a, b, c = tangent
    hb = tangents.apply_recurrent_jacobian(
      jac, cell.hidden_row, b, routing=routing
    )
    d_key, sign_key = jax.random.split(key)
    state_vectors, column_vectors = low_rank_D_factors(
      jac, rank, d_key, routing
    )
    hhat = jnp.broadcast_to(jac.hhat, a.shape)
    a, hb, c = jax.vmap(_balance_triple)(a, hb, c)
    hhat, state_vectors, column_vectors = jax.vmap(_balance_triple)(
      hhat, state_vectors, column_vectors
    )
    signs = jax.random.rademacher(sign_key, (2, rank, 1), dtype=a.dtype)
    s1, s2 = signs[0], signs[1]
    return (
      a + s1 * hhat,
      hb + s2[:, :, None] * state_vectors,
      c + (s1 * s2)[:, :, None] * column_vectors,
    )

  def readout(tangent, g):
    a, b, c = tangent
    weights = tangents.contract_state(b, g)  # (r,)
    return jnp.einsum("ra,r,rc->ac", a, weights, c.reshape(rank, -1))

  return base.build(
    "ktp",
    cell,
    zeros,
    update,
    readout,
    implementation="ktp",
    routing=routing,
    forget=lambda tangent, keep: base.zeroed_where_reset(keep, *tangent),
  )


def _tangent_floats(cell, input_size, *, rank) -> int:
  p, k, s, n = dims(cell, input_size)
  return rank * (p + s * n + k * n)


def _gemm_flops(cell, input_size, *, rank) -> float:
  """`H b_i` for every `i` (Jacobian-vector products)."""
  _, _, s, n = dims(cell, input_size)
  return rank * 2 * (s * n) ** 2


KTP = EstimatorSpec(
  "ktp",
  "{rank}-KTP",
  ktp,
  Cost("r n^2", "r n", (2, 1), _tangent_floats, _gemm_flops),
)

__all__ = ["KTP", "ktp"]
