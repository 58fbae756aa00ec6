"""Environments for online recurrent agents: the `Environment` contract
(`base.py`), gymnax's environments (`gymnax_envs.py`), POPGym's tasks
written in JAX (`popgym.py`) and `make(name, **params)`.

Names `make` knows:

- any gymnax name, e.g. 'MemoryChain-bsuite' (parameter `memory_length`,
  the issue's 4, 8, 16, 32, 64) or 'CartPole-v1';
- 'CartPole-v1-velocities-hidden' (observes `[x, theta]`) and
  'CartPole-v1-positions-hidden' (observes `[x_dot, theta_dot]`): RTRRL's
  partially observed CartPoles, gymnax's CartPole-v1 under `masked`;
- 'RepeatPreviousEasy', 'RepeatPreviousMedium', 'RepeatPreviousHard' and
  'RepeatPrevious' (parameters `num_decks`, `k`): POPGym's card-memory
  task, returns normalised to [-1, 1];
- 'StatelessCartPoleEasy', 'StatelessCartPoleMedium',
  'StatelessCartPoleHard' and 'StatelessCartPole' (parameter
  `max_episode_length`): POPGym's CartPole without velocities, returns
  normalised to at most 1.

Every environment auto-resets (gymnax's `step` semantics): when `done`, the
observation and state returned are the next episode's first.
"""

from __future__ import annotations

from typing import Any

from rtrl.rl.envs.base import ActionSpace
from rtrl.rl.envs.base import BoxActions
from rtrl.rl.envs.base import DiscreteActions
from rtrl.rl.envs.base import Environment
from rtrl.rl.envs.base import masked
from rtrl.rl.envs.gymnax_envs import MASKED
from rtrl.rl.envs.gymnax_envs import from_gymnax
from rtrl.rl.envs.gymnax_envs import gymnax_env
from rtrl.rl.envs.gymnax_envs import gymnax_names
from rtrl.rl.envs.gymnax_envs import masked_gymnax_env
from rtrl.rl.envs.popgym import POPGYM
from rtrl.rl.envs.popgym import CartPoleState
from rtrl.rl.envs.popgym import RepeatPreviousState
from rtrl.rl.envs.popgym import popgym_env
from rtrl.rl.envs.popgym import repeat_previous
from rtrl.rl.envs.popgym import stateless_cartpole
from rtrl.rl.envs.popgym import with_auto_reset


def make(name: str, **env_params: Any) -> Environment:
  """An environment by name (see the module docstring), its parameters set
  from `env_params`.

  Args:
    name: one of the names above.
    **env_params: the environment's parameters (e.g. `memory_length=16`
      for 'MemoryChain-bsuite', `k=8` for 'RepeatPrevious'); unset ones
      keep their defaults (a preset's for POPGym's Easy/Medium/Hard).

  Raises:
    ValueError: an unknown name or parameter, naming what is known, or a
      parameter value out of its range (e.g. `memory_length=0`).
  """
  if isinstance(name, str) and name in MASKED:
    return masked_gymnax_env(name, **env_params)
  if isinstance(name, str) and name in POPGYM:
    return popgym_env(name, **env_params)
  if not isinstance(name, str) or name not in gymnax_names():
    raise ValueError(
      f"name must be an environment name, got {name!r}; known: "
      f"{sorted(MASKED)}, POPGym's {sorted(POPGYM)} and gymnax's "
      f"{gymnax_names()}"
    )
  return gymnax_env(name, **env_params)


__all__ = [
  "ActionSpace",
  "BoxActions",
  "CartPoleState",
  "DiscreteActions",
  "Environment",
  "RepeatPreviousState",
  "from_gymnax",
  "make",
  "masked",
  "repeat_previous",
  "stateless_cartpole",
  "with_auto_reset",
]
