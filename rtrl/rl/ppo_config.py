"""Recurrent PPO's hyper-parameters as data (`PPOConfig`) and their checks:
a bad value is a ValueError naming the argument and what it must be."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from rtrl import validation


class PPOConfig(NamedTuple):
  """The hyper-parameters of `rtrl.rl.ppo.recurrent_ppo` (see there)."""

  num_envs: int
  rollout_steps: int
  num_minibatches: int
  update_epochs: int
  gamma: float
  gae_lambda: float
  clip_eps: float
  value_coef: float
  entropy_coef: float
  max_grad_norm: float | None
  learning_rate: Any
  adam_eps: float
  anneal_updates: int | None
  clip_value: bool
  normalize_advantages: bool

  @property
  def steps_per_update(self) -> int:
    """Environment steps per update (`rollout_steps * num_envs`)."""
    return self.rollout_steps * self.num_envs


def _number(name: str, value: Any) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise ValueError(f"{name} must be a real number, got {value!r}")
  return float(value)


def _nonnegative(name: str, value: Any) -> float:
  if not _number(name, value) >= 0:
    raise ValueError(f"{name} must be a number >= 0, got {value!r}")
  return float(value)


def check_learning_rate(name: str, value: Any) -> Any:
  """A positive Python number, or a scalar array (a traced learning rate
  of a vmapped sweep cannot be checked and passes as it is)."""
  if isinstance(value, jax.Array) or hasattr(value, "shape"):
    if getattr(value, "shape", ()) != ():
      raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
    return value
  return validation.positive_number(name, value)


def check_config(config: PPOConfig) -> PPOConfig:
  """`config` if every field is valid, else a ValueError naming the field.

  Sizes are positive integers, `num_minibatches` divides `num_envs`,
  `gamma` is in (0, 1], `gae_lambda` in [0, 1], `clip_eps`, `adam_eps`
  and `max_grad_norm` (unless None: no clipping) are > 0, the loss
  coefficients >= 0, `anneal_updates` None or a positive integer.
  """
  for name in ("num_envs", "rollout_steps", "num_minibatches"):
    validation.positive_int(name, getattr(config, name))
  validation.positive_int("update_epochs", config.update_epochs)
  if config.num_envs % config.num_minibatches:
    raise ValueError(
      f"num_minibatches must divide num_envs (minibatches hold whole "
      f"environment sequences), got num_minibatches="
      f"{config.num_minibatches} and num_envs={config.num_envs}"
    )
  if not 0.0 < _number("gamma", config.gamma) <= 1.0:
    raise ValueError(f"gamma must be in (0, 1], got {config.gamma!r}")
  if not 0.0 <= _number("gae_lambda", config.gae_lambda) <= 1.0:
    raise ValueError(f"gae_lambda must be in [0, 1], got {config.gae_lambda!r}")
  validation.positive_number("clip_eps", config.clip_eps)
  validation.positive_number("adam_eps", config.adam_eps)
  _nonnegative("value_coef", config.value_coef)
  _nonnegative("entropy_coef", config.entropy_coef)
  if config.max_grad_norm is not None:
    validation.positive_number("max_grad_norm", config.max_grad_norm)
  if config.anneal_updates is not None:
    validation.positive_int("anneal_updates", config.anneal_updates)
  check_learning_rate("learning_rate", config.learning_rate)
  for name in ("clip_value", "normalize_advantages"):
    if not isinstance(getattr(config, name), bool):
      raise ValueError(
        f"{name} must be True or False, got {getattr(config, name)!r}"
      )
  return config


__all__ = ["PPOConfig", "check_config", "check_learning_rate"]
