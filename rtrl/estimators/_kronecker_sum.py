"""Estimators that store `G ≈ Σ_i u_i ⊗ A_i` (u_i: (P,), A_i: (S n, K, n)).

The tangent is `(u (P,), A (S n, K, n))` for a single product (KF,
KF-approx) and `(u (r, P), A (S n, K, n, r))` for `r` of them (KF-AVG, OK,
B-OK): right factors state-major with the copies last (see `rtrl.tangents`).

* `kf` — KF-RTRL (Mujika et al. 2018): one Kronecker product; `H G` is
  `u ⊗ (H A)`, mixed with `F = hhat ⊗ D` by the sign trick with norm
  balancing.
* `kf_avg` — `rank` independent KF-RTRL copies, gradients averaged.
* `kf_approx` — KF-RTRL with `F` replaced by `hhat ⊗ D'`, `D'` the optimal
  unbiased rank-`rank` approximation of `D` (Benzing et al. 2019, section 4.3).
* `ok` — r-OK: the `r + 1` summands `u_i ⊗ H A_i` and `hhat ⊗ D` reduced to
  `r` by the minimum-variance unbiased Kronecker-sum approximation
  (Algorithm 4/5, Theorem 1).
* `ok_biased` — r-B-OK: the same reduction by Eckart–Young (Algorithm 6).
  (`ok` and `ok_biased` live in `_ok.py`, over the pieces here.)

Per example: memory `r (P + K S n^2) ~ r n^2`, time `~ r n^3` (the `H A_i`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import kronecker
from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl import validation
from rtrl.cells import Cell
from rtrl.estimators import _base as base
from rtrl.estimators._low_rank_d import dense_low_rank_D
from rtrl.estimators._low_rank_d import low_rank_D_factors
from rtrl.estimators._low_rank_d import low_rank_D_norm
from rtrl.estimators._low_rank_d import unbiased_low_rank_D
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


def check_rank(rank, name: str) -> int:
  """`rank` if it is an int >= 1, else a ValueError naming the estimator."""
  return validation.positive_int(f"rank of estimator {name!r}", rank)


def max_rank_of_D(cell: Cell) -> int:
  """Number of singular values of `D` (`n` blocks of `(S, K)`)."""
  return cell.hidden_size * min(cell.num_state_rows, cell.num_gates)


def kronecker_zeros(cell: Cell, params, copies: int | None):
  p, k, s, n = base.sizes(cell, params)
  dtype = params["W"].dtype
  if copies is None:
    return jnp.zeros((p,), dtype), jnp.zeros((s * n, k, n), dtype)
  return (
    jnp.zeros((copies, p), dtype),
    jnp.zeros((s * n, k, n, copies), dtype),
  )


def kronecker_readout(tangent, g):
  """`dL/dW = Σ_i u_i ⊗ (g · A_i)` for single or stacked factors."""
  u, factor = tangent
  right = tangents.contract_factors(factor, g)  # (K, n[, r])
  if u.ndim == 1:
    return jnp.outer(u, right.reshape(-1))
  return jnp.einsum("ra,cr->ac", u, right.reshape(-1, u.shape[0]))


def forget_u(tangent, keep):
  """A Kronecker sum with zero `u` and `H A = 0` (`jac.history` 0) is the
  zero tangent: the large `A` need not be touched at a reset."""
  u, factor = tangent
  (u,) = base.zeroed_where_reset(keep, u)
  return u, factor


def _kf_update(
  cell: Cell,
  approximate_D_rank: int | None = None,
  copies: int | None = None,
  routing: routing_lib.Routing | None = None,
):
  """KF-RTRL's step, for one product or `copies` independent ones (KF-AVG:
  `u (r, P)`, `A (S n, K, n, r)`, all copies propagated by one GEMM)."""

  def update(tangent, jac, key):
    u, factor = tangent
    propagated = tangents.propagate_factors(jac, cell.hidden_row, factor)
    mix_key, d_key = jax.random.split(key)
    if approximate_D_rank is not None:
      return _mix_with_low_rank_D(
        u, propagated, jac, approximate_D_rank, d_key, mix_key, routing
      )
    # The sign trick with F = hhat ⊗ D, D added on its diagonal entries.
    norm = lambda x: jnp.sqrt(jnp.sum(x * x))
    u_norms = jnp.sqrt(jnp.sum(u * u, axis=-1))
    # Over the (S n, K, n) axes: a scalar, or one norm per copy.
    factor_norms = jnp.sqrt(jnp.sum(propagated * propagated, axis=(0, 1, 2)))
    scales = lambda u_norm, a_norm, key: kronecker.sign_trick_scales(
      u_norm, a_norm, norm(jac.hhat), norm(jac.D), key, propagated.dtype
    )
    if copies is None:
      p1, p2, sign = scales(u_norms, factor_norms, mix_key)
    else:
      p1, p2, sign = jax.vmap(scales)(
        u_norms, factor_norms, jax.random.split(mix_key, copies)
      )
    u_new = p1[..., None] * u + (sign * p2)[..., None] * jac.hhat
    factor_new = tangents.add_scaled_D_to_factors(
      propagated / p1, sign / p2, jac
    )
    return u_new, factor_new

  return update


def _mix_with_low_rank_D(u, propagated, jac, rank: int, d_key, key, routing):
  """`kronecker.sign_trick_mix(u, propagated, hhat, D', key)` with `‖D'‖`
  in closed form (`low_rank_D_norm`): `D'` is only formed to be added."""
  norm = lambda x: jnp.sqrt(jnp.sum(x * x))
  block_svd = tangents.block_svd_of_D(jac)  # once, for the norm and D'
  p1, p2, sign = kronecker.sign_trick_scales(
    norm(u),
    norm(propagated),
    norm(jac.hhat),
    low_rank_D_norm(jac, rank, singular_values=block_svd[1], routing=routing),
    key,
    jnp.result_type(u, propagated, jac.hhat, float),
  )
  u_new = p1 * u + sign * p2 * jac.hhat
  dense = dense_low_rank_D(
    *low_rank_D_factors(jac, rank, d_key, routing, block_svd=block_svd)
  )
  return u_new, propagated / p1 + sign * (dense / p2)


def _lemma1(cell, factory: str) -> Cell:
  return base.require_lemma1_cell(cell, factory)


def kf(
  cell: Cell, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """KF-RTRL (Mujika, Meier & Steger, "Approximating Real-Time Recurrent
  Learning with Random Kronecker Factors", NeurIPS 2018).

  One Kronecker product `G ≈ u ⊗ A`: `H G` is `u ⊗ (H A)`, mixed with
  `F = hhat ⊗ D` by the sign trick with norm balancing. Unbiased.
  Cost per example and step: memory `P + K S n^2 ~ n^2`, time `~ n^3`.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`.
    routing: speed choices (`rtrl.routing.Routing`); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='kf'`, `implementation='kf'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form.
  """
  _lemma1(cell, "kf")
  return base.build(
    "kf",
    cell,
    lambda p: kronecker_zeros(cell, p, None),
    _kf_update(cell),
    kronecker_readout,
    implementation="kf",
    routing=routing_lib.resolve(routing),
    forget=forget_u,
  )


def kf_approx(
  cell: Cell, rank: int, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """KF-RTRL-`rank`-APPROX (Benzing et al. 2019, section 4.3).

  KF-RTRL with `F = hhat ⊗ D'`, `D'` the optimal unbiased rank-`rank`
  approximation of the block-diagonal `D` (from its per-unit block SVD).
  Unbiased. Cost per example and step: KF-RTRL's, `~ n^2` memory and
  `~ n^3` time.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`.
    rank: an int, `1 <= rank <= n min(S, K)` (the rank of `D`).
    routing: speed choices (`rtrl.routing.Routing`); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='kf_approx'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form, or `rank` out of range.
  """
  _lemma1(cell, "kf_approx")
  rank = check_rank(rank, "kf_approx")
  if rank > max_rank_of_D(cell):
    raise ValueError(
      f"rank must be at most {max_rank_of_D(cell)} (the rank "
      f"of D for {cell!r}) for estimator 'kf_approx', got "
      f"{rank}"
    )
  routing = routing_lib.resolve(routing)
  return base.build(
    "kf_approx",
    cell,
    lambda p: kronecker_zeros(cell, p, None),
    _kf_update(cell, approximate_D_rank=rank, routing=routing),
    kronecker_readout,
    implementation="kf_approx",
    routing=routing,
    forget=forget_u,
  )


def kf_avg(
  cell: Cell, rank: int, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """r-KF-RTRL-AVG (Benzing et al. 2019): `rank` independent KF-RTRL
  copies whose gradients are averaged (variance `1/rank` of KF-RTRL's).

  Unbiased. Cost per example and step: memory `r (P + K S n^2) ~ r n^2`,
  time `~ r n^3` (all copies propagated by one GEMM).

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`.
    rank: the number of copies, an int >= 1.
    routing: speed choices (`rtrl.routing.Routing`); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='kf_avg'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form, or `rank` not an int >= 1.
  """
  _lemma1(cell, "kf_avg")
  rank = check_rank(rank, "kf_avg")
  update = _kf_update(cell, copies=rank)

  def readout(tangent, g):
    return kronecker_readout(tangent, g) / rank

  return base.build(
    "kf_avg",
    cell,
    lambda p: kronecker_zeros(cell, p, rank),
    update,
    readout,
    implementation="kf_avg",
    routing=routing_lib.resolve(routing),
    forget=forget_u,
  )


def _single_floats(cell, input_size) -> int:
  p, k, s, n = dims(cell, input_size)
  return p + k * n * s * n


def _single_flops(cell, input_size) -> float:
  """`H A`: one `(S n, S n)` by `(S n, K n)` product."""
  _, k, s, n = dims(cell, input_size)
  return k * n * 2 * (s * n) ** 2


def sum_floats(cell, input_size, *, rank) -> int:
  """`rank` Kronecker products' floats (KF-AVG, OK, B-OK)."""
  return rank * _single_floats(cell, input_size)


def sum_flops(cell, input_size, *, rank, reduced=True) -> float:
  """`H A_i` for every `i`, and for OK and B-OK the reduction's Gram matrix
  and combination, `2 (2r+1) (r+1) K S n^2`."""
  _, k, s, n = dims(cell, input_size)
  flops = rank * _single_flops(cell, input_size)
  if reduced:
    flops += 2 * (2 * rank + 1) * (rank + 1) * k * s * n * n
  return flops


def averaged_flops(cell, input_size, *, rank) -> float:
  return sum_flops(cell, input_size, rank=rank, reduced=False)


_SINGLE = Cost("n^3", "n^2", (3, 2), _single_floats, _single_flops)
KF = EstimatorSpec("kf", "KF-RTRL", kf, _SINGLE)
KF_AVG = EstimatorSpec(
  "kf_avg",
  "{rank}-KF-AVG",
  kf_avg,
  Cost("r n^3", "r n^2", (3, 2), sum_floats, averaged_flops),
)
KF_APPROX = EstimatorSpec(
  "kf_approx",
  "{rank}-KF-APPROX",
  kf_approx,
  # KF-RTRL's cost: D' is formed from D's block SVD.
  _SINGLE._replace(
    tangent_floats=lambda cell, input_size, rank: _single_floats(
      cell, input_size
    ),
    gemm_flops=lambda cell, input_size, rank: _single_flops(cell, input_size),
  ),
)


__all__ = [
  "KF",
  "KF_APPROX",
  "KF_AVG",
  "averaged_flops",
  "check_rank",
  "kronecker_readout",
  "kronecker_zeros",
  "forget_u",
  "sum_floats",
  "sum_flops",
  "kf",
  "kf_approx",
  "kf_avg",
  "low_rank_D_factors",
  "max_rank_of_D",
  "unbiased_low_rank_D",
]
