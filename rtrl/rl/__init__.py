"""Online recurrent reinforcement learning: agents whose recurrent core
learns by any estimator of `rtrl.estimators`, one update per environment
step (Lemmel & Grosu, "Real-Time Recurrent Reinforcement Learning", AAAI
2025), and the baselines they are compared with.

    import rtrl
    from rtrl import rl
    env = rl.envs.make("MemoryChain-bsuite", memory_length=16)
    cell = rtrl.cells.CTRNN(32)
    agent = rl.online_actor_critic(env, cell, rtrl.estimators.ok(cell, rank=4))
    state = agent.init(key, num_envs=1)
    state, info = agent.run(state, 10_000)   # one jitted lax.scan

Modules: `envs` (the `Environment` contract, gymnax and POPGym tasks),
`policies` (action distributions), `network` (the recurrent actor-critic
network shared by every agent), `actor_critic` (RTRRL's online agent,
`online_actor_critic`), `traces` (eligibility traces), `evaluation`
(RTRRL's evaluation protocol), `ppo` (PPO with the same network trained
by BPTT over rollouts, `recurrent_ppo`: the offline baseline).
"""

from rtrl.rl import actor_critic
from rtrl.rl import envs
from rtrl.rl import evaluation
from rtrl.rl import network
from rtrl.rl import policies
from rtrl.rl import ppo
from rtrl.rl import traces
from rtrl.rl.actor_critic import AgentState
from rtrl.rl.actor_critic import OnlineAgent
from rtrl.rl.actor_critic import StepInfo
from rtrl.rl.actor_critic import online_actor_critic
from rtrl.rl.actor_critic import rtrrl_optimizer
from rtrl.rl.evaluation import evaluate
from rtrl.rl.network import Network
from rtrl.rl.network import actor_critic_network
from rtrl.rl.ppo import recurrent_ppo
from rtrl.rl.traces import TraceDecay

__all__ = [
  "AgentState",
  "Network",
  "OnlineAgent",
  "StepInfo",
  "TraceDecay",
  "actor_critic",
  "actor_critic_network",
  "envs",
  "evaluate",
  "evaluation",
  "network",
  "online_actor_critic",
  "policies",
  "ppo",
  "recurrent_ppo",
  "rtrrl_optimizer",
  "traces",
]
