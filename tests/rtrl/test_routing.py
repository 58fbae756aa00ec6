"""`rtrl.routing.Routing`: every route computes the same numbers (float64),
a route is a value fixed when the estimator is built, and a changed route
is a new compilation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rtrl_problems import make_example_problem

from rtrl import cells
from rtrl import cpu_kernels
from rtrl import estimators
from rtrl.routing import Routing

N, INPUT, STEPS, RANK = 4, 3, 5, 3

# Each routed choice of the Kronecker-sum reduction switched on alone.
KRONECKER_ROUTES = {
  "row-major copy": Routing(rows_first_max_floats=2**62),
  "multiply-add mix": Routing(elementwise_mix_max_rank=2**62),
  "kernel products": Routing(
    cpu_kernel_products=True, cpu_kernel_products_min_rank=1
  ),
  "kernel svd": Routing(cpu_kernel_svd=True),
  "auto": None,  # Routing.auto(), whatever this machine resolves
}


def _needs_kernels(routing):
  return routing is not None and (
    routing.cpu_kernel_products or routing.cpu_kernel_svd
  )


def _skip_without_kernels(routing):
  if _needs_kernels(routing) and not (
    jax.default_backend() == "cpu" and cpu_kernels.available()
  ):
    pytest.skip("rtrl.cpu_kernels not available here")


def _run(cell, estimator, params, xs, gs):
  """One example through `STEPS` steps: the final tangent and the gradient
  at every step (against the covectors `gs`), jitted."""

  @jax.jit
  def run(params, xs, gs):
    state = cell.initial_state()
    tstate = estimator.init(params, state, jax.random.PRNGKey(7))
    step = estimator.step(params)

    def body(carry, xg):
      tstate, state = step(*carry, xg[0])
      grads = estimator.gradient(params, tstate, cell.rows_to_state(xg[1]))
      return (tstate, state), grads

    (tstate, _), grads = jax.lax.scan(body, (tstate, state), (xs, gs))
    return tstate.tangent, grads

  return run(params, xs, gs)


def _unfolded(tangent):
  """`Σ_i u_i ⊗ A_i` of a Kronecker-sum tangent: what the factors mean
  (the factors themselves are defined up to the SVDs' signs)."""
  u, factors = tangent
  return jnp.einsum("rp,akjr->pakj", u, factors)


# r-B-OK's truncation is a function of the Kronecker sum alone, so its
# numbers are compared over many steps. r-OK's unbiased mixing draws signs
# for the singular directions of the reduction, whose own signs rounding may
# flip between routes: the draw (not its distribution) then differs. Its
# numbers are compared while the reduction is exact, the first `RANK` steps
# (`test_kronecker_reduce.py` checks its distribution on every SVD route).
@pytest.mark.parametrize("name, steps", [("ok", RANK), ("ok_biased", STEPS)])
@pytest.mark.parametrize("cell_cls", [cells.RHN, cells.LSTM])
@pytest.mark.parametrize(
  "routing", list(KRONECKER_ROUTES.values()), ids=list(KRONECKER_ROUTES)
)
def test_kronecker_sum_routes_give_the_same_numbers(
  name, steps, cell_cls, routing, x64
):
  """The tangent update and the gradient of r-OK and r-B-OK equal those of
  XLA's own forms (`Routing()`) on every route, to float64 rounding."""
  _skip_without_kernels(routing)
  cell = cell_cls(hidden_size=N)
  params, xs, gs = make_example_problem(cell, INPUT, steps, seed=1)
  factory = getattr(estimators, name)
  reference = _run(cell, factory(cell, RANK, routing=Routing()), params, xs, gs)
  routed = _run(cell, factory(cell, RANK, routing=routing), params, xs, gs)
  np.testing.assert_allclose(
    _unfolded(routed[0]), _unfolded(reference[0]), rtol=1e-10, atol=1e-12
  )
  np.testing.assert_allclose(
    routed[1]["W"], reference[1]["W"], rtol=1e-10, atol=1e-12
  )


@pytest.mark.parametrize("name", ["kf_approx", "ktp"])
@pytest.mark.parametrize("cell_cls", [cells.RHN, cells.LSTM])
def test_pairwise_sort_gives_the_same_numbers(name, cell_cls, x64):
  """`D'`'s singular values ordered by pairwise comparisons or by `argsort`
  (`Routing.pairwise_sort_max`): the same tangents and gradients."""
  cell = cell_cls(hidden_size=N)
  params, xs, gs = make_example_problem(cell, INPUT, STEPS, seed=2)
  runs = [
    _run(
      cell,
      estimators.make(
        name, cell, rank=2, routing=Routing(pairwise_sort_max=largest)
      ),
      params,
      xs,
      gs,
    )
    for largest in (0, 2**30)
  ]
  for argsorted, pairwise in zip(*(jax.tree.leaves(r) for r in runs)):
    np.testing.assert_array_equal(argsorted, pairwise)


@pytest.mark.parametrize("name", ["rtrl", "snap1", "rflo", "uoro"])
@pytest.mark.parametrize("cell_cls", [cells.GRU, cells.LSTM])
def test_jacobians_once_gives_the_same_numbers(name, cell_cls, x64):
  """Writing the Jacobians out once (`jacobians_once`) changes no number of
  exact RTRL, SnAp-1, RFLO or UORO (same key)."""
  cell = cell_cls(hidden_size=N)
  params, xs, gs = make_example_problem(cell, INPUT, STEPS, seed=2)
  results = [
    _run(
      cell,
      estimators.make(name, cell, routing=Routing(jacobians_once=once)),
      params,
      xs,
      gs,
    )
    for once in (True, False)
  ]
  for a, b in zip(
    jax.tree_util.tree_leaves(results[0]), jax.tree_util.tree_leaves(results[1])
  ):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["uoro", "ktp"])
