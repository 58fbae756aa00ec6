"""The reset folded into the step (`Estimator.folds_reset`): an example
that starts a sequence has its tangent's history dropped inside the step
(zero `H`, the small factors zeroed) instead of by a pass over the whole
tangent. In float64 it trains as the reset-first path to rounding (the two
compile to differently fused programs), for every
estimator that folds it, on a chunk with resets in mid-sequence, online and
in a stack."""

import jax
import numpy as np
import optax
import pytest
import rtrl_problems

from rtrl import cells
from rtrl import estimators
from rtrl import heads
from rtrl import online
from rtrl import stack

N, INPUT, OUTPUTS, B, T = 4, 3, 4, 3, 9
FOLDING = {
  "rtrl": {},
  "uoro": {},
  "kf": {},
  "kf_approx": {"rank": 2},
  "kf_avg": {"rank": 2},
  "ok": {"rank": 2},
  "ok_biased": {"rank": 2},
  "ktp": {"rank": 2},
  "snap1": {},
  "rflo": {},
  "snap": {"order": 2},
  "sk_rtrl": {"rank": 2},
}


def _problem(cell, seed=0):
  return rtrl_problems.make_problem(
    cell,
    input_size=INPUT,
    num_outputs=OUTPUTS,
    batch=B,
    steps=T,
    resets=[(0, None), (3, 0), (5, 1), (6, 0), (8, 2)],
    seed=seed,
    keep_probability=0.8,
  )


def _unfolded(estimator):
  return estimator._replace(folds_reset=False)


def test_every_lemma1_estimator_folds_its_reset():
  cell = cells.RHN(N)
  assert {
    name
    for name in estimators.names()
    if estimators.make(name, cell, **FOLDING.get(name, {})).folds_reset
  } == set(FOLDING)
  assert not estimators.make("rtrl", cells.LRU(N)).folds_reset


# Every estimator on the RHN; the two-row LSTM and the GRU in the slow set.
CASES = [("rhn", name) for name in sorted(FOLDING)] + [
  pytest.param(cell, name, marks=pytest.mark.slow)
  for cell in ("lstm", "gru")
  for name in ("rtrl", "ok", "ktp", "uoro", "snap1")
]


@pytest.mark.parametrize("cell_name, name", CASES)
def test_folded_reset_trains_exactly_as_reset_first(cell_name, name, x64):
  cell = cells.make(cell_name, N)
  estimator = estimators.make(name, cell, **FOLDING[name])
  params, chunk = _problem(cell)
  results = []
  for est in (estimator, _unfolded(estimator)):
    trainer = online.make_online_trainer(cell, est, optax.adam(1e-2))
    state, metrics = trainer.run(
      trainer.init(params, jax.random.PRNGKey(1), B), chunk
    )
    results.append((state.params, state.tstate, metrics))
  folded, reference = results
  for a, b in zip(
    jax.tree_util.tree_leaves(folded), jax.tree_util.tree_leaves(reference)
  ):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["ok", "uoro", "snap1", "sk_rtrl"])
def test_folded_reset_in_a_stack(name, x64):
  """Two RHN layers, each by the estimator, with resets: the same again."""
  cell = cells.RHN(N)
  kwargs = FOLDING[name]
  layers = tuple(
    stack.Layer(cell, estimators.make(name, cell, **kwargs), heads.identity())
    for _ in range(2)
  )
  _, chunk = _problem(cell)
  params = stack.init_params(layers, jax.random.PRNGKey(0), INPUT, OUTPUTS)
  results = []
  for variant in (
    layers,
    tuple(
      layer._replace(estimator=_unfolded(layer.estimator)) for layer in layers
    ),
  ):
    trainer = stack.make_stacked_online_trainer(variant, optax.adam(1e-2))
    state, metrics = trainer.run(
      trainer.init(params, jax.random.PRNGKey(1), B), chunk
    )
    results.append((state.params, state.tstate, metrics))
  for a, b in zip(
    jax.tree_util.tree_leaves(results[0]), jax.tree_util.tree_leaves(results[1])
  ):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
