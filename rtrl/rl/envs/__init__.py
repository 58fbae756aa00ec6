"""Environments for online recurrent agents: the `Environment` contract
(`base.py`), gymnax's environments (`gymnax_envs.py`) and `make(name,
**params)`.

Names: any gymnax name ('MemoryChain-bsuite' with `memory_length`,
'CartPole-v1', ...), and 'CartPole-v1-velocities-hidden' /
'CartPole-v1-positions-hidden' (RTRRL's partially observed CartPoles).
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
from rtrl.rl.envs.gymnax_envs import masked_gymnax_env


def make(name: str, **env_params: Any) -> Environment:
  """An environment by name (see the module docstring), its parameters set
  from `env_params`.

  Raises:
    ValueError: an unknown name or parameter, naming what is known.
  """
  if not isinstance(name, str):
    raise ValueError(f"env must be an environment name, got {name!r}")
  if name in MASKED:
    return masked_gymnax_env(name, **env_params)
  return gymnax_env(name, **env_params)


__all__ = [
  "ActionSpace",
  "BoxActions",
  "DiscreteActions",
  "Environment",
  "from_gymnax",
  "make",
  "masked",
]
