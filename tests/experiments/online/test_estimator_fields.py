"""The online experiments read an estimator's hyper-parameters from config
fields of the same names, the list generated from the factories'
signatures (`setup.ESTIMATOR_FIELDS`): a config that lists a field reaches
the factory with it, one at None keeps the factory's default, and a
required one missing is named."""

from helpers import copy_config
import ml_collections
import pytest

from experiments.loop import errors
from experiments.online import setup
from rtrl import cells
from rtrl import estimators


def test_the_fields_are_every_factory_keyword():
  assert set(setup.ESTIMATOR_FIELDS) == {
    h.name for s in estimators.SPECS for h in s.hyperparameters
  }
  assert {"rank", "order", "preprojection_rank", "subspace_iterations"} <= set(
    setup.ESTIMATOR_FIELDS
  )
  assert setup.ESTIMATOR_FIELDS["subspace_iterations"] == 2  # sk_rtrl's


def with_fields(config, **fields):
  config = ml_collections.ConfigDict(config.to_dict())
  for name, value in fields.items():
    config[name] = value
  return config


def test_a_listed_field_reaches_the_factory():
  config = with_fields(
    copy_config(estimator="sk_rtrl", rank=4),
    preprojection_rank=8,
    subspace_iterations=8,
    preprojection="svd",
  )
  assert setup.estimator_hyperparameters(config) == {
    "rank": 4,
    "preprojection_rank": 8,
    "subspace_iterations": 8,
    "preprojection": "svd",
  }
  estimator = setup.make_estimator(config, cells.RHN(hidden_size=8))
  assert estimator.name == "sk_rtrl"


def test_a_field_at_none_or_absent_keeps_the_default():
  config = with_fields(
    copy_config(estimator="sk_rtrl", rank=4), preprojection_rank=None
  )
  assert setup.estimator_hyperparameters(config) == {"rank": 4}
  assert setup.estimator_hyperparameters(
    copy_config(estimator="ok", rank=2)
  ) == {"rank": 2}
  assert setup.estimator_hyperparameters(copy_config(estimator="kf")) == {}


def test_a_required_field_missing_is_named():
  config = copy_config(estimator="snap", order=2).to_dict()
  del config["order"]
  with pytest.raises(ValueError, match=r"needs config\.order \(SnAp's"):
    setup.estimator_hyperparameters(ml_collections.ConfigDict(config))


def test_sk_rtrl_preprojection_fields_are_checked_as_config_fields():
  from rtrl.estimators import _sk_rtrl_options

  assert setup.PREPROJECTIONS == _sk_rtrl_options.PREPROJECTIONS
  config = copy_config(estimator="sk_rtrl", rank=4)
  setup.validate_trainer(config)  # the three at None: defaults
  for field, value, message in [
    ("preprojection", "qr", r"config\.preprojection must be one of"),
    ("preprojection_rank", 0, r"config\.preprojection_rank must be"),
    ("subspace_iterations", -1, r"config\.subspace_iterations must be"),
  ]:
    # A ConfigError: the mains print it as one `Error:` line, exit 2.
    with pytest.raises(errors.ConfigError, match=message):
      setup.validate_trainer(with_fields(config, **{field: value}))
