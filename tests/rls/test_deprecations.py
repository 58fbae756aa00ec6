"""The deprecated rls names warn, name the release that removes them, and
are what replaces them (pyproject's filterwarnings makes any other call of
them an error in the suite)."""

import jax.numpy as jnp
import pytest

import rls
from rls import conventional
from rls import layerwise
from rls import transform


def test_scale_by_rls_with_momentum_and_l1_warns_and_is_the_composition():
  with pytest.warns(DeprecationWarning, match=r"0\.3\.0.*with_momentum_and_l1"):
    old = rls.scale_by_rls_with_momentum_and_l1(momentum=0.5, l1=1e-5)
  new = rls.with_momentum_and_l1(rls.scale_by_rls(), 0.5, 1e-5)
  params = {"kernel": jnp.ones((3, 2)), "bias": jnp.ones(2)}
  assert type(old.init(params)) is type(new.init(params))


@pytest.mark.parametrize(
  "name, home",
  [
    ("rls_layer_step", conventional),
    ("LayerInput", layerwise),
    ("precondition_by", layerwise),
    ("scale_by_rls_conventional", conventional),
  ],
)
def test_names_that_moved_out_of_rls_transform_warn(name, home):
  with pytest.warns(DeprecationWarning, match=rf"rls\.transform\.{name}.*0\.3"):
    value = getattr(transform, name)
  assert value is getattr(home, name)


def test_rls_transform_has_no_other_names():
  with pytest.raises(AttributeError, match="no attribute 'bogus'"):
    transform.bogus  # noqa: B018
  assert transform.scale_by_rls is rls.scale_by_rls
