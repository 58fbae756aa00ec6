"""Evaluation of a trained network with frozen weights, RTRRL's protocol:
`num_envs` fresh environments run `num_steps` steps each with actions
sampled from the policy, and each environment's score is the return of its
first episode (the reward summed up to its first `done`, or over all
`num_steps` when the episode is not over by then).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rtrl.rl.envs.base import Environment
from rtrl.rl.network import Network


def first_episode_returns(rewards: jax.Array, dones: jax.Array) -> jax.Array:
  """`(num_envs,)` returns of the first episode, from `(T, num_envs)`
  rewards and done flags: rewards summed through the first done step
  (inclusive), or through `T` when there is none."""
  t = jnp.arange(rewards.shape[0])[:, None]
  first_done = jnp.where(dones.any(0), jnp.argmax(dones, 0), rewards.shape[0])
  return jnp.sum(jnp.where(t <= first_done[None, :], rewards, 0.0), axis=0)


def run_policy(
  network: Network,
  env: Environment,
  params: Any,
  key: jax.Array,
  num_envs: int,
  num_steps: int,
  greedy: bool = False,
) -> tuple[jax.Array, jax.Array]:
  """`(rewards, dones)`, each `(num_steps, num_envs)`: the network acting
  in `num_envs` fresh environments with frozen `params`, its core state
  reset at every episode start (jittable; `num_envs` and `num_steps` are
  static)."""
  reset_key, run_key = jax.random.split(key)
  obs, env_state = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
  policy = network.policy
  initial = network.initial_state()

  def one_env(carry, obs, reward, done, key):
    state, action = carry
    state = jax.tree_util.tree_map(
      lambda s0, s: jnp.where(done, s0, s), initial, state
    )
    action = jnp.where(done, policy.zero_action(), action)
    reward = jnp.where(done, 0.0, reward)
    x = network.core_input(obs, action, reward)
    state = network.core_step(params.get("cell"), state, x)
    out, _ = network.heads(params, network.features(state))
    action = policy.mode(out) if greedy else policy.sample(key, out)
    return state, action

  def step(carry, key):
    env_state, obs, reward, done, agent = carry
    act_key, env_key = jax.random.split(key)
    agent = jax.vmap(one_env)(
      agent, obs, reward, done, jax.random.split(act_key, num_envs)
    )
    obs, env_state, reward, done = jax.vmap(env.step)(
      jax.random.split(env_key, num_envs), env_state, agent[1]
    )
    return (env_state, obs, reward, done, agent), (reward, done)

  state0 = jax.tree_util.tree_map(
    lambda s: jnp.broadcast_to(s, (num_envs,) + jnp.shape(s)), initial
  )
  zero = policy.zero_action()
  action0 = jnp.broadcast_to(zero, (num_envs,) + zero.shape)
  carry = (
    env_state,
    obs,
    jnp.zeros((num_envs,), jnp.float32),
    jnp.ones((num_envs,), bool),  # every env starts an episode
    (state0, action0),
  )
  _, (rewards, dones) = jax.lax.scan(
    step, carry, jax.random.split(run_key, num_steps)
  )
  return rewards, dones


def evaluate(
  network: Network,
  env: Environment,
  params: Any,
  key: jax.Array,
  num_envs: int = 10,
  num_steps: int = 1000,
  greedy: bool = False,
) -> jax.Array:
  """The mean first-episode return over `num_envs` environments (RTRRL's
  evaluation: 10 environments x 1000 steps, sampled actions)."""
  rewards, dones = run_policy(
    network, env, params, key, num_envs, num_steps, greedy
  )
  return jnp.mean(first_episode_returns(rewards, dones))


__all__ = ["evaluate", "first_episode_returns", "run_policy"]
