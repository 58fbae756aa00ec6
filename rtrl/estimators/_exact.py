"""Exact RTRL for Lemma-1 cells: `G_t = H_t G_{t-1} + hhat_t ⊗ D_t`, dense.

The recursion uses the Lemma-1 factorisation of `F_t` rather than
differentiating the step w.r.t. all parameters, the same structure the
approximations reuse: the influence is stored like the Kronecker estimators'
right factors, state-major with the `P` rows of `W` as the trailing copies
axis, `G[s n + i, k, j, p] = d state[s, i] / d W[p, k n + j]`
(`rtrl.tangents`).

References:
  Williams & Zipser, "A learning algorithm for continually running fully
  recurrent neural networks", 1989. Benzing et al. 2019, eq. (1).
"""

from __future__ import annotations

import jax.numpy as jnp

from rtrl import routing as routing_lib
from rtrl import tangents
from rtrl.cells import Cell
from rtrl.estimators import _base as base
from rtrl.estimators._autodiff import autodiff_rtrl
from rtrl.estimators._lru_exact import diagonal_rtrl
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import dims


def exact_rtrl(
  cell: Cell, *, routing: routing_lib.Routing | None = None
) -> base.Estimator:
  """Exact RTRL (Williams & Zipser 1989) for a Lemma-1 cell.

  The influence `G = d state / d W` is propagated exactly,
  `G_t = H_t G_{t-1} + hhat_t ⊗ D_t`, with `H_t G_{t-1}` one GEMM per
  example and step: the gradient equals full BPTT's (float64 tests).
  `make('rtrl', cell)` builds it for a Lemma-1 cell.

  Cost per example and step (paper Table 1): memory `P K S n^2 ~ n^3`
  (`P = input_size + n + 1`, `K` gates, `S` state rows), time `~ n^4`.

  Args:
    cell: a Lemma-1 `rtrl.cells.Cell` (RNN, RHN, LSTM, GRU or a subclass).
      A `CustomCell` takes `autodiff_rtrl`, an `LRU` `diagonal_rtrl`.
    routing: speed choices (`rtrl.routing.Routing`); None:
      `Routing.auto()`, resolved now.

  Returns:
    The `Estimator`, `name='rtrl'`, `implementation='exact_rtrl'`.

  Raises:
    ValueError: a cell not in the Lemma-1 form (naming what serves it).
  """
  base.require_lemma1_cell(
    cell,
    "exact_rtrl",
    custom_instead="autodiff_rtrl",
    lru_instead="diagonal_rtrl (exact and element-wise) or autodiff_rtrl",
  )
  routing = routing_lib.resolve(routing)

  def zeros(params):
    p, k, s, n = base.sizes(cell, params)
    return jnp.zeros((s * n, k, n, p), params["W"].dtype)

  def update(influence, jac, key):
    del key  # exact: no randomness
    propagated = tangents.propagate_factors(jac, cell.hidden_row, influence)
    # + D ⊗ hhat as a dense add: XLA fuses it into the one pass that writes
    # the carried influence, where a scatter on D's diagonal made it copy
    # the whole influence at every step (up to 2x slower on the tanh RNN:
    # docs/benchmarks/peers.md).
    return propagated + tangents.dense_D_factor(jac)[..., None] * jac.hhat

  def readout(influence, g):
    right = tangents.contract_factors(influence, g)  # (K, n, P)
    return jnp.moveaxis(right, -1, 0).reshape(right.shape[-1], -1)

  return base.build(
    "rtrl",
    cell,
    zeros,
    update,
    readout,
    implementation="exact_rtrl",
    routing=routing,
    forget=base.forget_nothing,
    random=False,
  )


def _tangent_floats(cell, input_size) -> int:
  p, k, s, n = dims(cell, input_size)
  return p * k * n * s * n


def _gemm_flops(cell, input_size) -> float:
  """`H G`: one `(S n, S n)` by `(S n, P K n)` product."""
  p, k, s, n = dims(cell, input_size)
  return p * k * n * 2 * (s * n) ** 2


RTRL = EstimatorSpec(
  "rtrl",
  "RTRL",
  exact_rtrl,
  Cost("n^4", "n^3", (4, 3), _tangent_floats, _gemm_flops),
  lru=diagonal_rtrl,
  custom=autodiff_rtrl,
)

__all__ = ["RTRL", "exact_rtrl"]
