"""PPO's optimisation of one rollout: `update_epochs` shuffled passes of
minibatches of whole environment sequences, each a gradient of the loss
(BPTT through the sequences, `ppo_loss.py`), clipped by its global norm,
Adam's direction, the (annealed) learning rate applied after, so that it
can live in the run's state, traced and vmapped."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from rtrl import optim
from rtrl.rl.ppo_config import PPOConfig
from rtrl.rl.ppo_loss import LossHyperparams
from rtrl.rl.ppo_loss import Minibatch
from rtrl.rl.ppo_loss import ppo_loss


def split_minibatches(batch: Minibatch, key, num_minibatches: int):
  """`batch`'s environments shuffled and split into `num_minibatches`
  minibatches of whole sequences (a leading minibatch axis)."""
  num_envs = batch.advantages.shape[1]
  order = jax.random.permutation(key, num_envs)
  size = num_envs // num_minibatches

  def env_major(x):  # (E, ...) -> (M, E / M, ...)
    x = jnp.take(x, order, axis=0)
    return x.reshape((num_minibatches, size) + x.shape[1:])

  def time_major(x):  # (T, E, ...) -> (M, T, E / M, ...)
    x = jnp.take(x, order, axis=1)
    x = x.reshape((x.shape[0], num_minibatches, size) + x.shape[2:])
    return jnp.moveaxis(x, 1, 0)

  initial = jax.tree_util.tree_map(env_major, batch.initial_core_state)
  rest = jax.tree_util.tree_map(
    time_major, (batch.rollout, batch.advantages, batch.targets)
  )
  return Minibatch(initial, *rest)


def make_optimizer(config: PPOConfig, cell) -> optax.GradientTransformation:
  """Clipping and Adam's direction; the learning rate is applied after
  (so that it can live in the state, traced)."""
  clip = (
    optax.identity()
    if config.max_grad_norm is None
    else optax.clip_by_global_norm(config.max_grad_norm)
  )
  direction = optax.chain(clip, optax.scale_by_adam(eps=config.adam_eps))
  return optim.keep_recurrent_mask(direction, cell)


def annealed(config: PPOConfig, learning_rate, updates):
  """purejaxrl's linear decay to 0 over `anneal_updates` updates."""
  if config.anneal_updates is None:
    return learning_rate
  frac = 1.0 - updates.astype(learning_rate.dtype) / config.anneal_updates
  return learning_rate * jnp.maximum(frac, 0.0)


def loss_hyperparams(config: PPOConfig) -> LossHyperparams:
  """The loss's part of `config`."""
  return LossHyperparams(
    clip_eps=config.clip_eps,
    value_coef=config.value_coef,
    entropy_coef=config.entropy_coef,
    clip_value=config.clip_value,
    normalize_advantages=config.normalize_advantages,
  )


def run_epochs(network, config, optimizer, params, opt_state, batch, key, lr):
  """`update_epochs` shuffled passes of minibatch steps over `batch` (a
  whole rollout's `Minibatch`) at learning rate `lr`.

  Returns:
    `(params, opt_state, LossMetrics averaged over the steps, the mean
    global gradient norm before clipping)`.
  """
  hp = loss_hyperparams(config)

  def minibatch_step(carry, minibatch):
    params, opt_state = carry
    grad_fn = jax.value_and_grad(
      lambda p: ppo_loss(network, p, minibatch, hp), has_aux=True
    )
    (_, metrics), grads = grad_fn(params)
    direction, opt_state = optimizer.update(grads, opt_state, params)
    step = jax.tree_util.tree_map(lambda d: -lr * d, direction)
    params = optax.apply_updates(params, step)
    return (params, opt_state), (metrics, optax.global_norm(grads))

  def epoch(carry, key):
    minibatches = split_minibatches(batch, key, config.num_minibatches)
    return jax.lax.scan(minibatch_step, carry, minibatches)

  keys = jax.random.split(key, config.update_epochs)
  (params, opt_state), (metrics, norms) = jax.lax.scan(
    epoch, (params, opt_state), keys
  )
  metrics = jax.tree_util.tree_map(jnp.mean, metrics)
  return params, opt_state, metrics, jnp.mean(norms)


__all__ = [
  "annealed",
  "loss_hyperparams",
  "make_optimizer",
  "run_epochs",
  "split_minibatches",
]
