"""Linear algebra on RTRL tangents, shared by every estimator.

Layouts (one example):
  * a state tangent is `(..., S, n)` (the cell's state rows),
  * a parameter "column" index is `(P, K, n)` for `W` of shape `(P, K n)`,
  * the exact influence matrix `G = d state / d W` is `(P, K, n, S, n)`,
  * the right Kronecker factors of the Kronecker-sum estimators are stored
    state-major, `(S n, K, n, r)` (`(S n, K, n)` for a single one), the
    state row and unit merged into one leading axis (`s n + i`), so
    `G = Σ_i u_i ⊗ A[..., i]` with `u_i` of shape `(P,)` and
    `G[p, k, j, s, i] = Σ_r u[r, p] A[s n + i, k, j, r]`.

`H v` (the recurrent Jacobian applied to state tangents) is the one place
every estimator spends its `n^3`: `apply_recurrent_jacobian` is it, for all.
For many tangent rows (exact RTRL) it forms the step's
`(S n, S n)` matrix `H` once (`S K n^2` work) and applies it with ONE GEMM
`(rows, S n) @ (S n, S n)`; `propagate_factors` does the same for the
state-major Kronecker factors (KF, KF-approx, KF-AVG, OK, B-OK). That is
half the FLOPs of the factorised form for RHN and no `(rows, K n)`
intermediate to stream through memory. For a single
vector (UORO) the factorised Jacobian-vector product is cheaper.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rtrl import cpu_kernels
from rtrl import kronecker
from rtrl import linalg
from rtrl import routing as routing_lib
from rtrl.cells import StepJacobians


def recurrent_jacobian_t(jac: StepJacobians, hidden_row: int) -> jax.Array:
  """`Hᵀ` as an `(S n, S n)` matrix: `(H v).ravel() = v.ravel() @ Hᵀ`.

  `H[(s, j), (t, i)] = [t = hidden_row] Σ_k D[j, s, k] W_h[i, k n + j]
  + [i = j] dfds[j, s, t]` for state rows `s, t` and units `i, j`.
  """
  n, num_rows, num_gates = jac.D.shape
  weights = jac.recurrent_weights.reshape(n, num_gates, n)  # [i, k, j]
  through_gates = jnp.einsum("ikj,jsk->isj", weights, jac.D)  # [i, s, j]
  eye = jnp.eye(n, dtype=jac.D.dtype)
  direct = jnp.einsum("jst,ij->tisj", jac.dfds, eye)  # [t,i,s,j]
  is_hidden = (jnp.arange(num_rows) == hidden_row).astype(jac.D.dtype)
  h_t = direct + is_hidden[:, None, None, None] * through_gates[None]
  return jac.history * h_t.reshape(num_rows * n, num_rows * n)


def _apply_factorised(jac: StepJacobians, hidden_row: int, v: jax.Array):
  n, _, num_gates = jac.D.shape
  dz = linalg.matmul(v[..., hidden_row, :], jac.recurrent_weights)
  dz = dz.reshape(dz.shape[:-1] + (num_gates, n))
  through_gates = jnp.einsum("jsk,...kj->...sj", jac.D, dz)
  direct = jnp.einsum("jst,...tj->...sj", jac.dfds, v)
  return jac.history * (through_gates + direct)


def apply_recurrent_jacobian(
  jac: StepJacobians,
  hidden_row: int,
  v: jax.Array,
  *,
  routing: routing_lib.Routing | None = None,
) -> jax.Array:
  """`H v` for state tangents `v` of shape `(..., S, n)` (same shape out):
  the factorised product, or `H` formed once and one GEMM, as
  `routing.dense_h` says (None: `Routing()`)."""
  num_rows, n = v.shape[-2:]
  rows = math.prod(v.shape[:-2])
  if not routing_lib.or_xla(routing).dense_h(rows):
    return _apply_factorised(jac, hidden_row, v)
  h_t = recurrent_jacobian_t(jac, hidden_row)
  flat = v.reshape(rows, num_rows * n)
  return linalg.matmul(flat, h_t).reshape(v.shape)


# Kronecker right factors (and the exact influence, with the P rows of W as
# its copies) are stored STATE-MAJOR, `(S n, K, n, *copies)`: the state
# axis (where `H` acts) first, the W-column axes next and the copies / rank
# axis last. Then `H A` for all copies of an example is ONE
# GEMM `(S n, S n) @ (S n, K n r)`, and the Gram matrix and the mixing of the
# copies contract a tall `(S n K n, r)` matrix over its long side, the shape
# XLA's GEMMs run fastest. The state row and the unit share one axis: with a
# separate `S` axis of size 1 XLA:CPU copied the carried tangent every step.
# Measurements of both: docs/benchmarks/routing.md.


def propagate_factors(
  jac: StepJacobians, hidden_row: int, factors: jax.Array
) -> jax.Array:
  """`H A` for state-major factors `(S n, K, n, *copies)`: one GEMM."""
  h = recurrent_jacobian_t(jac, hidden_row).T
  flat = factors.reshape(factors.shape[0], -1)
  return linalg.matmul(h, flat).reshape(factors.shape)


def dense_D_factor(jac: StepJacobians) -> jax.Array:
  """`D` as a state-major right factor `(S n, K, n)`: `F_t = hhat ⊗ D`."""
  n, num_rows, num_gates = jac.D.shape
  dense = jnp.einsum("isk,ij->sikj", jac.D, jnp.eye(n, dtype=jac.D.dtype))
  return dense.reshape(num_rows * n, num_gates, n)


# `dense_D_factor` is zero except on the "diagonal" `(s n + j, k, j)`: `S n K`
# of its `S n K n` entries. The helpers below touch only those entries (a
# gather or an in-place scatter-add), so adding `D ⊗ c` to a propagated
# factor costs no extra pass over it.


def _factor_diagonal(n: int, num_rows: int, num_gates: int):
  """Flat indices in `(S n, K, n)` of `dense_D_factor`'s non-zero entries
  `(s n + j, k, j)`, in order `(s, j, k)`, the order of `_factor_D_values`."""
  s = jnp.arange(num_rows)[:, None, None]
  j = jnp.arange(n)[None, :, None]
  k = jnp.arange(num_gates)[None, None, :]
  return (((s * n + j) * num_gates + k) * n + j).reshape(-1)


def _factor_D_values(jac: StepJacobians) -> jax.Array:
  """`D[j, s, k]` in order `(s, j, k)`: `(S n K,)`."""
  return jnp.transpose(jac.D, (1, 0, 2)).reshape(-1)


def add_scaled_D_to_factors(
  factors: jax.Array, coef: jax.Array, jac: StepJacobians
) -> jax.Array:
  """`factors + dense_D_factor ⊗ coef` for factors `(S n, K, n, *copies)`
  and `coef` of shape `copies`: a scatter-add on the `S n K` diagonal
  entries, no pass over the factors."""
  n, num_rows, num_gates = jac.D.shape
  copies = factors.shape[3:]
  flat = factors.reshape((-1,) + copies)
  values = _factor_D_values(jac).reshape((-1,) + (1,) * len(copies)) * coef
  positions = _factor_diagonal(n, num_rows, num_gates)
  return flat.at[positions].add(values).reshape(factors.shape)


def inner_with_D_factors(factors: jax.Array, jac: StepJacobians) -> jax.Array:
  """`<A_c, dense_D_factor>` for factors `(S n, K, n, *copies)`: shape
  `copies` (a gather of the diagonal entries)."""
  n, num_rows, num_gates = jac.D.shape
  copies = factors.shape[3:]
  flat = factors.reshape((-1,) + copies)
  diagonal = flat[_factor_diagonal(n, num_rows, num_gates)]
  values = _factor_D_values(jac).reshape((-1,) + (1,) * len(copies))
  return jnp.sum(diagonal * values, axis=0)


def contract_factors(factors: jax.Array, g: jax.Array) -> jax.Array:
  """`g · A` over the leading state axis of `(S n, K, n, *copies)` factors,
  for a state covector `g` `(S, n)`: `(K, n, *copies)`."""
  return linalg.matmul(g.reshape(-1), factors.reshape(g.size, -1)).reshape(
    factors.shape[1:]
  )


def factors_and_D_rows(
  factors: jax.Array,
  jac: StepJacobians,
  *,
  routing: routing_lib.Routing | None = None,
):
  """The `r + 1` right factors `[A_1..A_r, dense_D_factor]` as
  `kronecker.Rows`, for state-major factors `(S n, K, n, r)`.

  The Gram matrix is one GEMM over the tall `(S n K n, r)` matrix plus a
  gather of its diagonal entries; a combination `X (m, r + 1)` is one GEMM
  plus a scatter-add, returned state-major `(S n, K, n, m)`. The stacked
  `(r + 1, S n K n)` rows are never formed. `routing` (None: `Routing()`,
  XLA's GEMMs) may send both to `rtrl.cpu_kernels`
  (`Routing.cpu_kernel_products`), or, for small stacks, through an
  explicit row-major copy (`Routing.rows_first`), or mix low ranks by
  multiply-adds instead of a GEMM (`Routing.elementwise_mix`): the same
  numbers by every route.
  """
  routing = routing_lib.or_xla(routing)
  rank = factors.shape[-1]
  columns = factors.reshape(-1, rank)
  d_norm_sq = jnp.sum(jac.D * jac.D)
  if routing.products_on_cpu_kernels(rank, columns.dtype):
    gram_of_stack = lambda: cpu_kernels.gram_of_columns(columns)
    mix = lambda coef: (
      cpu_kernels.mix_columns(columns, coef)
      if routing.products_on_cpu_kernels(rank, columns.dtype, coef.shape[0])
      else linalg.matmul(columns, coef.T)
    )
  elif routing.rows_first(columns.size, rank):
    # The barrier keeps XLA from folding the transpose back into the GEMMs.
    rows = jax.lax.optimization_barrier(columns.T)
    gram_of_stack = lambda: linalg.gram(rows)
    mix = lambda coef: jax.lax.optimization_barrier(linalg.matmul(coef, rows)).T
  else:
    gram_of_stack = lambda: linalg.gram_of_columns(columns)
    if routing.elementwise_mix(rank):
      mix = lambda coef: linalg.matmul_unrolled(columns, coef.T)
    else:
      mix = lambda coef: linalg.matmul(columns, coef.T)

  def combine(x):
    out = mix(x[:, :rank]).reshape(factors.shape[:-1] + (x.shape[0],))
    return add_scaled_D_to_factors(out, x[:, rank], jac)

  def gram(transform):
    if transform is not None:  # the refinement pass: explicit rows
      combined = combine(transform).reshape(-1, transform.shape[0])
      return linalg.gram_of_columns(combined)
    top = gram_of_stack()
    cross = inner_with_D_factors(factors, jac)
    return jnp.block(
      [[top, cross[:, None]], [cross[None, :], d_norm_sq[None, None]]]
    )

  return kronecker.Rows(gram=gram, combine=combine, dtype=factors.dtype)


def D_transpose(jac: StepJacobians, g: jax.Array) -> jax.Array:
  """`gᵀ D` for a state covector `g` `(S, n)`: returns `(K, n)`."""
  return jnp.einsum("sj,jsk->kj", g, jac.D)


def contract_state(factor: jax.Array, g: jax.Array) -> jax.Array:
  """Contracts the trailing `(S, n)` state axes of `factor` with `g`."""
  num_rows, n = g.shape
  lead = factor.shape[:-2]
  flat = factor.reshape((math.prod(lead), num_rows * n))
  return linalg.matmul(flat, g.reshape(num_rows * n)).reshape(lead)


def block_svd_of_D(jac: StepJacobians):
  """SVD of the block-diagonal `D`: one `(S, K)` block per unit.

  Returns `(left (n, S, q), singular_values (n, q), right (n, K, q))` with
  `q = min(S, K)`, so that `D[j] = left[j] @ diag(sv[j]) @ right[j].T`. The
  singular values of the whole `(S n, K n)` matrix are the union of these
  (the blocks have disjoint row and column supports).

  The built-in cells' blocks are one row (RNN, RHN, GRU: `S = 1`) or two
  (LSTM), and get a closed form (`_rank_one_blocks`, `_two_row_blocks`): a
  library SVD per block is one LAPACK call per unit and example on a CPU,
  `n B` of them per step, most of a KF-APPROX step
  (docs/benchmarks/routing.md). Other shapes use `jnp.linalg.svd`.
  """
  n, num_rows, num_gates = jac.D.shape
  if num_rows == 1 or num_gates == 1:
    return _rank_one_blocks(jac.D)
  if num_rows == 2:
    return _two_row_blocks(jac.D)
  if num_gates == 2:
    right, singular_values, left = _two_row_blocks(jnp.swapaxes(jac.D, 1, 2))
    return left, singular_values, right
  left, singular_values, right_t = jnp.linalg.svd(jac.D, full_matrices=False)
  return left, singular_values, jnp.swapaxes(right_t, -1, -2)


def _rank_one_blocks(blocks: jax.Array):
  """SVD of `(n, S, K)` blocks with `S = 1` or `K = 1`: `s = |block|`, the
  length-one side's vector is `1`, the other the block over `s` (0 where
  `s = 0`), so `left s rightᵀ` is the block exactly."""
  norm = jnp.sqrt(jnp.sum(blocks * blocks, axis=(1, 2)))  # (n,)
  positive = norm > 0
  unit = blocks / jnp.where(positive, norm, 1)[:, None, None]
  if blocks.shape[1] == 1:
    left = jnp.ones(blocks.shape[:2] + (1,), blocks.dtype)  # (n, 1, 1)
    right = jnp.swapaxes(unit, 1, 2)  # (n, K, 1)
  else:
    left = unit  # (n, S, 1)
    right = jnp.ones((blocks.shape[0], blocks.shape[2], 1), blocks.dtype)
  return left, norm[:, None], right


def _two_row_blocks(blocks: jax.Array):
  """SVD of `(n, 2, K)` blocks by the closed-form eigendecomposition of
  each `2 x 2` Gram matrix `B Bᵀ`: the left vectors are the rotation that
  diagonalises it (orthonormal to rounding), the right vectors `Bᵀ u / s`
  (0 where `s` is not positive), so `left diag(s) rightᵀ = left leftᵀ B` is
  the block to rounding whatever the accuracy of a small `s`. A singular
  value far below the block's largest is accurate to about `eps` times the
  largest (the rotation's angle comes from the squared entries); it only
  weighs in the optimal mixing's variance, never in what the factors
  reproduce."""
  gram = jnp.einsum("nsk,ntk->nst", blocks, blocks)
  a, b, c = gram[:, 0, 0], gram[:, 0, 1], gram[:, 1, 1]
  angle = 0.5 * jnp.arctan2(2 * b, a - c)
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  # Columns: the eigenvector of the larger eigenvalue first.
  left = jnp.stack(
    [jnp.stack([cos, sin], -1), jnp.stack([-sin, cos], -1)], -1
  )  # (n, 2, 2)
  projected = jnp.einsum("nsk,nsq->nkq", blocks, left)  # Bᵀ u
  singular_values = jnp.sqrt(jnp.sum(projected * projected, axis=1))
  positive = singular_values > 0
  right = projected / jnp.where(positive, singular_values, 1)[:, None, :]
  return left, singular_values, right


__all__ = [
  "D_transpose",
  "add_scaled_D_to_factors",
  "apply_recurrent_jacobian",
  "block_svd_of_D",
  "contract_factors",
  "contract_state",
  "dense_D_factor",
  "factors_and_D_rows",
  "inner_with_D_factors",
  "propagate_factors",
  "recurrent_jacobian_t",
]
