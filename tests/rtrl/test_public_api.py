"""`import rtrl` is enough: the flat names are the modules' own objects, each
is documented in the package docstring, and the docstring's example trains."""

import re

import jax
import jax.numpy as jnp
import optax
import rtrl_problems

import rtrl


def test_flat_names_are_the_modules_objects():
  assert rtrl.make_online_trainer is rtrl.online.make_online_trainer
  assert rtrl.make_tbptt_trainer is rtrl.bptt.make_tbptt_trainer
  assert rtrl.bptt_gradient is rtrl.bptt.bptt_gradient
  assert rtrl.frozen_gradients is rtrl.online.frozen_gradients
  assert rtrl.StepBatch is rtrl.online.StepBatch
  assert rtrl.Trainer is rtrl.online.Trainer
  assert callable(rtrl.estimators.make) and callable(rtrl.cells.make)
  assert callable(rtrl.kronecker.unbiased_low_rank)


def test_every_public_name_is_documented_and_no_private_one_exported():
  for name in rtrl.__all__:
    assert hasattr(rtrl, name), name
    assert name in rtrl.__doc__, f"{name} is not in rtrl's docstring"
  for module in (rtrl, rtrl.kronecker, rtrl.estimators):
    assert not [n for n in module.__all__ if n.startswith("_")], module


def test_docstring_example_trains_both_trainers(x64):
  cell = rtrl.cells.make("rhn", hidden_size=4)
  params, chunk = rtrl_problems.make_problem(
    cell, input_size=3, num_outputs=4, batch=2, steps=4, resets=[(0, None)]
  )
  estimator = rtrl.estimators.make("ok", cell, rank=2)
  for trainer in (
    rtrl.make_online_trainer(cell, estimator, optax.adam(1e-3)),
    rtrl.make_tbptt_trainer(cell, optax.adam(1e-3), 2),
  ):
    state = trainer.init(params, jax.random.PRNGKey(0), 2)
    state, metrics = trainer.run(state, chunk)
    assert isinstance(metrics, rtrl.StepMetrics)
    assert metrics.loss_sum.shape == (4,)
    assert bool(jnp.all(jnp.isfinite(metrics.loss_sum)))


# The named factories (SPEC: "every estimator also as a named public
# factory with a docstring"), and which cells each serves.
SPEC_FACTORIES = (
  "exact_rtrl",
  "uoro",
  "kf",
  "kf_avg",
  "kf_approx",
  "ok",
  "ok_biased",
  "ktp",
  "snap1",
  "rflo",
  "snap",
  "sk_rtrl",
)
SPEC_NAMES = (
  "rtrl",
  "uoro",
  "kf",
  "kf_avg",
  "ok",
  "ok_biased",
  "ktp",
  "kf_approx",
  "snap1",
  "rflo",
  "snap",
  "sk_rtrl",
)


def test_every_factory_is_public_and_documented():
  """Each factory is exported, in `__all__`, and its docstring names its
  paper, its cost per example and step, and its arguments."""
  from rtrl import estimators

  assert set(SPEC_FACTORIES) <= set(estimators.FACTORIES)
  for name in estimators.FACTORIES:
    factory = getattr(estimators, name)
    assert name in estimators.__all__, name
    doc = " ".join((factory.__doc__ or "").split())
    assert "Args: cell" in doc, f"{name}: no Args"
    assert "per example and step" in doc, f"{name}: no cost"
    assert re.search(r"(19|20)\d\d", doc), f"{name}: no paper"
  assert set(SPEC_NAMES) == set(estimators.names())


def test_make_reports_the_implementation():
  from rtrl import cells
  from rtrl import estimators

  rhn = cells.RHN(hidden_size=3)
  custom = cells.as_custom(rhn)
  lru = cells.LRU(3)
  expected = {
    ("rtrl", rhn): "exact_rtrl",
    ("rtrl", custom): "autodiff_rtrl",
    ("rtrl", lru): "diagonal_rtrl",
    ("uoro", rhn): "uoro",
    ("uoro", custom): "autodiff_uoro",
    ("uoro", lru): "autodiff_uoro",
    ("snap1", rhn): "snap1",
    ("snap1", custom): "autodiff_snap1",
    ("snap1", lru): "diagonal_rtrl",
    ("ok", rhn): "ok",
  }
  for (name, cell), implementation in expected.items():
    hparams = {"rank": 2} if name == "ok" else {}
    estimator = estimators.make(name, cell, **hparams)
    assert estimator.implementation == implementation, (name, cell)
    # `name` stays the registry name the logs and experiments use.
    assert estimator.name == (
      "rtrl" if implementation == "diagonal_rtrl" else name
    )
  assert estimators.ok(rhn, 2).implementation == "ok"
  assert estimators.autodiff_rtrl(rhn).implementation == "autodiff_rtrl"


def test_make_names_a_missing_or_extra_hyperparameter():
  import pytest

  from rtrl import cells
  from rtrl import estimators

  rhn = cells.RHN(hidden_size=3)
  with pytest.raises(
    ValueError, match=r"estimator 'ok' needs rank \(an int >= 1\)"
  ):
    estimators.make("ok", rhn)
  with pytest.raises(ValueError, match="'kf' does not take rank"):
    estimators.make("kf", rhn, rank=2)
  with pytest.raises(ValueError, match="'ok' does not take pattern"):
    estimators.make("ok", rhn, rank=2, pattern=None)
  with pytest.raises(ValueError, match="'uoro' does not take pattern"):
    estimators.make("uoro", cells.as_custom(rhn), pattern=None)


def test_a_factory_refuses_a_cell_it_cannot_serve_and_names_the_right_one():
  import pytest

  from rtrl import cells
  from rtrl import estimators

  custom = cells.as_custom(cells.RHN(hidden_size=3))
  lru = cells.LRU(3)
  refusals = [
    (estimators.exact_rtrl, custom, "autodiff_rtrl"),
    (estimators.exact_rtrl, lru, "diagonal_rtrl"),
    (estimators.uoro, custom, "autodiff_uoro"),
    (estimators.uoro, lru, "autodiff_uoro"),
    (estimators.snap1, custom, "autodiff_snap1"),
    (estimators.snap1, lru, "diagonal_rtrl"),
    (estimators.rflo, custom, "autodiff_"),
    (estimators.kf, custom, "autodiff_"),
    (lambda c: estimators.ok(c, 2), custom, "Lemma-1 form.*autodiff_"),
    (lambda c: estimators.ktp(c, 2), lru, "Lemma-1 form.*diagonal_rtrl"),
    (lambda c: estimators.kf_avg(c, 2), lru, "diagonal_rtrl"),
    (lambda c: estimators.kf_approx(c, 1), custom, "autodiff_"),
    (lambda c: estimators.ok_biased(c, 2), "not a cell", "Lemma-1 form"),
    (estimators.diagonal_rtrl, custom, "autodiff_rtrl"),
    (estimators.autodiff_rtrl, "not a cell", "cell must be"),
  ]
  for factory, cell, instead in refusals:
    with pytest.raises(ValueError, match=instead):
      factory(cell)


def test_the_registry_is_read_only():
  import pytest

  from rtrl import estimators
  from rtrl.estimators import registry

  with pytest.raises(TypeError):
    registry.REGISTRY["mine"] = registry.REGISTRY["ok"]  # type: ignore[index]
  assert not hasattr(estimators, "register")
  assert estimators.spec("ok").hyperparameters[0].name == "rank"
