"""rls.grafting: the magnitude's per-array norms with the direction's
directions, layer inputs forwarded to an RLS direction, and bad arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from rls_problems import dense_params
from rls_problems import layer_input_entry
from rls_problems import random_like

from rls import damped_second_moment
from rls import grafting


def test_graft_takes_magnitude_norms_and_direction_directions():
  rng = np.random.default_rng(2)
  params = {"a": jnp.ones((3, 2)), "b": jnp.ones(4), "c": jnp.zeros(2)}
  grads = random_like(rng, params)
  grads["c"] = jnp.zeros(2)
  magnitude = optax.scale(3.0)
  direction = optax.scale_by_rms()
  tx = grafting.graft(magnitude, direction)
  updates, state = tx.update(grads, tx.init(params))
  steps, _ = magnitude.update(grads, magnitude.init(params))
  units, _ = direction.update(grads, direction.init(params))
  for name in ("a", "b"):
    np.testing.assert_allclose(
      np.linalg.norm(updates[name]), np.linalg.norm(steps[name]), rtol=1e-5
    )
    cosine = np.sum(updates[name] * units[name]) / (
      np.linalg.norm(updates[name]) * np.linalg.norm(units[name])
    )
    np.testing.assert_allclose(cosine, 1.0, rtol=1e-5)
  np.testing.assert_array_equal(updates["c"], 0.0)
  assert isinstance(state, grafting.GraftState)


def test_graft_forwards_layer_inputs_to_the_direction():
  """An RLS direction at Adam's norms: layer_inputs reach the RLS form,
  Adam ignores them."""
  params = dense_params(3, 2, jnp.float32)
  rows = jnp.asarray(np.random.default_rng(3).normal(size=(5, 3)), jnp.float32)
  tx = grafting.graft(
    optax.scale_by_adam(),
    damped_second_moment.scale_by_rls_damped_second_moment(),
  )
  updates, state = tx.update(
    params, tx.init(params), layer_inputs=layer_input_entry(rows)
  )
  assert int(state.direction.layers.step) == 1
  assert all(np.all(np.isfinite(u)) for u in jax.tree.leaves(updates))


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(magnitude="adam"), "magnitude"),
    (dict(direction=None), "direction"),
    (dict(eps=0.0), "eps"),
  ],
)
def test_graft_bad_arguments(kwargs, match):
  args = dict(magnitude=optax.scale_by_adam(), direction=optax.identity())
  with pytest.raises(ValueError, match=match):
    grafting.graft(**dict(args, **kwargs))
