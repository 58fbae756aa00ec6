"""Online recurrent reinforcement learning: agents whose recurrent core
learns by any estimator of `rtrl.estimators`, one update per environment
step (Lemmel & Grosu, "Real-Time Recurrent Reinforcement Learning", AAAI
2025), and the baselines they are compared with.

Modules: `envs` (the `Environment` contract, gymnax and POPGym tasks),
`policies` (action distributions), `network` (the recurrent actor-critic
network shared by every agent).
"""

from rtrl.rl import envs
from rtrl.rl import network
from rtrl.rl import policies
from rtrl.rl.network import Network
from rtrl.rl.network import actor_critic_network

__all__ = [
  "Network",
  "actor_critic_network",
  "envs",
  "network",
  "policies",
]
