"""PPO's loss on a minibatch of whole sequences (Schulman et al. 2017, with
purejaxrl's value clipping and per-minibatch advantage normalisation, Lu
et al. 2022): the rollout replayed through the recurrent core by BPTT,
the clipped surrogate, the clipped value loss and the entropy bonus.

    ratio_t = pi(a_t | h_t) / pi_old(a_t | h_t)
    L_pi = -mean(min(ratio A, clip(ratio, 1 - eps, 1 + eps) A))
    L_V = 0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2))
    L = L_pi + value_coef L_V - entropy_coef mean(entropy)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl.rl.network import Network
from rtrl.rl.ppo_rollout import Rollout
from rtrl.rl.ppo_rollout import replay


class LossHyperparams(NamedTuple):
  """The loss's coefficients (floats or traced scalars).

  Attributes:
    clip_eps: the ratio's clip range `eps` (and the value's, when
      `clip_value`).
    value_coef: the value loss's weight.
    entropy_coef: the entropy bonus's weight.
    clip_value: clip the value loss as purejaxrl does.
    normalize_advantages: standardise the advantages per minibatch.
  """

  clip_eps: Any
  value_coef: Any
  entropy_coef: Any
  clip_value: bool = True
  normalize_advantages: bool = True


class LossMetrics(NamedTuple):
  """Scalars of one minibatch's loss."""

  total_loss: jax.Array
  policy_loss: jax.Array
  value_loss: jax.Array
  entropy: jax.Array
  approx_kl: jax.Array
  clip_fraction: jax.Array


class Minibatch(NamedTuple):
  """Whole sequences of `B` environments, time-major `(T, B, ...)`, and
  their core states before the rollout (`(B, ...)`)."""

  initial_core_state: Any
  rollout: Rollout
  advantages: jax.Array
  targets: jax.Array


def clipped_objective(
  log_probs: jax.Array,
  values: jax.Array,
  entropies: jax.Array,
  batch: Minibatch,
  hp: LossHyperparams,
) -> tuple[jax.Array, LossMetrics]:
  """The PPO loss from the replayed log-probabilities, values and
  entropies (each `(T, B)`) and the recorded rollout."""
  old = batch.rollout
  advantages = batch.advantages
  if hp.normalize_advantages:
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
  log_ratio = log_probs - old.log_probs
  ratio = jnp.exp(log_ratio)
  clipped = jnp.clip(ratio, 1.0 - hp.clip_eps, 1.0 + hp.clip_eps)
  policy_loss = -jnp.mean(jnp.minimum(ratio * advantages, clipped * advantages))
  value_error = jnp.square(values - batch.targets)
  if hp.clip_value:
    values_clipped = old.values + jnp.clip(
      values - old.values, -hp.clip_eps, hp.clip_eps
    )
    value_error = jnp.maximum(
      value_error, jnp.square(values_clipped - batch.targets)
    )
  value_loss = 0.5 * jnp.mean(value_error)
  entropy = jnp.mean(entropies)
  total = policy_loss + hp.value_coef * value_loss - hp.entropy_coef * entropy
  metrics = LossMetrics(
    total_loss=total,
    policy_loss=policy_loss,
    value_loss=value_loss,
    entropy=entropy,
    # Schulman's low-variance estimator of KL(old || new).
    approx_kl=jnp.mean((ratio - 1.0) - log_ratio),
    clip_fraction=jnp.mean(
      (jnp.abs(ratio - 1.0) > hp.clip_eps).astype(ratio.dtype)
    ),
  )
  return total, metrics


def ppo_loss(
  network: Network, params: Any, batch: Minibatch, hp: LossHyperparams
) -> tuple[jax.Array, LossMetrics]:
  """The PPO loss of `params` on a minibatch (differentiate with
  `jax.grad(..., has_aux=True)`: BPTT through every sequence, the core
  reset at its recorded episode starts)."""
  rollout = batch.rollout
  outs, values = replay(
    network, params, batch.initial_core_state, rollout.inputs, rollout.starts
  )
  policy = network.policy
  per_step = jax.vmap(jax.vmap(policy.log_prob))
  log_probs = per_step(outs, rollout.actions)
  entropies = jax.vmap(jax.vmap(policy.entropy))(outs)
  return clipped_objective(log_probs, values, entropies, batch, hp)


__all__ = [
  "LossHyperparams",
  "LossMetrics",
  "Minibatch",
  "clipped_objective",
  "ppo_loss",
]
