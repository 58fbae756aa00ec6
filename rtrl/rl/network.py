"""The recurrent actor-critic network of RTRRL (Lemmel & Grosu 2025): a
recurrent core fed `[observation, previous action, previous reward]`, and
linear actor and critic heads reading its hidden vector.

    x_t = [o_t, enc(a_{t-1}), r_t]          (zeros for a_{t-1}, r_t at an
    state_t = cell.step(W, state_{t-1}, x_t)  episode's first step)
    h_t = cell.output(state_t)
    policy_t = actor(h_t),  v_t = critic(h_t)

`enc` is one-hot for discrete actions and the action itself for continuous
ones. Without a cell (`cell=None`) the heads read `x_t` directly: the
memoryless linear actor-critic of RTRRL's "Linear TD(λ)" column.

Params: `{'cell': the cell's params (absent without a cell), 'actor':
{'w', 'b'}, 'critic': {'w', 'b'}}` (plus a fixed `'feedback'` matrix in
each head under feedback alignment, `rtrl.readout.feedback_alignment`,
which RTRRL's RFLO agent uses: the error reaches the core through fixed
random matrices, not the heads' weights). Both the online agent
(`actor_critic.py`) and PPO (`ppo.py`) use this network, so the two are
compared with the same network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl import readout as readout_lib
from rtrl.rl import policies
from rtrl.rl.envs.base import Environment


class Network(NamedTuple):
  """The actor-critic network, pure functions (per example; vmap).

  Attributes:
    cell: the recurrent core (any cell of `rtrl.cells`), or None.
    policy: the action distribution (`rtrl.rl.policies`).
    input_size: the length of the core's input `x`
      (`observation_size + policy.action_input_size + 1`; the observation's
      alone without the Meta-RL input).
    feature_size: the length of the heads' input (`cell.output`'s, or
      `input_size` without a cell).
    init: `key -> params`.
    core_input: `(obs, previous_action, previous_reward) -> x`.
    initial_state: `() -> state`, the core's state at an episode start
      (an empty tuple without a cell).
    core_step: `(cell_params, state, x) -> state`: `cell.step` (the
      identity's `x` without a cell, kept as the state).
    features: `state -> h`, the heads' input.
    heads: `(params, h) -> (policy_output, value ())`.
  """

  cell: Any
  policy: policies.Policy
  input_size: int
  feature_size: int
  init: Callable[[jax.Array], dict]
  core_input: Callable[..., jax.Array]
  initial_state: Callable[[], Any]
  core_step: Callable[..., Any]
  features: Callable[[Any], jax.Array]
  heads: Callable[..., tuple[jax.Array, jax.Array]]


def _feature_size(cell, input_size: int) -> int:
  if cell is None:
    return input_size
  state = cell.initial_state()
  return int(cell.output(state).shape[0])


def actor_critic_network(
  env: Environment,
  cell: Any = None,
  *,
  feedback_alignment: bool = False,
  meta_rl: bool = True,
) -> Network:
  """The network for `env`'s observations and actions.

  Args:
    env: the `rtrl.rl.envs.Environment` (its sizes and action space).
    cell: the recurrent core, any cell of `rtrl.cells` (a Lemma-1 `Cell`,
      `CTRNN`, `LRU`, `CustomCell`), or None for the memoryless linear
      agent.
    feedback_alignment: the heads send the error to the core through
      fixed random matrices (`rtrl.readout.feedback_alignment`), RTRRL's
      RFLO agent; False: exact backpropagation through the heads.
    meta_rl: the core also reads the previous action and reward (RTRRL's
      Meta-RL input, its default); False: the observation alone (RTRRL's
      `meta_rl=False` ablation). Note that an agent that sees its own
      previous action can carry information through its actions even
      without a cell.

  Returns:
    The `Network`.
  """
  policy = policies.for_actions(env.actions)
  input_size = env.observation_size + (
    policy.action_input_size + 1 if meta_rl else 0
  )
  feature_size = _feature_size(cell, input_size)
  head = (
    readout_lib.feedback_alignment()
    if feedback_alignment
    else readout_lib.linear()
  )

  def init(key):
    cell_key, actor_key, critic_key = jax.random.split(key, 3)
    params = {
      "actor": head.init(actor_key, feature_size, policy.num_outputs),
      "critic": head.init(critic_key, feature_size, 1),
    }
    if cell is not None:
      params["cell"] = cell.init(cell_key, input_size)
    return params

  def core_input(obs, previous_action, previous_reward):
    dtype = jnp.asarray(0.0).dtype
    if not meta_rl:
      return jnp.reshape(obs, (-1,)).astype(dtype)
    return jnp.concatenate(
      [
        jnp.reshape(obs, (-1,)).astype(dtype),
        policy.encode(previous_action).astype(dtype),
        jnp.reshape(previous_reward, (1,)).astype(dtype),
      ]
    )

  def initial_state():
    if cell is None:
      return jnp.zeros((input_size,), jnp.asarray(0.0).dtype)
    return cell.initial_state()

  def core_step(cell_params, state, x):
    if cell is None:
      return x  # the memoryless agent's "state" is its input
    return cell.step(cell_params, state, x)

  def features(state):
    return state if cell is None else cell.output(state)

  def heads(params, h):
    out = head.apply(params["actor"], h)
    value = head.apply(params["critic"], h)[0]
    return out, value

  return Network(
    cell=cell,
    policy=policy,
    input_size=input_size,
    feature_size=feature_size,
    init=init,
    core_input=core_input,
    initial_state=initial_state,
    core_step=core_step,
    features=features,
    heads=heads,
  )


__all__ = ["Network", "actor_critic_network"]
