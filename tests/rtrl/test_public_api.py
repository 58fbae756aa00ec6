"""`import rtrl` is enough: the flat names are the modules' own objects, each
is documented in the package docstring, and the docstring's example trains.
(`rtrl.estimators`' own API: tests/rtrl/estimators/test_api.py.)"""

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
