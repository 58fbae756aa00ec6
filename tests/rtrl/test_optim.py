"""`rtrl.optim.tf1_adam` is TF1's AdamOptimizer: epsilon added to the
uncorrected sqrt(v), the bias corrections folded into the step size."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rtrl import optim


def tf1_reference(gradients, learning_rate, b1=0.9, b2=0.999, eps=1e-8):
  """TF1's update rule, step by step in NumPy float64."""
  m = np.zeros_like(gradients[0])
  v = np.zeros_like(gradients[0])
  updates = []
  for t, g in enumerate(gradients, start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    step = learning_rate * np.sqrt(1 - b2**t) / (1 - b1**t)
    updates.append(-step * m / (np.sqrt(v) + eps))
  return updates


def run(transform, gradients):
  state = transform.init(jnp.zeros_like(gradients[0]))
  updates = []
  for g in gradients:
    update, state = transform.update(jnp.asarray(g), state)
    updates.append(np.asarray(update))
  return updates


def test_tf1_adam_equals_tf1_update_rule(x64):
  del x64
  rng = np.random.default_rng(0)
  # Gradients from 1e-9 to 1e-3: where epsilon's form matters.
  scales = 10.0 ** rng.uniform(-9, -3, (1, 40))
  gradients = list(rng.normal(size=(30, 40)) * scales)
  got = run(optim.tf1_adam(1e-3), gradients)
  for a, b in zip(got, tf1_reference(gradients, 1e-3)):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
  # optax's form differs exactly where the gradients are near epsilon.
  optax_updates = run(optax.adam(1e-3), gradients)
  assert max(np.max(np.abs(a - b)) for a, b in zip(optax_updates, got)) > 1e-6


def test_without_epsilon_tf1_and_optax_agree(x64):
  del x64
  gradients = list(np.random.default_rng(1).normal(size=(10, 7)))
  tf1 = run(optim.tf1_adam(1e-2, eps=0.0), gradients)
  reference = run(optax.adam(1e-2, eps=0.0), gradients)
  for a, b in zip(tf1, reference):
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_traced_learning_rate_under_jit():
  def step(rate):
    transform = optim.tf1_adam(rate)
    params = jnp.ones(3)
    update, _ = transform.update(params, transform.init(params))
    return update

  np.testing.assert_allclose(jax.jit(step)(0.5), step(0.5), rtol=1e-6)
  assert float(jax.jit(step)(0.5)[0]) == pytest.approx(-0.5, rel=1e-5)
