"""Generalised advantage estimation (Schulman et al., "High-Dimensional
Continuous Control Using Generalized Advantage Estimation", ICLR 2016) over
a time-major rollout whose environments reset themselves.

    delta_t = r_t + gamma (1 - done_t) V_{t+1} - V_t
    A_t = delta_t + gamma lambda (1 - done_t) A_{t+1},   A_T = 0

`done_t` ends the episode at step `t` (no bootstrap through it); `V_T` is
the value of the step after the rollout. `A_t + V_t` is the truncated
λ-return, the critic's target.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(
  rewards: jax.Array,
  values: jax.Array,
  dones: jax.Array,
  last_value: jax.Array,
  gamma: float | jax.Array,
  gae_lambda: float | jax.Array,
) -> tuple[jax.Array, jax.Array]:
  """`(advantages, targets)`, each `(T, ...)` like `values`.

  Args:
    rewards: `(T, ...)` the reward of step `t`.
    values: `(T, ...)` `V(h_t)`, the critic at step `t`.
    dones: `(T, ...)` bool, the episode ended at step `t`.
    last_value: `(...)` the critic's value of the step after the rollout.
    gamma: the discount.
    gae_lambda: GAE's λ (0: one-step TD errors, 1: Monte Carlo returns
      bootstrapped at the rollout's end).

  Returns:
    The advantages and the λ-return targets `advantages + values`.
  """
  dtype = values.dtype
  not_dones = 1.0 - dones.astype(dtype)

  def backward(carry, step):
    advantage, next_value = carry
    reward, value, not_done = step
    delta = reward + gamma * not_done * next_value - value
    advantage = delta + gamma * gae_lambda * not_done * advantage
    return (advantage, value), advantage

  carry = (jnp.zeros_like(last_value, dtype), last_value.astype(dtype))
  _, advantages = jax.lax.scan(
    backward,
    carry,
    (rewards.astype(dtype), values, not_dones),
    reverse=True,
  )
  return advantages, advantages + values


__all__ = ["gae"]
