"""The RL experiment's methods behind one interface: the online agent with
any estimator (`rtrl.rl.online_actor_critic`), its memoryless linear
twin, and PPO trained by BPTT over rollouts (`rtrl.rl.ppo`).

A `Method` advances a run by `env_steps_per_call` environment steps (summed
over its parallel environments) per `train` call and reports the episodes
that ended in that time, so every method is logged, evaluated and given
its budget in the same unit: environment steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from experiments.online import setup as online_setup
from rtrl import cells
from rtrl import rl
from rtrl.estimators import truncated_bptt
from rtrl.rl import actor_critic
from rtrl.rl import ppo as rl_ppo

NON_ESTIMATORS = ("linear", "ppo")
# Online TBPTT-T (rtrl.estimators.truncated_bptt), `truncation` steps back.
WINDOW_ESTIMATORS = ("tbptt",)


class ChunkMetrics(NamedTuple):
  """Summed over a `train` call's steps and environments."""

  episodes: jax.Array
  return_sum: jax.Array
  length_sum: jax.Array
  env_steps: jax.Array


class Method(NamedTuple):
  """One way of training the network on the environment.

  Attributes:
    name: for logs.
    network: the `rtrl.rl.Network` it trains (evaluated by the experiment).
    init: `(key, learning_rate) -> state`.
    train: `(state, learning_rate) -> (state, ChunkMetrics)`, jittable,
      `env_steps_per_call` environment steps.
    params: `state -> params` of the network.
    env_steps_per_call: environment steps per `train` call.
  """

  name: str
  network: rl.Network
  init: Callable[..., Any]
  train: Callable[..., tuple[Any, ChunkMetrics]]
  params: Callable[[Any], dict]
  env_steps_per_call: int


def make_env(config) -> rl.envs.Environment:
  """`config.env` with its parameters (`memory_length` for MemoryChain)."""
  env_params = {}
  if config.env.startswith("MemoryChain"):
    env_params["memory_length"] = config.memory_length
  try:
    return rl.envs.make(config.env, **env_params)
  except ValueError as error:
    raise ValueError(f"config.env: {error}") from None


def make_cell(config):
  """The core: `config.cell` with `config.hidden_size` units (a CT-RNN's
  time constants from `tau_min`, `tau_max`, `tau_seed`; a sparse
  recurrence from `recurrent_density`, `mask_seed`)."""
  options: dict[str, Any] = {}
  if config.cell != "lru" and config.recurrent_density != 1.0:
    options.update(
      recurrent_density=config.recurrent_density, mask_seed=config.mask_seed
    )
  if config.cell == "ctrnn":
    options.update(
      tau_min=config.tau_min, tau_max=config.tau_max, tau_seed=config.tau_seed
    )
  try:
    return cells.make(config.cell, config.hidden_size, **options)
  except ValueError as error:
    raise ValueError(f"config: {error}") from None


def uses_feedback_alignment(config) -> bool:
  """`config.feedback_alignment`, or RTRRL's choice where it is 'auto':
  on for RFLO (its biologically plausible agent), off otherwise."""
  if config.feedback_alignment == "auto":
    return config.estimator == "rflo"
  return bool(config.feedback_alignment)


def chunk_metrics(info) -> ChunkMetrics:
  """`ChunkMetrics` of a stack of `rtrl.rl.StepInfo`s."""
  return ChunkMetrics(
    episodes=jnp.sum(info.done.astype(jnp.int32)),
    return_sum=jnp.sum(info.episode_return),
    length_sum=jnp.sum(info.episode_length),
    env_steps=jnp.asarray(info.reward.size, jnp.int32),
  )