@pytest.mark.parametrize("cell_cls", [cells.RHN, cells.LSTM])
def test_dense_h_gives_the_same_numbers(name, cell_cls, x64):
  """`H v` with `H` formed (`dense_h_min_rows=0`) or factorised (never
  formed) gives UORO and KTP the same numbers (same key)."""
  cell = cell_cls(hidden_size=N)
  params, xs, gs = make_example_problem(cell, INPUT, STEPS, seed=3)
  hparams = {"rank": 2} if name == "ktp" else {}
  results = [
    _run(
      cell,
      estimators.make(
        name, cell, routing=Routing(dense_h_min_rows=rows), **hparams
      ),
      params,
      xs,
      gs,
    )
    for rows in (0, 2**62)
  ]
  for a, b in zip(
    jax.tree_util.tree_leaves(results[0]), jax.tree_util.tree_leaves(results[1])
  ):
    np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_a_changed_route_is_a_new_compilation():
  """A `Routing` is a static value: equal routings share one trace, a
  different one is traced (and compiled) again."""
  cell = cells.RHN(hidden_size=N)
  params, xs, _ = make_example_problem(cell, INPUT, 2)
  traces = []

  def run(params, xs, routing):
    traces.append(routing)
    estimator = estimators.ok(cell, 2, routing=routing)
    tstate = estimator.init(params, cell.initial_state(), jax.random.key(0))
    tstate, _ = estimator.step(params)(tstate, cell.initial_state(), xs[0])
    return tstate.tangent[0]

  jitted = jax.jit(run, static_argnames="routing")
  plain = Routing()
  jitted(params, xs, plain)
  jitted(params, xs, Routing())  # equal: no new trace
  assert len(traces) == 1
  jitted(params, xs, dataclasses.replace(plain, rows_first_max_floats=2**62))
  assert len(traces) == 2
  jitted(params, xs, plain)
  assert len(traces) == 2


def test_the_kernel_svd_route_reaches_the_compiled_step():
  """The estimator's routing, not the backend at trace time, decides what
  is compiled: the Jacobi kernel's custom call is in one step, not in the
  other."""
  _skip_without_kernels(Routing(cpu_kernel_svd=True))
  cell = cells.RHN(hidden_size=N)
  params, xs, _ = make_example_problem(cell, INPUT, 1)

  def lowered(routing):
    estimator = estimators.ok(cell, 2, routing=routing)
    tstate = estimator.init(params, cell.initial_state(), jax.random.key(0))
    step = jax.jit(estimator.step(params))
    return step.lower(tstate, cell.initial_state(), xs[0]).as_text()

  assert "rtrl_small_svd" in lowered(Routing(cpu_kernel_svd=True))
  assert "rtrl_small_svd" not in lowered(Routing())


def test_the_estimator_reports_its_routing():
  cell = cells.RHN(hidden_size=N)
  plain = Routing()
  assert estimators.ok(cell, 2, routing=plain).routing is plain
  assert estimators.make("uoro", cell, routing=plain).routing is plain
  assert estimators.kf(cell).routing == Routing.auto()


def test_auto_resolves_per_backend():
  assert Routing.auto("gpu") == Routing()
  assert Routing.auto("tpu") == Routing()
  cpu = Routing.auto("cpu", cpu_kernels=False)
  assert not cpu.cpu_kernel_products and not cpu.cpu_kernel_svd
  assert cpu.rows_first_max_floats > 0 and cpu.elementwise_mix_max_rank > 0
  # Pairwise positions on CPUs only: XLA:GPU compiled them for minutes.
  assert (
    cpu.pairwise_sort_max > 0 and Routing.auto("gpu").pairwise_sort_max == 0
  )
  with pytest.raises(ValueError, match="cpu_kernels=True needs the 'cpu'"):
    Routing.auto("gpu", cpu_kernels=True)
  if cpu_kernels.available():
    assert Routing.auto("cpu").cpu_kernel_svd


def test_a_routing_is_a_frozen_hashable_value():
  routing = Routing()
  assert hash(routing) == hash(Routing())
  with pytest.raises(dataclasses.FrozenInstanceError):
    routing.jacobians_once = False  # type: ignore[misc]


@pytest.mark.parametrize(
  "field, value",
  [
    ("cpu_kernel_svd", 1),
    ("jacobians_once", "yes"),
    ("rows_first_max_floats", -1),
    ("elementwise_mix_max_rank", 2.5),
    ("cpu_kernel_products_min_rank", True),
  ],
)
def test_bad_fields_are_refused_by_name(field, value):
  with pytest.raises(ValueError, match=f"Routing.{field}"):
    Routing(**{field: value})


def test_an_estimator_refuses_a_routing_that_is_not_one():
  with pytest.raises(ValueError, match="routing must be"):
    estimators.ok(cells.RHN(hidden_size=N), 2, routing="cpu")
