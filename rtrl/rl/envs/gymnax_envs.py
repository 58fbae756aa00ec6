"""gymnax environments (Lange 2022) as `Environment`s, and the registry of
environment names `make` knows.

gymnax is imported when a gymnax name is first asked for, so the library
imports without it; it is pinned in the `rl` extra (`pip install
.[rl]`), which the quick start and the test setup install.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from rtrl.rl.envs.base import BoxActions
from rtrl.rl.envs.base import DiscreteActions
from rtrl.rl.envs.base import Environment
from rtrl.rl.envs.base import masked

# CartPole-v1 observes [x, x_dot, theta, theta_dot]; RTRRL's "-pos" task
# keeps the positions (its `obs_mask="even"`), "-vel" the velocities.
CARTPOLE_POSITIONS = (0, 2)
CARTPOLE_VELOCITIES = (1, 3)
MASKED = {
  "CartPole-v1-velocities-hidden": ("CartPole-v1", CARTPOLE_POSITIONS),
  "CartPole-v1-positions-hidden": ("CartPole-v1", CARTPOLE_VELOCITIES),
}


def _gymnax():
  try:
    import gymnax  # pylint: disable=g-import-not-at-top
  except ImportError as error:  # pragma: no cover - depends on the install
    raise ImportError(
      "gymnax environments need the gymnax package: pip install "
      "'rtrl-rls[rl]' (or `bash scripts/setup_env.sh rl`)"
    ) from error
  return gymnax


def _action_space(space: Any):
  if hasattr(space, "n"):
    return DiscreteActions(num_actions=int(space.n))
  low = float(np.min(np.asarray(space.low)))
  high = float(np.max(np.asarray(space.high)))
  return BoxActions(size=int(np.prod(space.shape)), low=low, high=high)


def from_gymnax(env: Any, params: Any = None, name: str | None = None):
  """A gymnax environment and its parameters as an `Environment`.

  Args:
    env: a `gymnax.environments.environment.Environment`.
    params: its `EnvParams`; None: `env.default_params`.
    name: for logs; None: `env.name`.

  Returns:
    The `Environment`: observations flattened to a vector, rewards float32,
    gymnax's auto-reset; `done` is termination or the time limit, both
    ending the episode for the agent as in RTRRL and purejaxrl (no
    bootstrap from a cut episode's last state).
  """
  params = env.default_params if params is None else params

  def reset(key):
    obs, state = env.reset(key, params)
    return jnp.reshape(obs, (-1,)).astype(jnp.float32), state

  def step(key, state, action):
    # gymnax >= 1.0: (obs, state, reward, terminated, truncated, info).
    obs, state, reward, terminated, truncated, _ = env.step(
      key, state, action, params
    )
    return (
      jnp.reshape(obs, (-1,)).astype(jnp.float32),
      state,
      jnp.asarray(reward, jnp.float32),
      jnp.logical_or(terminated, truncated),
    )

  return Environment(
    reset=reset,
    step=step,
    observation_size=int(np.prod(env.observation_space(params).shape)),
    actions=_action_space(env.action_space(params)),
    name=name or env.name,
    max_episode_steps=int(params.max_steps_in_episode),
  )


def _with_fields(name: str, params: Any, fields: dict) -> Any:
  """`params` with `fields` replaced, each checked to be one of its fields."""
  known = [f.name for f in dataclasses.fields(params)]
  for field, value in fields.items():
    if field not in known:
      raise ValueError(
        f"{field!r} is not a parameter of {name}; its parameters are {known}"
      )
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise ValueError(f"{field} must be a number, got {value!r}")
    if isinstance(getattr(params, field), int) and value != int(value):
      raise ValueError(f"{field} must be an integer, got {value!r}")
  if "memory_length" in fields and not fields["memory_length"] >= 1:
    raise ValueError(
      f"memory_length must be an integer >= 1, got {fields['memory_length']!r}"
    )
  return params.replace(**fields)


def gymnax_names() -> list[str]:
  """The environment names gymnax registers (imports gymnax)."""
  return sorted(_gymnax().registered_envs)


def gymnax_env(name: str, **env_params: Any) -> Environment:
  """A gymnax environment by registered name, its `EnvParams` fields set
  from `env_params` (e.g. `memory_length=16` for 'MemoryChain-bsuite').

  Raises:
    ValueError: an unknown name, or a parameter the environment lacks.
  """
  gymnax = _gymnax()
  if name not in gymnax.registered_envs:
    raise ValueError(
      f"env must be a registered environment name, got {name!r}; gymnax "
      f"has {sorted(gymnax.registered_envs)}"
    )
  env, params = gymnax.make(name)
  return from_gymnax(env, _with_fields(name, params, env_params), name)


def masked_gymnax_env(name: str, **env_params: Any) -> Environment:
  """One of `MASKED` (CartPole with its velocities or positions hidden)."""
  base, keep = MASKED[name]
  return masked(gymnax_env(base, **env_params), keep, name)


__all__ = [
  "CARTPOLE_POSITIONS",
  "CARTPOLE_VELOCITIES",
  "MASKED",
  "from_gymnax",
  "gymnax_env",
  "gymnax_names",
  "masked_gymnax_env",
]
