"""The environment contract of the online agents: a JAX environment as a
NamedTuple of pure functions, gymnax's step with its auto-reset built in.

`reset(key) -> (obs, state)` and `step(key, state, action) -> (obs, state,
reward, done)`, one environment (vmap for many); when `done`, `obs` and
`state` are already the next episode's first (gymnax's `Environment.step`
semantics), so a run is one `lax.scan` with no host in the loop. The
parameters of a gymnax environment are bound into the functions
(`from_gymnax`), so an `Environment` is everything a run needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class DiscreteActions(NamedTuple):
  """Actions `0 .. num_actions - 1` (an int32 scalar per step)."""

  num_actions: int


class BoxActions(NamedTuple):
  """Continuous actions: a float `(size,)` vector in `[low, high]`."""

  size: int
  low: float = -1.0
  high: float = 1.0


ActionSpace = DiscreteActions | BoxActions


class Environment(NamedTuple):
  """A JAX environment, pure functions (jit, vmap and scan them freely).

  Attributes:
    reset: `key -> (obs (observation_size,), state)`.
    step: `(key, state, action) -> (obs, state, reward (), done ())`,
      resetting itself when `done` (obs and state are then the next
      episode's first); `reward` float32, `done` bool.
    observation_size: the length of `obs`.
    actions: `DiscreteActions` or `BoxActions`.
    name: for logs and errors.
    max_episode_steps: the time limit (an episode is cut there, `done`).
  """

  reset: Callable[[jax.Array], tuple[jax.Array, Any]]
  step: Callable[..., tuple[jax.Array, Any, jax.Array, jax.Array]]
  observation_size: int
  actions: ActionSpace
  name: str
  max_episode_steps: int


def masked(env: Environment, keep: Any, name: str | None = None) -> Environment:
  """`env` observed only at the entries `keep` of its observation (RTRRL's
  partial observability: e.g. CartPole's positions or velocities hidden).

  Args:
    env: any `Environment`.
    keep: the indices of the observation entries the agent sees (distinct,
      in range, at least one).
    name: the new environment's name; None: `env.name` with the kept
      indices.

  Raises:
    ValueError: an empty `keep` (a mask that hides everything), an index
      out of range, or a repeated index.
  """
  indices = np.asarray(keep).reshape(-1)
  if indices.size == 0:
    raise ValueError(
      f"keep must name at least one of the {env.observation_size} "
      f"observation entries of {env.name}: a mask that hides everything "
      f"leaves the agent nothing to act on"
    )
  if not np.issubdtype(indices.dtype, np.integer):
    raise ValueError(f"keep must hold integer indices, got {keep!r}")
  if indices.min() < 0 or indices.max() >= env.observation_size:
    raise ValueError(
      f"keep must hold indices in [0, {env.observation_size}) for "
      f"{env.name}, got {indices.tolist()}"
    )
  if len(set(indices.tolist())) != indices.size:
    raise ValueError(f"keep must not repeat an index, got {indices.tolist()}")
  index = jnp.asarray(indices)

  def reset(key):
    obs, state = env.reset(key)
    return obs[index], state

  def step(key, state, action):
    obs, state, reward, done = env.step(key, state, action)
    return obs[index], state, reward, done

  return env._replace(
    reset=reset,
    step=step,
    observation_size=int(indices.size),
    name=name or f"{env.name}[obs {indices.tolist()}]",
  )


__all__ = [
  "ActionSpace",
  "BoxActions",
  "DiscreteActions",
  "Environment",
  "masked",
]
