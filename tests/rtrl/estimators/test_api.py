"""`rtrl.estimators`' public API, read from its one description per
estimator (`estimators.SPECS`): every factory public and documented, every
hyper-parameter reaching `make`, each label and cost formula true of the
code, and the names the SPEC fixes all there."""

import inspect
import re

import jax
import pytest

from rtrl import cells
from rtrl import estimators
from rtrl.estimators import _registry as registry

# The names ../shared/SPEC.md fixes (a contract, not a description): the
# named factories and the registry names.
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
SPECS = {s.name: s for s in estimators.SPECS}
FACTORIES = {f.__name__: f for s in estimators.SPECS for f in s.factories}


def required_at_two(spec) -> dict:
  """A spec's required hyper-parameters, each 2."""
  return {h.name: 2 for h in spec.hyperparameters if h.required}


def test_the_spec_names_are_all_there():
  assert set(SPEC_FACTORIES) <= set(estimators.FACTORIES)
  assert set(SPEC_NAMES) == set(estimators.names()) == set(SPECS)


def test_factories_and_all_are_generated_from_the_specs():
  """`FACTORIES` is every spec's factories, once; each is the package's
  attribute of that name and in `__all__`; nothing private is exported."""
  assert tuple(FACTORIES) == estimators.FACTORIES
  for name, factory in FACTORIES.items():
    assert getattr(estimators, name) is factory, name
    assert name in estimators.__all__, name
  assert not [n for n in estimators.__all__ if n.startswith("_")]
  assert all(hasattr(estimators, n) for n in estimators.__all__)


def test_no_module_shares_a_name_with_an_exported_function():
  """The implementation modules are private (`_uoro.py`): `import
  rtrl.estimators.uoro` is not a module that the function hides."""
  import pkgutil

  modules = [m.name for m in pkgutil.iter_modules(estimators.__path__)]
  assert modules and all(m.startswith("_") for m in modules), modules


@pytest.mark.parametrize("name", list(FACTORIES))
def test_every_factory_is_documented(name):
  """Its docstring names its paper, its cost per example and step, and
  documents every argument (the hyper-parameters' messages come from
  there)."""
  factory = FACTORIES[name]
  doc = " ".join((factory.__doc__ or "").split())
  assert "Args: cell" in doc, f"{name}: no Args"
  assert "per example and step" in doc, f"{name}: no cost"
  assert re.search(r"(19|20)\d\d", doc), f"{name}: no paper"
  for parameter in inspect.signature(factory).parameters:
    assert f" {parameter}: " in doc, f"{name}: {parameter} undocumented"


@pytest.mark.parametrize("name", list(SPECS))
def test_hyperparameters_are_the_factory_signature(name):
  spec = SPECS[name]
  signature = inspect.signature(spec.lemma1).parameters
  declared = [p for p in signature if p not in ("cell", "routing")]
  assert estimators.hyperparameters(name) == tuple(declared)
  for h in spec.hyperparameters:
    assert h.required == (signature[h.name].default is inspect._empty)
    assert h.valid and "<class" not in h.valid, (name, h)


@pytest.mark.parametrize("name", list(SPECS))
def test_every_hyperparameter_reaches_make(name):
  """`make` takes each hyper-parameter its factory takes, optional ones
  included (at their defaults: the same estimator as without them)."""
  spec = SPECS[name]
  cell = cells.RHN(hidden_size=4)
  given = required_at_two(spec)
  everything = {h.name: h.default for h in spec.hyperparameters}
  everything.update(given)
  for hparams in (given, everything):
    estimator = estimators.make(name, cell, **hparams)
    assert estimator.name == name and estimator.implementation


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("cell_name", ["rhn", "lstm"])
def test_cost_formulas_are_the_code(name, cell_name):
  """`cost.tangent_floats` is the tangent the factory builds (its leaves'
  sizes, from `jax.eval_shape`), and `cost.gemm_flops` a positive count;
  the label takes the hyper-parameters."""
  spec = SPECS[name]
  cell = cells.make(cell_name, 4)
  hparams = required_at_two(spec)
  params = cell.init(jax.random.PRNGKey(0), 3)
  estimator = estimators.make(name, cell, **hparams)
  tangent = jax.eval_shape(
    estimator.init, params, cell.initial_state(), jax.random.PRNGKey(0)
  ).tangent
  floats = sum(leaf.size for leaf in jax.tree_util.tree_leaves(tangent))
  assert spec.cost.tangent_floats(cell, 3, **hparams) == floats
  assert spec.cost.gemm_flops(cell, 3, **hparams) > 0
  assert len(spec.cost.exponents) == 2 and spec.cost.time and spec.cost.memory
  label = spec.label_for(**hparams)
  assert "{" not in label and ("2" in label) == bool(hparams)


def test_make_reports_the_implementation():
  """Each name's factories serve their cell kinds (read from the specs);
  `Estimator.name` stays the registry name the logs use."""
  rhn = cells.RHN(hidden_size=3)
  kinds = {"lemma1": rhn, "lru": cells.LRU(3), "custom": cells.as_custom(rhn)}
  for spec in estimators.SPECS:
    for kind, cell in kinds.items():
      factory = getattr(spec, kind)
      if factory is None:
        continue
      hparams = required_at_two(spec) if kind == "lemma1" else {}
      estimator = estimators.make(spec.name, cell, **hparams)
      # SnAp-2 of a dense recurrence drops nothing: exact RTRL's code.
      expected = "exact_rtrl" if spec.name == "snap" else factory.__name__
      assert estimator.implementation == expected, (spec.name, kind)
      assert estimator.name == (
        "rtrl" if factory.__name__ == "diagonal_rtrl" else spec.name
      )


def test_make_names_a_missing_or_extra_hyperparameter():
  rhn = cells.RHN(hidden_size=3)
  with pytest.raises(ValueError, match=r"estimator 'ok' needs rank \(an int"):
    estimators.make("ok", rhn)
  with pytest.raises(ValueError, match="'kf' does not take rank"):
    estimators.make("kf", rhn, rank=2)
  with pytest.raises(ValueError, match="'ok' does not take pattern"):
    estimators.make("ok", rhn, rank=2, pattern=None)
  with pytest.raises(ValueError, match="'uoro' does not take pattern"):
    estimators.make("uoro", cells.as_custom(rhn), pattern=None)


def test_sk_rtrl_options_reach_make():
  """The issue's example: SK-RTRL's optional hyper-parameters through
  `make`, and a bad value named."""
  rhn = cells.RHN(hidden_size=8)
  estimators.make(
    "sk_rtrl",
    rhn,
    rank=4,
    preprojection_rank=8,
    subspace_iterations=8,
    preprojection="svd",
  )
  with pytest.raises(ValueError, match="preprojection of estimator"):
    estimators.make("sk_rtrl", rhn, rank=4, preprojection="qr")


def test_a_factory_refuses_a_cell_it_cannot_serve_and_names_the_right_one():
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
  with pytest.raises(TypeError):
    registry.REGISTRY["mine"] = registry.REGISTRY["ok"]  # type: ignore[index]
  assert not hasattr(estimators, "register")
  assert estimators.spec("ok").hyperparameters[0].name == "rank"
