"""PPO's rollouts: `num_envs` environments stepped `T` times by the
recurrent actor-critic network with frozen weights, the core's state reset
at every episode start, and everything the loss needs to replay the
rollout by BPTT recorded (time-major).

The core's input of step `t` is `[o_t, enc(a_{t-1}), r_{t-1}]` with zeros
for the previous action and reward at an episode's first step (RTRRL's
input, as `rtrl.rl.network` defines it); it does not depend on the
weights, so the loss replays the recorded inputs.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl.rl.envs.base import Environment
from rtrl.rl.network import Network


class Runner(NamedTuple):
  """The environments and the agent's memory between rollouts, `(E, ...)`.

  Attributes:
    env_state: the environments' states.
    obs: `(E, observation_size)` the next observation.
    reward: `(E,)` the last reward (the next step's reward input).
    start: `(E,)` bool, the next step starts an episode (reset the core).
    core_state: the core's state after the last step (before any reset).
    action: `(E, ...)` the last action.
    episode_return: `(E,)` the return of each running episode so far.
    episode_length: `(E,)` int32, its steps so far.
  """

  env_state: Any
  obs: jax.Array
  reward: jax.Array
  start: jax.Array
  core_state: Any
  action: jax.Array
  episode_return: jax.Array
  episode_length: jax.Array


class Rollout(NamedTuple):
  """One rollout, time-major `(T, E, ...)`.

  Attributes:
    inputs: `(T, E, input_size)` the core's inputs.
    starts: `(T, E)` bool, the core is reset before step `t`.
    actions: `(T, E, ...)` the sampled actions.
    log_probs: `(T, E)` their log-probabilities under the rollout's
      weights.
    values: `(T, E)` the critic's values.
    rewards: `(T, E)` the rewards.
    dones: `(T, E)` bool, the episode ended at step `t`.
  """

  inputs: jax.Array
  starts: jax.Array
  actions: jax.Array
  log_probs: jax.Array
  values: jax.Array
  rewards: jax.Array
  dones: jax.Array


class EpisodeLog(NamedTuple):
  """Episodes that ended during a rollout, `(T, E)`: at an entry where
  `ended`, the episode's return and length; zeros elsewhere."""

  ended: jax.Array
  returns: jax.Array
  lengths: jax.Array


def _float_dtype():
  return jnp.asarray(0.0).dtype


def core_input(network: Network, obs, action, reward, start):
  """The core's input of one environment's step: the previous action and
  reward are zeroed at an episode's first step."""
  action = jnp.where(start, network.policy.zero_action(), action)
  reward = jnp.where(start, 0.0, reward)
  return network.core_input(obs, action, reward)


def reset_and_step(network: Network, cell_params, state, x, start):
  """One core step of one environment, from its initial state when
  `start`."""
  state = jax.tree_util.tree_map(
    lambda s0, s: jnp.where(start, s0, s), network.initial_state(), state
  )
  return network.core_step(cell_params, state, x)


def _reset_and_step_batch(network: Network, cell_params, states, x, start):
  """`reset_and_step` of a batch of environments `(B, ...)`."""
  one = functools.partial(reset_and_step, network, cell_params)
  return jax.vmap(one)(states, x, start)


def heads_of_states(network: Network, params, states):
  """`(policy_outputs (B, num_outputs), values (B,))` of a batch of core
  states."""
  h = jax.vmap(network.features)(states)
  return jax.vmap(network.heads, in_axes=(None, 0))(params, h)


def _advance(network: Network, params, runner: Runner):
  """The core's inputs, states, policy outputs and values of every
  environment's next step."""
  x = jax.vmap(functools.partial(core_input, network))(
    runner.obs, runner.action, runner.reward, runner.start
  )
  states = _reset_and_step_batch(
    network, params.get("cell"), runner.core_state, x, runner.start
  )
  outs, values = heads_of_states(network, params, states)
  return x, states, outs, values


def initial_runner(
  network: Network, env: Environment, key: jax.Array, num_envs: int
) -> Runner:
  """`num_envs` fresh environments, each starting an episode."""
  obs, env_state = jax.vmap(env.reset)(jax.random.split(key, num_envs))

  def batch(tree):
    return jax.tree_util.tree_map(
      lambda a: jnp.broadcast_to(a, (num_envs,) + jnp.shape(a)), tree
    )

  dtype = _float_dtype()
  return Runner(
    env_state=env_state,
    obs=obs,
    reward=jnp.zeros((num_envs,), dtype),
    start=jnp.ones((num_envs,), bool),
    core_state=batch(network.initial_state()),
    action=batch(network.policy.zero_action()),
    episode_return=jnp.zeros((num_envs,), dtype),
    episode_length=jnp.zeros((num_envs,), jnp.int32),
  )


def rollout(
  network: Network,
  env: Environment,
  params: Any,
  runner: Runner,
  key: jax.Array,
  num_steps: int,
) -> tuple[Runner, Rollout, EpisodeLog]:
  """`num_steps` steps of every environment with frozen `params` (one
  `lax.scan`, no host in the loop)."""
  num_envs = runner.obs.shape[0]
  policy = network.policy
  dtype = _float_dtype()

  def step(runner: Runner, key):
    act_key, env_key = jax.random.split(key)
    x, states, outs, values = _advance(network, params, runner)
    actions = jax.vmap(policy.sample)(jax.random.split(act_key, num_envs), outs)
    log_probs = jax.vmap(policy.log_prob)(outs, actions)
    obs, env_state, rewards, dones = jax.vmap(env.step)(
      jax.random.split(env_key, num_envs), runner.env_state, actions
    )
    rewards = rewards.astype(dtype)
    returns = runner.episode_return + rewards
    lengths = runner.episode_length + 1
    transition = Rollout(
      x, runner.start, actions, log_probs, values, rewards, dones
    )
    log = EpisodeLog(
      ended=dones,
      returns=jnp.where(dones, returns, 0.0),
      lengths=jnp.where(dones, lengths, 0),
    )
    runner = Runner(
      env_state=env_state,
      obs=obs,
      reward=rewards,
      start=dones,
      core_state=states,
      action=actions,
      episode_return=jnp.where(dones, 0.0, returns),
      episode_length=jnp.where(dones, 0, lengths),
    )
    return runner, (transition, log)

  runner, (batch, log) = jax.lax.scan(
    step, runner, jax.random.split(key, num_steps)
  )
  return runner, batch, log


def bootstrap_value(network: Network, params: Any, runner: Runner):
  """`(E,)` the critic's value of the step after the rollout."""
  return _advance(network, params, runner)[3]


def replay(
  network: Network,
  params: Any,
  initial_core_state: Any,
  inputs: jax.Array,
  starts: jax.Array,
) -> tuple[jax.Array, jax.Array]:
  """The rollout's policy outputs `(T, B, num_outputs)` and values
  `(T, B)` under `params`, recomputed from the recorded inputs through
  the core from `initial_core_state` (`(B, ...)`, the state before the
  rollout's first step), reset where `starts`: differentiable, BPTT
  through the whole rollout."""
  cell_params = params.get("cell")

  def step(states, xs):
    x, start = xs
    states = _reset_and_step_batch(network, cell_params, states, x, start)
    return states, heads_of_states(network, params, states)

  _, (outs, values) = jax.lax.scan(step, initial_core_state, (inputs, starts))
  return outs, values


__all__ = [
  "EpisodeLog",
  "Rollout",
  "Runner",
  "bootstrap_value",
  "core_input",
  "initial_runner",
  "replay",
  "reset_and_step",
  "rollout",
]
