"""Exact RTRL: `G_t = H_t G_{t-1} + hhat_t ⊗ D_t`, stored densely.

Memory `P K n S n ~ n^3` and time `~ n^4` per example (paper Table 1). The
recursion uses the Lemma-1 factorisation of `F_t` rather than differentiating
the step w.r.t. all parameters, the same structure the approximations reuse:
the influence is stored like the Kronecker estimators' right factors,
state-major with the `P` rows of `W` as the trailing copies axis,
`G[s n + i, k, j, p] = d state[s, i] / d W[p, k n + j]` (`rtrl.tangents`).

References:
  Williams & Zipser, "A learning algorithm for continually running fully
  recurrent neural networks", 1989. Benzing et al. 2019, eq. (1).
"""

from __future__ import annotations

import jax.numpy as jnp

from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import base


def exact_rtrl(cell: Cell) -> base.Estimator:
  """The exact RTRL estimator (`make('rtrl', cell)`)."""

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    return jnp.zeros((s * n, k, n, p), params["W"].dtype)

  def update(influence, jac, key):
    del key  # exact: no randomness
    propagated = tangents.propagate_factors(jac, cell.hidden_row, influence)
    # + D ⊗ hhat, written into D's diagonal entries only (no extra pass).
    return tangents.add_scaled_D_to_factors(propagated, jac.hhat, jac)

  def readout(influence, g):
    right = tangents.contract_factors(influence, g)  # (K, n, P)
    return jnp.moveaxis(right, -1, 0).reshape(right.shape[-1], -1)

  return base.build(
    "rtrl", cell, zeros, update, readout, forget=base.forget_nothing
  )
