"""Recurrent PPO, the BPTT baseline of the online agents: PPO (Schulman et
al., "Proximal Policy Optimization Algorithms", 2017) with the recurrent
actor-critic network of `rtrl.rl.network` trained by backpropagation
through each whole rollout, in the pattern of purejaxrl's PPO-RNN (Lu et
al., "Discovered Policy Optimisation", NeurIPS 2022): a run is one
`lax.scan` of updates, vmappable over seeds and learning rates.

One update: a rollout of `rollout_steps` steps in each of `num_envs`
auto-resetting environments (the core carried across rollouts and reset
at episode starts), GAE, then `update_epochs` passes over the rollout in
`num_minibatches` minibatches of whole environment sequences, each replayed
from its stored initial core state by BPTT (`ppo_loss.py`), with global-norm
gradient clipping and Adam.

Files: `ppo_config.py` (hyper-parameters, checks), `ppo_rollout.py`
(rollouts, the BPTT replay), `gae.py`, `ppo_loss.py` (the clipped
objective), `ppo_epochs.py` (minibatches, clipping, Adam).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl.rl.envs.base import Environment
from rtrl.rl.gae import gae
from rtrl.rl.network import Network
from rtrl.rl.network import actor_critic_network
from rtrl.rl.ppo_config import PPOConfig
from rtrl.rl.ppo_config import check_config
from rtrl.rl.ppo_config import check_learning_rate
from rtrl.rl.ppo_epochs import annealed
from rtrl.rl.ppo_epochs import make_optimizer
from rtrl.rl.ppo_epochs import run_epochs
from rtrl.rl.ppo_loss import LossMetrics
from rtrl.rl.ppo_loss import Minibatch
from rtrl.rl.ppo_rollout import EpisodeLog
from rtrl.rl.ppo_rollout import Runner
from rtrl.rl.ppo_rollout import bootstrap_value
from rtrl.rl.ppo_rollout import initial_runner
from rtrl.rl.ppo_rollout import rollout


class PPOState(NamedTuple):
  """Everything a run carries (vmap it over seeds and learning rates).

  Attributes:
    params: the network's params.
    opt_state: the optimiser's state (gradient clipping, Adam).
    runner: the environments and the core's states (`ppo_rollout.Runner`).
    key: the PRNG key of the next update.
    learning_rate: `()` Adam's learning rate before annealing.
    updates: `()` int32, updates done.
    env_steps: `()` int32, environment steps taken (all environments).
  """

  params: Any
  opt_state: Any
  runner: Runner
  key: jax.Array
  learning_rate: jax.Array
  updates: jax.Array
  env_steps: jax.Array


class PPOMetrics(NamedTuple):
  """One update's record.

  Attributes:
    episodes: the episodes that ended during the rollout (`(T, E)`
      `EpisodeLog`: ended flags, returns, lengths).
    episode_return: `()` the mean return of those episodes; NaN when none
      ended.
    loss: the loss's scalars, averaged over epochs and minibatches.
    grad_norm: `()` the mean global gradient norm before clipping.
    learning_rate: `()` the learning rate of this update.
    env_steps: `()` environment steps after this update.
  """

  episodes: EpisodeLog
  episode_return: jax.Array
  loss: LossMetrics
  grad_norm: jax.Array
  learning_rate: jax.Array
  env_steps: jax.Array


class PPO(NamedTuple):
  """Recurrent PPO, pure functions.

  Attributes:
    init: `(key, learning_rate=None) -> PPOState` (None: the factory's).
    update: `state -> (state, PPOMetrics)`: one rollout and its epochs of
      minibatch updates (jittable, vmappable).
    run: `(state, num_updates) -> (state, PPOMetrics stacked over
      updates)`, a jitted `lax.scan` of `update` (`num_updates` static).
    network: the `Network` (evaluate with `rtrl.rl.evaluation.evaluate(
      ppo.network, env, state.params, key)`).
    config: the `PPOConfig`.
  """

  init: Any
  update: Any
  run: Any
  network: Network
  config: PPOConfig


def _nan_mean(values, mask):
  """The mean of `values` where `mask`; NaN where the mask is empty."""
  count = jnp.sum(mask)
  total = jnp.sum(jnp.where(mask, values, 0.0))
  return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def _init_fn(env, network, config: PPOConfig, optimizer):
  """`init(key, learning_rate=None) -> PPOState` of `recurrent_ppo`."""

  def init(key, learning_rate=None):
    rate = config.learning_rate if learning_rate is None else learning_rate
    check_learning_rate("learning_rate", rate)
    params_key, env_key, key = jax.random.split(key, 3)
    params = network.init(params_key)
    return PPOState(
      params=params,
      opt_state=optimizer.init(params),
      runner=initial_runner(network, env, env_key, config.num_envs),
      key=key,
      learning_rate=jnp.asarray(rate, jnp.asarray(0.0).dtype),
      updates=jnp.zeros((), jnp.int32),
      env_steps=jnp.zeros((), jnp.int32),
    )

  return init


def _update_fn(env, network, config: PPOConfig, optimizer):
  """`update(state) -> (state, PPOMetrics)` of `recurrent_ppo`: one rollout,
  GAE, then the epochs of minibatch updates."""

  def update(state: PPOState):
    key, rollout_key, epochs_key = jax.random.split(state.key, 3)
    params = state.params
    runner, batch, episodes = rollout(
      network, env, params, state.runner, rollout_key, config.rollout_steps
    )
    advantages, targets = gae(
      batch.rewards,
      batch.values,
      batch.dones,
      bootstrap_value(network, params, runner),
      config.gamma,
      config.gae_lambda,
    )
    minibatch = Minibatch(state.runner.core_state, batch, advantages, targets)
    lr = annealed(config, state.learning_rate, state.updates)
    params, opt_state, loss, grad_norm = run_epochs(
      network, config, optimizer, params, state.opt_state, minibatch,
      epochs_key, lr,
    )  # fmt: skip
    env_steps = state.env_steps + config.steps_per_update
    state = PPOState(
      params, opt_state, runner, key, state.learning_rate,
      state.updates + 1, env_steps,
    )  # fmt: skip
    metrics = PPOMetrics(
      episodes=episodes,
      episode_return=_nan_mean(episodes.returns, episodes.ended),
      loss=loss,
      grad_norm=grad_norm,
      learning_rate=lr,
      env_steps=env_steps,
    )
    return state, metrics

  return update


def recurrent_ppo(
  env: Environment,
  cell: Any = None,
  *,
  num_envs: int = 8,
  rollout_steps: int = 128,
  num_minibatches: int = 4,
  update_epochs: int = 4,
  gamma: float = 0.99,
  gae_lambda: float = 0.95,
  clip_eps: float = 0.2,
  value_coef: float = 0.5,
  entropy_coef: float = 0.01,
  max_grad_norm: float | None = 0.5,
  learning_rate: Any = 3e-3,
  adam_eps: float = 1e-5,
  anneal_updates: int | None = None,
  clip_value: bool = True,
  normalize_advantages: bool = True,
  network: Network | None = None,
) -> PPO:
  """PPO with a recurrent core trained by BPTT over each rollout.

  Schulman et al., "Proximal Policy Optimization Algorithms", 2017, in the
  pattern of purejaxrl's PPO-RNN (Lu et al., "Discovered Policy
  Optimisation", NeurIPS 2022): the same clipped surrogate, clipped value
  loss, GAE, per-minibatch advantage normalisation, global-norm clipping
  and Adam (eps 1e-5), minibatches of whole environment sequences replayed
  from the rollout's stored initial core states, the core reset at episode
  starts inside the replay. The network is RTRRL's (`actor_critic_network`:
  the core fed `[obs, previous action, previous reward]`, linear heads), the
  same as the online agents', so the two are compared on equal terms.

  Defaults: purejaxrl's PPO-RNN (gamma 0.99, GAE λ 0.95, clip 0.2, value
  coefficient 0.5, entropy 0.01, gradient norm 0.5, Adam eps 1e-5, 4
  epochs of 4 minibatches, 128-step rollouts), scaled to the CT-RNN-32
  with linear heads (RTRRL's appendix gives no PPO settings): 8
  environments (2 whole sequences per minibatch, 1024 steps per update),
  Adam 3e-3 without annealing: the one rate of 3e-4, 1e-3, 3e-3, 1e-2
  (2 seeds each) that solved both CartPole with its velocities hidden
  (500 within 1.5M steps; 3e-4 and 1e-3 did not) and MemoryChain-64
  (within 400k steps; 1e-2 did not).

  Args:
    env: the `rtrl.rl.envs.Environment`.
    cell: the recurrent core (any `rtrl.cells` cell, e.g.
      `rtrl.cells.CTRNN(32)`), or None for a memoryless agent.
    num_envs: parallel environments `E`.
    rollout_steps: steps `T` per environment per update (the BPTT length).
    num_minibatches: minibatches per epoch; each holds `E /
      num_minibatches` whole sequences (must divide `num_envs`).
    update_epochs: passes over each rollout.
    gamma: the discount, in (0, 1].
    gae_lambda: GAE's λ, in [0, 1].
    clip_eps: the ratio's (and the value's) clip range, > 0.
    value_coef: the value loss's weight.
    entropy_coef: the entropy bonus's weight.
    max_grad_norm: global-norm gradient clipping; None: none.
    learning_rate: Adam's; a Python number or a scalar (traced) array.
      `init(key, learning_rate)` overrides it per run (vmap a sweep).
    adam_eps: Adam's epsilon.
    anneal_updates: decay the learning rate linearly to 0 over this many
      updates (purejaxrl's `ANNEAL_LR` with its number of updates); None:
      constant.
    clip_value: clip the value loss as purejaxrl does.
    normalize_advantages: standardise the advantages per minibatch.
    network: a `Network` for `env` to use instead of
      `actor_critic_network(env, cell)` (e.g. with feedback alignment).

  Returns:
    The `PPO` (`init`, `update`, `run`, `network`, `config`).

  Raises:
    ValueError: a bad hyper-parameter (non-positive sizes, `num_minibatches`
      not dividing `num_envs`, `gamma` outside (0, 1], `clip_eps <= 0`,
      ...), named.
  """
  if not isinstance(env, Environment):
    raise ValueError(
      f"env must be an rtrl.rl.envs.Environment (rtrl.rl.envs.make(name))"
      f", got {type(env).__name__}"
    )
  config = check_config(
    PPOConfig(
      num_envs=num_envs,
      rollout_steps=rollout_steps,
      num_minibatches=num_minibatches,
      update_epochs=update_epochs,
      gamma=gamma,
      gae_lambda=gae_lambda,
      clip_eps=clip_eps,
      value_coef=value_coef,
      entropy_coef=entropy_coef,
      max_grad_norm=max_grad_norm,
      learning_rate=learning_rate,
      adam_eps=adam_eps,
      anneal_updates=anneal_updates,
      clip_value=clip_value,
      normalize_advantages=normalize_advantages,
    )
  )
  if network is None:
    network = actor_critic_network(env, cell)
  optimizer = make_optimizer(config, network.cell)

  init = _init_fn(env, network, config, optimizer)
  update = _update_fn(env, network, config, optimizer)

  def run(state: PPOState, num_updates: int):
    return jax.lax.scan(lambda s, _: update(s), state, None, num_updates)

  return PPO(
    init=init,
    update=update,
    run=jax.jit(run, static_argnums=1),
    network=network,
    config=config,
  )


__all__ = [
  "PPO",
  "PPOConfig",
  "PPOMetrics",
  "PPOState",
  "recurrent_ppo",
]
