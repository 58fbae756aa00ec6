"""Bad input to the library is a ValueError naming the argument, the shape
or value it got and the one it needs (`rtrl/online/inputs.py`, the RLS
transform): issue 49's cases, each of which used to train on as NaN, or
fail deep inside JAX."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rls
import rtrl
from rtrl import online

B, T, INPUTS, CLASSES = 4, 6, 3, 5


@pytest.fixture(scope="module")
def setup():
  cell = rtrl.cells.RHN(hidden_size=4)
  trainer = rtrl.make_online_trainer(
    cell, rtrl.estimators.make("rtrl", cell), optax.adam(1e-2)
  )
  key = jax.random.PRNGKey(0)
  params = {
    "cell": cell.init(key, INPUTS),
    "readout": rtrl.readout.linear().init(key, 4, CLASSES),
  }
  return cell, trainer, params, trainer.init(params, key, B)


def chunk(t=T, b=B, **fields):
  values = dict(
    inputs=jnp.ones((t, b, INPUTS)),
    targets=jnp.zeros((t, b), jnp.int32),
    weights=jnp.ones((t, b)),
    resets=jnp.zeros((t, b), bool),
  )
  values.update(fields)
  return online.StepBatch(**values)


@pytest.mark.parametrize(
  "fields, message",
  [
    (
      dict(targets=jnp.full((T, B), CLASSES, jnp.int32)),
      r"chunk.targets holds the class 5, but the readout predicts 5 classes"
      r": targets must be integers in \[0, 5\)",
    ),
    (dict(targets=jnp.full((T, B), -1, jnp.int32)), r"the class -1"),
    (
      dict(weights=jnp.ones((T,))),
      r"chunk.weights has shape \(6,\), but needs \(T, B\) = \(6, 4\)",
    ),
    (
      dict(inputs=jnp.ones((T, B, INPUTS)).at[2, 1, 0].set(jnp.nan)),
      r"chunk.inputs holds NaN or Inf \(first at index \(2, 1, 0\) of shape "
      r"\(6, 4, 3\)\)",
    ),
    (
      dict(resets=jnp.zeros((T, B, 1), bool)),
      r"chunk.resets has shape \(6, 4, 1\), but needs \(T, B\) = \(6, 4\)",
    ),
  ],
)
def test_bad_chunk_is_named_before_training(setup, fields, message):
  _, trainer, _, state = setup
  with pytest.raises(ValueError, match=message):
    trainer.run(state, chunk(**fields))


def test_batch_against_a_state_made_for_another(setup):
  _, trainer, _, state = setup
  with pytest.raises(
    ValueError,
    match=r"chunk.inputs has a batch of 5 \(shape \(6, 5, 3\)\), but the "
    r"trainer state was made by init for a batch of 4",
  ):
    trainer.run(state, chunk(b=5))
  one_step = jax.tree_util.tree_map(lambda a: a[0], chunk(b=5))
  with pytest.raises(ValueError, match=r"batch.inputs has a batch of 5"):
    trainer.step(state, one_step)


def test_init_arguments(setup):
  _, trainer, params, _ = setup
  key = jax.random.PRNGKey(1)
  with pytest.raises(ValueError, match="batch_size must be a positive .* -1"):
    trainer.init(params, key, -1)
  half = jax.tree_util.tree_map(lambda a: a.astype(jnp.float16), params)
  with pytest.raises(
    ValueError,
    match=r"params\['cell'\]\['W'\] has dtype float16, but the online "
    "trainers need float32 or float64",
  ):
    trainer.init(half, key, B)


def test_good_chunk_trains_and_checks_cost_no_retrace(setup):
  _, trainer, _, state = setup
  new_state, metrics = trainer.run(state, chunk())
  assert np.isfinite(np.asarray(metrics.loss_sum)).all()
  assert int(new_state.step) == T


def test_inside_jit_only_static_checks_run(setup):
  """Traced values cannot raise: the value checks step aside (the docs say
  to use optax.apply_if_finite there); shape checks still raise."""
  _, trainer, _, state = setup
  bad_targets = chunk(targets=jnp.full((T, B), CLASSES, jnp.int32))
  _, metrics = jax.jit(trainer.run)(state, bad_targets)
  assert not np.isfinite(np.asarray(metrics.loss_sum)).all()
  with pytest.raises(ValueError, match="chunk.weights has shape"):
    jax.jit(trainer.run)(state, chunk(weights=jnp.ones((T,))))


def test_check_inputs_false_skips_the_value_checks(setup):
  cell, _, params, _ = setup
  trainer = rtrl.make_online_trainer(
    cell,
    rtrl.estimators.make("rtrl", cell),
    optax.adam(1e-2),
    check_inputs=False,
  )
  state = trainer.init(params, jax.random.PRNGKey(0), B)
  nan_inputs = jnp.full((T, B, INPUTS), jnp.nan)
  _, metrics = trainer.run(state, chunk(inputs=nan_inputs))
  assert np.isnan(np.asarray(metrics.loss_sum)).all()


def test_regression_targets_are_not_class_checked():
  cell = rtrl.cells.RNN(hidden_size=4)
  trainer = rtrl.make_online_trainer(
    cell,
    rtrl.estimators.make("rtrl", cell),
    optax.sgd(1e-2),
    loss=rtrl.losses.squared_error,
  )
  key = jax.random.PRNGKey(0)
  params = {
    "cell": cell.init(key, INPUTS),
    "readout": rtrl.readout.linear().init(key, 4, 2),
  }
  state = trainer.init(params, key, B)
  targets = jnp.full((T, B, 2), 7.0)  # Any real value is a fine target.
  trainer.run(state, chunk(targets=targets))


class MLP(nn.Module):
  width: int

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2)(nn.relu(nn.Dense(self.width)(x)))


def _mlp(width):
  x = jnp.ones((8, 6))
  params = MLP(width).init(jax.random.PRNGKey(0), x)["params"]
  _, inputs = rls.layer_inputs(MLP(width).apply, {"params": params}, x)
  grads = jax.grad(lambda p: MLP(width).apply({"params": p}, x).sum())(params)
  return params, inputs, grads


def test_rls_state_from_another_model_is_named():
  params, inputs, grads = _mlp(8)
  other_state = rls.scale_by_rls().init(_mlp(16)[0])
  with pytest.raises(
    ValueError,
    match=r"state: the RLS P of layer 'Dense_0' has shape \(17, 17\), but "
    r"this layer \(kernel \(8, 2\)\) needs 9 rows",
  ):
    rls.scale_by_rls().update(grads, other_state, params, layer_inputs=inputs)


def test_rls_nan_layer_inputs_are_named():
  params, inputs, grads = _mlp(8)
  tx = rls.scale_by_rls()
  bad = jax.tree_util.tree_map(lambda a: jnp.full_like(a, jnp.nan), inputs)
  with pytest.raises(ValueError, match=r"layer_inputs\['Dense_\d'\] holds NaN"):
    tx.update(grads, tx.init(params), params, layer_inputs=bad)
  # Inside jit nothing can raise. NaN data makes the gradient NaN with the
  # layer inputs, so optax.apply_if_finite (the documented guard) skips the
  # step and keeps P.
  guarded = optax.apply_if_finite(rls.scale_by_rls(), 5)
  state = guarded.init(params)

  @jax.jit
  def step(state, x):
    _, layer_inputs = rls.layer_inputs(MLP(8).apply, {"params": params}, x)
    grads = jax.grad(lambda p: MLP(8).apply({"params": p}, x).sum())(params)
    return guarded.update(grads, state, params, layer_inputs=layer_inputs)[1]

  new_state = step(state, jnp.full((8, 6), jnp.nan))
  same = jax.tree_util.tree_map(
    np.array_equal, new_state.inner_state, state.inner_state
  )
  assert all(jax.tree_util.tree_leaves(same))
  assert int(new_state.total_notfinite) == 1
