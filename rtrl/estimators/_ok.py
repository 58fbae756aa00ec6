"""r-OK and r-B-OK (Benzing et al. 2019): a Kronecker sum of `r` products
reduced at every step from `r + 1` (`rtrl.estimators.kf` and its family in
`_kronecker_sum.py`, whose tangent, readout and reset these share)."""

from __future__ import annotations

import jax.numpy as jnp

from rtrl import kronecker
from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import _base as base
from rtrl.estimators._kronecker_sum import check_rank
from rtrl.estimators._kronecker_sum import forget_u
from rtrl.estimators._kronecker_sum import kronecker_readout
from rtrl.estimators._kronecker_sum import kronecker_zeros
from rtrl.estimators._kronecker_sum import sum_floats
from rtrl.estimators._kronecker_sum import sum_flops
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec


def check_kronecker_rank(cell: Cell, rank, name: str) -> int:
  """`rank` if it is an int in `[1, K S n^2 - 1]`, the bound a Kronecker
  sum `Σ u_i ⊗ A_i` with `A_i` `(S n, K n)` has before the input size is
  known (`min(P, K S n^2) - 1` is checked at `init`); else a ValueError
  naming the estimator."""
  rank = check_rank(rank, name)
  k, s, n = cell.num_gates, cell.num_state_rows, cell.hidden_size
  if rank > k * s * n * n - 1:
    raise ValueError(
      f"rank of estimator {name!r} must be at most {k * s * n * n - 1} "
      f"(one less than K*S*n^2 = {k * s * n * n}, the size of each "
      f"Kronecker factor A_i of {cell!r}), got {rank}"
    )
  return rank


def _ok(
  cell: Cell, rank: int, biased: bool, name: str, routing
) -> base.Estimator:
  base.require_lemma1_cell(cell, name)
  rank = check_kronecker_rank(cell, rank, name)
  routing = routing_lib.resolve(routing)

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    limit = min(p, k * s * n * n) - 1
    if rank > limit:
      raise ValueError(
        f"rank must be at most {limit} (one less than the "
        f"Kronecker dimensions min(P={p}, K*S*n^2={k * s * n * n}))"
        f" for estimator {name!r}, got {rank}"
      )
    return kronecker_zeros(cell, params, rank)

  def update(tangent, jac, key):
    u, factor = tangent
    propagated = tangents.propagate_factors(jac, cell.hidden_row, factor)
    us = jnp.concatenate([u, jac.hhat[None]], axis=0)
    rows = tangents.factors_and_D_rows(propagated, jac, routing=routing)
    return kronecker.reduce_rows(us, rows, key, biased=biased, routing=routing)

  return base.build(
    name,
    cell,
    zeros,
    update,
    kronecker_readout,
    implementation=name,
    routing=routing,
    forget=forget_u,
    random=not biased,  # r-B-OK's truncation draws nothing
  )


def ok(
  cell: Cell, rank: int, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """r-OK, the optimal unbiased Kronecker-sum approximation of RTRL
  (Benzing, Gauy, Mujika, Martinsson & Steger, ICML 2019, Algorithms 4-5).

  `G ≈ Σ_{i<=r} u_i ⊗ A_i`; each step the `r + 1` summands `u_i ⊗ H A_i`
  and `hhat ⊗ D` are reduced to `r` by the minimum-variance unbiased
  Kronecker-sum approximation (Theorem 1). Cost per example and step:
  memory `r (P + K S n^2) ~ r n^2`, time `~ r n^3` (the `H A_i`).

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`.
    rank: an int, `1 <= rank <= min(P, K S n^2) - 1` (`K S n^2 - 1` checked
      here, `P - 1` at `init`, where the input size is known).
    routing: speed choices (`rtrl.routing.Routing`: the Gram matrix, the
      mixing and the small SVDs of the reduction); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='ok'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form, or `rank` out of range.
  """
  return _ok(cell, rank, biased=False, name="ok", routing=routing)


def ok_biased(
  cell: Cell, rank: int, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """r-B-OK (Benzing et al. 2019, appendix Algorithm 6): r-OK's reduction
  by the Eckart-Young truncation instead of the unbiased mixing (biased,
  the closest `r`-Kronecker-sum). Cost as `ok`: `~ r n^2` memory and
  `~ r n^3` time per example and step.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell`.
    rank: an int, `1 <= rank <= min(P, K S n^2) - 1` (`K S n^2 - 1` checked
      here, `P - 1` at `init`).
    routing: speed choices (`rtrl.routing.Routing`); None: `Routing.auto()`.

  Returns:
    The `Estimator` (`name='ok_biased'`).

  Raises:
    ValueError: a cell not in the Lemma-1 form, or `rank` out of range.
  """
  return _ok(cell, rank, biased=True, name="ok_biased", routing=routing)


_SUM = Cost("r n^3", "r n^2", (3, 2), sum_floats, sum_flops)
OK = EstimatorSpec("ok", "{rank}-OK", ok, _SUM)
OK_BIASED = EstimatorSpec("ok_biased", "{rank}-B-OK", ok_biased, _SUM)

__all__ = ["OK", "OK_BIASED", "check_kronecker_rank", "ok", "ok_biased"]