def online_method(config, env) -> Method:
  """RTRRL's online agent (`config.estimator` a registered estimator) or
  the memoryless linear agent (`config.estimator='linear'`)."""
  linear = config.estimator == "linear"
  cell = None if linear else make_cell(config)
  if linear:
    estimator = None
  elif config.estimator == "tbptt":
    estimator = truncated_bptt(cell, config.truncation)
  else:
    estimator = online_setup.make_estimator(config, cell)

  def agent(learning_rate):
    optimizer = actor_critic.rtrrl_optimizer(
      learning_rate,
      learning_rate * config.core_learning_rate_factor,
      config.max_grad_norm or None,
    )
    return actor_critic.online_actor_critic(
      env,
      cell,
      estimator,
      optimizer,
      gamma=config.gamma,
      trace_decay=rl.TraceDecay(
        config.lambda_actor, config.lambda_critic, config.lambda_core
      ),
      entropy_rate=config.entropy_rate,
      actor_trace_scale=config.actor_trace_scale,
      feedback_alignment=uses_feedback_alignment(config),
      meta_rl=config.meta_rl,
    )

  agent_steps = config.chunk_steps // config.num_envs

  def train(state, learning_rate):
    state, info = agent(learning_rate).run(state, agent_steps)
    return state, chunk_metrics(info)

  return Method(
    name="linear TD(λ)" if linear else f"RTRRL, {estimator.implementation}",
    network=agent(1.0).network,
    init=lambda key, learning_rate: agent(learning_rate).init(
      key, config.num_envs
    ),
    train=train,
    params=lambda state: state.params,
    env_steps_per_call=config.chunk_steps,
  )


def ppo_method(config, env) -> Method:
  """PPO with the same network trained by BPTT over rollouts
  (`rtrl.rl.ppo.recurrent_ppo`, the `ppo_*` fields), `chunk_steps //
  (ppo_num_envs * ppo_rollout_steps)` updates per `train` call."""
  cell = make_cell(config)
  ppo = rl_ppo.recurrent_ppo(
    env,
    cell,
    num_envs=config.ppo_num_envs,
    rollout_steps=config.ppo_rollout_steps,
    num_minibatches=config.ppo_num_minibatches,
    update_epochs=config.ppo_update_epochs,
    gamma=config.gamma,
    gae_lambda=config.ppo_gae_lambda,
    clip_eps=config.ppo_clip_eps,
    value_coef=config.ppo_value_coef,
    entropy_coef=config.ppo_entropy_coef,
    max_grad_norm=config.ppo_max_grad_norm or None,
    learning_rate=config.learning_rate,
    network=rl.actor_critic_network(env, cell, meta_rl=config.meta_rl),
  )
  settings = ppo.config  # the PPOConfig, not the experiment's config
  steps_per_update = settings.num_envs * settings.rollout_steps
  if config.chunk_steps % steps_per_update:
    raise ValueError(
      f"config.chunk_steps must be a multiple of ppo_num_envs x "
      f"ppo_rollout_steps = {steps_per_update} (whole updates per chunk), "
      f"got {config.chunk_steps}"
    )
  updates = config.chunk_steps // steps_per_update

  def train(state, learning_rate):
    del learning_rate  # in the state since init
    state, metrics = ppo.run(state, updates)
    episodes = metrics.episodes
    return state, ChunkMetrics(
      episodes=jnp.sum(episodes.ended.astype(jnp.int32)),
      return_sum=jnp.sum(jnp.where(episodes.ended, episodes.returns, 0.0)),
      length_sum=jnp.sum(jnp.where(episodes.ended, episodes.lengths, 0)),
      env_steps=jnp.asarray(updates * steps_per_update, jnp.int32),
    )

  return Method(
    name="PPO (BPTT over rollouts)",
    network=ppo.network,
    init=lambda key, learning_rate: ppo.init(key, learning_rate),
    train=train,
    params=lambda state: state.params,
    env_steps_per_call=config.chunk_steps,
  )


def make_method(config, env) -> Method:
  """The method `config.estimator` names."""
  if config.estimator == "ppo":
    return ppo_method(config, env)
  return online_method(config, env)


__all__ = [
  "ChunkMetrics",
  "Method",
  "NON_ESTIMATORS",
  "chunk_metrics",
  "make_cell",
  "make_env",
  "make_method",
  "online_method",
  "uses_feedback_alignment",
]
