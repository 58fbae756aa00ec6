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
from rtrl.cells import StepJacobians

# Below this many tangent rows the factorised `H v` beats forming `H`.
DENSE_H_MIN_ROWS = 4


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
  jac: StepJacobians, hidden_row: int, v: jax.Array
) -> jax.Array:
  """`H v` for state tangents `v` of shape `(..., S, n)` (same shape out)."""
  num_rows, n = v.shape[-2:]
  rows = math.prod(v.shape[:-2])
  if rows < DENSE_H_MIN_ROWS:
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
# XLA's GEMMs run fastest (measured on 2-core XLA:CPU at 16-OK, n=128, in a
# scan: Gram 4 ms vs 21 ms, Gram + mix 12 ms vs 31 ms for rank-first rows).
# The state row and the unit share one axis: with a separate `S` axis of
# size 1 (RNN, RHN, GRU) XLA:CPU gave the scan's carried factors a layout
# it did not recognise as row-major and copied the whole tangent every step
# (3.6 of the 34 ms of a 16-OK RHN-128 step; exact RTRL's influence too).


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


# XLA:CPU runs the Gram matrix and the mixing of a SMALL stack of FEW
# factors faster on the transposed, row-major `(r, S n K n)` copy: measured
# at batch 16, in a scan, n=64 r=2: 0.15 vs 1.3 ms; n=128 r=2: 1.0 vs 4.1 ms;
# but n=128 r=16: 28 vs 9 ms. The crossover is near r * S n K n = 2^17
# floats per example, and above r = 4 the copies cost more than they save
# (full 8-OK step, RHN-64: 3.9 ms tall, 4.2 row-major; 4-OK: 2.35 tall, 2.0
# row-major at n=64, 6.4 tall, 7.1 row-major at n=128).
_ROWS_FIRST_MAX_FLOATS = 2**17
_ROWS_FIRST_MAX_RANK = 4


def _rows_first(num_floats: int, rank: int) -> bool:
  return (
    jax.default_backend() == "cpu"
    and rank <= _ROWS_FIRST_MAX_RANK
    and num_floats < _ROWS_FIRST_MAX_FLOATS
  )


# The mixing `(S n K n, r) @ (r, m)` of a few tall columns ran faster on
# XLA:CPU as `r` broadcast multiply-adds in one loop fusion than as a GEMM
# (a YNNPACK call: 1.18 ms for 4 MB in, 4 MB out at 8-OK RHN-64, batch 16,
# about the DRAM streaming rate for data that sits in cache).
# Full r-OK steps, batch 16, the two forms alternating three times in one
# sitting (ms): 8-OK RHN-64 4.52-4.86 -> 3.88-4.64, RHN-128 13.6-14.8 ->
# 9.5-13.2, GRU-128 27.6-32.3 -> 26.5-32.8, LSTM-128 75-92 -> 71-87; 4-OK
# RHN-128 8.6-9.3 -> 6.3-7.6. Above rank 8 the fused loop lost to the GEMM
# (12-OK RHN-64 6.3-6.8 -> 9.0; 16-OK RHN-128 22-28 -> 36-53).
_ELEMENTWISE_MIX_MAX_RANK = 8


def _elementwise_mix(rank: int) -> bool:
  return jax.default_backend() == "cpu" and rank <= _ELEMENTWISE_MIX_MAX_RANK


# On CPU, from rank 2 to 16, the Gram matrix and the mixing go to
# `rtrl.cpu_kernels` (one pass over the factors each, a row per SIMD
# register) instead of any of the XLA forms above. Full r-OK steps, batch
# 16, the library's XLA forms against the kernels in one sitting
# (`scripts/bench_cpu_kernels.py`, ms): RHN-64 2-OK 1.64 -> 1.06, 4-OK
# 2.45 -> 1.84, 8-OK 4.54 -> 3.40, 16-OK 7.54 -> 5.60; RHN-128 2-OK 6.58 ->
# 6.26, 8-OK 13.0 -> 10.8, 16-OK 27.3 -> 22.1. At rank 1 XLA's forms were
# faster (RHN-64 0.75 vs 0.92 ms).
_CPU_KERNELS_MIN_RANK = 2


def _cpu_kernels(rank: int, dtype) -> bool:
  return rank >= _CPU_KERNELS_MIN_RANK and cpu_kernels.usable(rank, dtype)


def factors_and_D_rows(factors: jax.Array, jac: StepJacobians):
  """The `r + 1` right factors `[A_1..A_r, dense_D_factor]` as
  `kronecker.Rows`, for state-major factors `(S n, K, n, r)`.

  The Gram matrix is one GEMM over the tall `(S n K n, r)` matrix plus a
  gather of its diagonal entries; a combination `X (m, r + 1)` is one GEMM
  plus a scatter-add, returned state-major `(S n, K, n, m)`. The stacked
  `(r + 1, S n K n)` rows are never formed. On CPU, ranks 2-16 use
  `rtrl.cpu_kernels` for both (`_CPU_KERNELS_MIN_RANK`); without them,
  small stacks go through an explicit row-major copy (see
  `_ROWS_FIRST_MAX_FLOATS`) and low ranks mix by multiply-adds instead of a
  GEMM (`_ELEMENTWISE_MIX_MAX_RANK`).
  """
  rank = factors.shape[-1]
  columns = factors.reshape(-1, rank)
  d_norm_sq = jnp.sum(jac.D * jac.D)
  if _cpu_kernels(rank, columns.dtype):
    gram_of_stack = lambda: cpu_kernels.gram_of_columns(columns)
    mix = lambda coef: (
      cpu_kernels.mix_columns(columns, coef)
      if cpu_kernels.usable(rank, columns.dtype, out_columns=coef.shape[0])
      else linalg.matmul(columns, coef.T)
    )
  elif _rows_first(columns.size, rank):
    # The barrier keeps XLA from folding the transpose back into the GEMMs.
    rows = jax.lax.optimization_barrier(columns.T)
    gram_of_stack = lambda: linalg.gram(rows)
    mix = lambda coef: jax.lax.optimization_barrier(linalg.matmul(coef, rows)).T
  else:
    gram_of_stack = lambda: linalg.gram_of_columns(columns)
    if _elementwise_mix(rank):
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
  library SVD per block is one LAPACK call per unit and example on a CPU
  (`n B` of them per step: 2.6 of an RNN-128 KF-APPROX step's 3.4 ms).
  Other shapes use `jnp.linalg.svd`.
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
