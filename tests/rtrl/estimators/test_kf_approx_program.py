"""KF-APPROX's step never reduces over its dense `D'` (issue 38).

XLA:GPU took minutes to compile KF-APPROX's batch-256 program (a reduction
fusion: the sign trick's norm of the dense `D' = Σ_r s_r ⊗ c_r`). The norm
now comes from the factors' `(r, r)` Gram matrices and `D'` is only added to
the propagated factor. These tests follow every value computed from the
product that forms `D'` through the step's jaxpr (nested calls included)
and fail if any reduction reads one.
"""

from __future__ import annotations

import jax
from jax.extend.core import Literal
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import cells
from rtrl import estimators
from rtrl.estimators import _kronecker_sum as kronecker_sum
from rtrl.routing import Routing

REDUCTIONS = frozenset(
  {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin"}
)


def _inner_jaxprs(eqn):
  """`(jaxpr, its inputs)` of the sub-programs an equation calls with its
  own operands (pjit, closed calls, custom derivatives)."""
  for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
    inner = eqn.params.get(name)
    if inner is not None:
      yield getattr(inner, "jaxpr", inner)


def _reductions_of(jaxpr, tainted: set, is_source) -> list[str]:
  """Reductions reading a value derived from an equation `is_source` picks;
  `tainted` holds the tainted variables of `jaxpr`, updated in place."""
  found = []
  for eqn in jaxpr.eqns:
    reads = any(not isinstance(v, Literal) and v in tainted for v in eqn.invars)
    if reads and eqn.primitive.name in REDUCTIONS:
      found.append(str(eqn.primitive))
    inner_taint = False
    for inner in _inner_jaxprs(eqn):
      inner_tainted = {
        iv
        for iv, ov in zip(inner.invars, eqn.invars)
        if not isinstance(ov, Literal) and ov in tainted
      }
      found += _reductions_of(inner, inner_tainted, is_source)
      inner_taint |= any(v in inner_tainted for v in inner.outvars)
    if reads or inner_taint or is_source(eqn):
      tainted.update(eqn.outvars)
  return found


def _is_dense_D_product(rank: int, size: int):
  """The `dot_general` forming `D'`: contracts the rank axis, `size` out."""

  def is_source(eqn) -> bool:
    if eqn.primitive.name != "dot_general":
      return False
    (contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    out = eqn.outvars[0].aval.shape
    return [lhs[i] for i in contract] == [rank] and np.prod(out) == size

  return is_source


def _step_jaxpr(cell, estimator, dtype=jnp.float32):
  params = jax.tree.map(
    lambda w: w.astype(dtype), cell.init(jax.random.PRNGKey(0), 3)
  )
  state = jax.tree.map(lambda s: s.astype(dtype), cell.initial_state())
  tstate = estimator.init(params, state, jax.random.PRNGKey(1))
  step = estimator.step(params)
  return jax.make_jaxpr(step)(tstate, state, jnp.ones((3,), dtype)).jaxpr


@pytest.mark.parametrize("cell_name", ["rhn", "lstm"])
@pytest.mark.parametrize("rank", [1, 4])
def test_no_reduction_over_dense_D(cell_name, rank):
  cell = cells.make(cell_name, 8)
  estimator = estimators.make("kf_approx", cell, rank=rank, routing=Routing())
  size = cell.num_state_rows * 8 * cell.num_gates * 8
  jaxpr = _step_jaxpr(cell, estimator)
  sources = []

  def is_source(eqn):
    hit = _is_dense_D_product(rank, size)(eqn)
    if hit:
      sources.append(eqn)
    return hit

  found = _reductions_of(jaxpr, set(), is_source)
  assert sources, "the product forming D' was not found in the step"
  assert not found, f"reductions over the dense D': {found}"


def test_the_check_sees_a_reduction_over_dense_D():
  """The same check on a step that takes the norm of the dense `D'` (what
  KF-APPROX did) finds it: the test above can fail."""
  cell = cells.make("rhn", 8)
  rank, size = 4, 8 * 2 * 8

  def old_norm(jac, key):
    dense = kronecker_sum.unbiased_low_rank_D(jac, rank, key)
    return jnp.sqrt(jnp.sum(dense * dense))

  params = cell.init(jax.random.PRNGKey(0), 3)
  _, jac = cell.linearized_step(params, cell.initial_state(), jnp.ones((3,)))
  jaxpr = jax.make_jaxpr(old_norm)(jac, jax.random.PRNGKey(2)).jaxpr
  found = _reductions_of(jaxpr, set(), _is_dense_D_product(rank, size))
  assert found


@pytest.mark.parametrize("cell_name", ["rhn", "lstm", "gru"])
@pytest.mark.parametrize("rank", [1, 3, 16])
def test_low_rank_D_norm_is_the_norm_of_every_sample(cell_name, rank):
  """`‖D'‖_F` in closed form equals the dense norm of every sample of `D'`
  (float64; `rank` 16 is above the rank of these `D`, so `D' = D`)."""
  with jax.enable_x64():
    cell = cells.make(cell_name, 5)
    params = cell.init(jax.random.PRNGKey(0), 3)
    params = jax.tree.map(lambda w: w.astype(jnp.float64), params)
    state = jax.tree.map(
      lambda s: jax.random.normal(jax.random.PRNGKey(1), s.shape, jnp.float64),
      cell.initial_state(),
    )
    _, jac = cell.linearized_step(params, state, jnp.ones((3,), jnp.float64))
    for seed in range(4):
      dense = kronecker_sum.unbiased_low_rank_D(
        jac, rank, jax.random.PRNGKey(seed)
      )
      np.testing.assert_allclose(
        kronecker_sum.low_rank_D_norm(jac, rank),
        np.linalg.norm(np.asarray(dense)),
        rtol=1e-12,
      )
