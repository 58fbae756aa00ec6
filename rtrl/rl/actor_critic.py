"""RTRRL's online actor-critic (Lemmel & Grosu, "Real-Time Recurrent
Reinforcement Learning", AAAI 2025, Algorithm 2), with the core's gradient
from any estimator of `rtrl.estimators`.

One environment step, one update, no replay and no truncation. At step `t`
the environment takes the action chosen at `t-1` and returns `o_t, r_t`;
the core reads `x_t = [o_t, a_{t-1}, r_t]` (its state, tangent and traces
restart at an episode's first step); the heads give `π(·|h_t)` and `v_t`,
and `a_t ~ π(·|h_t)`. Then

    δ_t = r_t + γ v_t (1 - done_t) - v_{t-1}
    θ  += α (δ_t e_{t-1} + η_H ∇θ H(π(·|h_t)))         (Adam)
    e_C = γ λ_C e_C + ∇v_t,   e_A = γ λ_A e_A + ∇ log π(a_t|h_t)
    e_R = γ λ_R e_R + ∇_R [v_t + η_A log π(a_t|h_t)]

where `∇_R` of a function of `h_t` is the estimator's gradient
(`Estimator.gradient`) of its state gradient: exact for exact RTRL, an
approximation for r-OK, KF-RTRL, SnAp-n, RFLO, ... The entropy's core
gradient comes from the same estimator. With `feedback_alignment` the
heads send the error to the core through fixed random matrices (RTRRL's
RFLO agent); without a cell it is RTRRL's memoryless linear TD(λ).

Everything is one pure `lax.scan` (`run`), vmapped over `num_envs`
parallel environments inside (the update is their mean, as in RTRRL's
code) and over seeds and learning rates outside by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rtrl import optim
from rtrl.estimators import Estimator
from rtrl.rl import evaluation
from rtrl.rl import traces as traces_lib
from rtrl.rl.envs.base import Environment
from rtrl.rl.network import Network
from rtrl.rl.network import actor_critic_network
from rtrl.rl.traces import TraceDecay


class EnvCarry(NamedTuple):
  """One environment's part of the agent state (a leading `num_envs` axis
  in `AgentState.envs`).

  Attributes:
    env_state: the environment's state.
    core_state: the core's state after the last step (its input, without a
      cell).
    tstate: the estimator's state (its tangent and key); `()` without a
      cell.
    action: the action chosen at the last step, taken at the next.
    value: `v` of the last step.
    traces: the eligibility traces, the params' structure.
    episode_return, episode_length: of the episode in progress.
    key: this environment's PRNG key.
  """

  env_state: Any
  core_state: Any
  tstate: Any
  action: jax.Array
  value: jax.Array
  traces: dict
  episode_return: jax.Array
  episode_length: jax.Array
  key: jax.Array


class AgentState(NamedTuple):
  """Everything a run carries: `params`, `opt_state`, the environments'
  `EnvCarry` and `steps` (environment steps taken per environment)."""

  params: dict
  opt_state: Any
  envs: EnvCarry
  steps: jax.Array


class StepInfo(NamedTuple):
  """Per environment and step (a leading time axis from `run`).

  Attributes:
    reward, done: the environment's.
    episode_return, episode_length: of the episode that ended at this step
      (where `done`; 0 elsewhere).
    td_error: `δ_t`.
    value: `v_t`.
    entropy: `H(π(·|h_t))`.
  """

  reward: jax.Array
  done: jax.Array
  episode_return: jax.Array
  episode_length: jax.Array
  td_error: jax.Array
  value: jax.Array
  entropy: jax.Array


class StepGradients(NamedTuple):
  """What one step's forward pass gives the traces and the update.

  Attributes:
    trace: `{'critic': ∇v, 'actor': ∇ log π(a|h), 'cell': ∇_R [v + η_A log
      π(a|h)]}` (no `'cell'` without a cell).
    entropy: `∇ H(π(·|h))` in the same structure (0 for the critic).
  """

  trace: dict
  entropy: dict


class OnlineAgent(NamedTuple):
  """The online recurrent actor-critic, pure functions.

  Attributes:
    init: `(key, num_envs) -> AgentState`: fresh environments, parameters
      and traces, and the first action chosen.
    step: `AgentState -> (AgentState, StepInfo)`: one environment step and
      one update (jittable).
    run: `(AgentState, num_steps) -> (AgentState, StepInfo)`: `num_steps`
      steps in one jitted `lax.scan` (`num_steps` static), infos stacked
      `(num_steps, num_envs)`.
    evaluate: `(params, key, num_envs=10, num_steps=1000) -> ()`, RTRRL's
      evaluation (`rtrl.rl.evaluation.evaluate`).
    act: `(params, core_state, tstate, obs, previous_action, reward, reset,
      key) -> (core_state, tstate, action, value, entropy, StepGradients)`,
      one environment's forward pass and gradients (for tests and custom
      loops).
    network: the `Network`.
    estimator: the core's estimator (None without a cell).
  """

  init: Callable[..., AgentState]
  step: Callable[[AgentState], tuple[AgentState, StepInfo]]
  run: Callable[..., tuple[AgentState, StepInfo]]
  evaluate: Callable[..., jax.Array]
  act: Callable[..., Any]
  network: Network
  estimator: Estimator | None


# RTRRL's λ of the actor, the critic and the core (appendix Table 1).
RTRRL_TRACE_DECAY = TraceDecay(actor=0.99, critic=0.99, core=0.99)


def rtrrl_optimizer(
  learning_rate: Any = 1e-3,
  core_learning_rate: Any = None,
  max_grad_norm: float | None = None,
) -> optax.GradientTransformation:
  """RTRRL's optimiser: Adam for the heads (actor and critic) and for the
  core (RTRRL's two groups), optionally each with its update clipped by
  global norm `max_grad_norm`. Learning rates may be traced scalars
  (vmapped runs).

  No clipping by default, as RTRRL's code runs (its appendix lists a clip
  of 1.0): clipping each step's TD(λ) update breaks the balance TD(λ)
  relies on between many small updates and the rare large one at an
  episode's end (on CartPole a linear agent then collapses to a return of
  ~9, and MemoryChain-8 stays unsolved; docs/results/online_rl.md).

  Apply it to the negated ascent direction (`online_actor_critic` does).
  """

  def part(rate):
    adam = optax.adam(rate)
    if max_grad_norm is None:
      return adam
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), adam)

  core_rate = (
    learning_rate if core_learning_rate is None else core_learning_rate
  )
  return optax.multi_transform(
    {"heads": part(learning_rate), "core": part(core_rate)},
    lambda params: {k: "core" if k == "cell" else "heads" for k in params},
  )


def _tree_where(condition, fresh, current):
  return jax.tree_util.tree_map(
    lambda a, b: jnp.where(condition, a, b), fresh, current
  )


def _check_agent_args(cell, estimator, gamma, entropy_rate, actor_trace_scale):
  if (cell is None) != (estimator is None):
    raise ValueError(
      "estimator must be given exactly when cell is: an estimator of "
      "rtrl.estimators for the core's gradient, None for the memoryless "
      f"agent; got cell={cell!r}, estimator={estimator!r}"
    )
  if (
    isinstance(gamma, bool)
    or not isinstance(gamma, (int, float))
    or not 0.0 < gamma <= 1.0
  ):
    raise ValueError(f"gamma must be a number in (0, 1], got {gamma!r}")
  for name, value in (
    ("entropy_rate", entropy_rate),
    ("actor_trace_scale", actor_trace_scale),
  ):
    if (
      isinstance(value, bool)
      or not isinstance(value, (int, float))
      or not value >= 0
    ):
      raise ValueError(f"{name} must be a number >= 0, got {value!r}")


def make_act(network: Network, estimator, actor_trace_scale: float):
  """One environment's forward pass and gradients: `act(params, core_state,
  tstate, obs, previous_action, reward, reset, key) -> (core_state, tstate,
  action, value, entropy, StepGradients)`. Where `reset` (an episode's
  first step) the core state and the tangent restart and the previous
  action and reward read as zeros."""
  cell, policy = network.cell, network.policy

  def core(params, core_state, tstate, x, reset):
    core_state = _tree_where(reset, network.initial_state(), core_state)
    if cell is None:
      return x, tstate
    if estimator.folds_reset:
      tstate, core_state = estimator.step(params["cell"])(
        tstate, core_state, x, reset
      )
      return core_state, tstate
    tstate = _tree_where(reset, estimator.reset(tstate), tstate)
    tstate, core_state = estimator.step(params["cell"])(tstate, core_state, x)
    return core_state, tstate

  def core_gradient(params, core_state, tstate, dh):
    dstate = jax.vjp(cell.output, core_state)[1](dh)[0]
    return estimator.gradient(params["cell"], tstate, dstate)

  def act(params, core_state, tstate, obs, previous_action, reward, reset, key):
    previous_action = jnp.where(reset, policy.zero_action(), previous_action)
    x = network.core_input(obs, previous_action, jnp.where(reset, 0.0, reward))
    core_state, tstate = core(params, core_state, tstate, x, reset)
    heads = {"actor": params["actor"], "critic": params["critic"]}
    (out, value), pullback = jax.vjp(
      network.heads, heads, network.features(core_state)
    )
    action = policy.sample(key, out)
    zero_out, one = jnp.zeros_like(out), jnp.ones_like(value)
    d_value, dh_value = pullback((zero_out, one))
    d_log_p, dh_log_p = pullback(
      (jax.grad(policy.log_prob)(out, action), jnp.zeros_like(value))
    )
    d_entropy, dh_entropy = pullback(
      (jax.grad(policy.entropy)(out), jnp.zeros_like(value))
    )
    trace = {"actor": d_log_p["actor"], "critic": d_value["critic"]}
    entropy = {
      "actor": d_entropy["actor"],
      "critic": jax.tree_util.tree_map(jnp.zeros_like, d_entropy["critic"]),
    }
    if cell is not None:
      dh = dh_value + actor_trace_scale * dh_log_p
      trace["cell"] = core_gradient(params, core_state, tstate, dh)
      entropy["cell"] = core_gradient(params, core_state, tstate, dh_entropy)
    grads = StepGradients(trace=trace, entropy=entropy)
    return core_state, tstate, action, value, policy.entropy(out), grads

  return act


def make_transition(env: Environment, act, gamma, decay, entropy_rate):
  """One environment's step: `transition(params, carry) -> (carry, ascent,
  StepInfo)`, `ascent = δ e + η_H ∇H` its share of the update."""

  def transition(params, carry: EnvCarry):
    key, env_key, act_key = jax.random.split(carry.key, 3)
    obs, env_state, reward, done = env.step(
      env_key, carry.env_state, carry.action
    )
    core_state, tstate, action, value, entropy, grads = act(
      params,
      carry.core_state,
      carry.tstate,
      obs,
      carry.action,
      reward,
      done,
      act_key,
    )
    td_error = reward + gamma * value * (1.0 - done) - carry.value
    bonus = jax.tree_util.tree_map(lambda g: entropy_rate * g, grads.entropy)
    ascent = traces_lib.td_update(carry.traces, td_error, bonus)
    episode_return = carry.episode_return + reward
    episode_length = carry.episode_length + 1
    info = StepInfo(
      reward=reward,
      done=done,
      episode_return=jnp.where(done, episode_return, 0.0),
      episode_length=jnp.where(done, episode_length, 0),
      td_error=td_error,
      value=value,
      entropy=entropy,
    )
    carry = EnvCarry(
      env_state=env_state,
      core_state=core_state,
      tstate=tstate,
      action=action,
      value=value,
      traces=traces_lib.accumulate(
        carry.traces, grads.trace, gamma, decay, done
      ),
      episode_return=jnp.where(done, 0.0, episode_return),
      episode_length=jnp.where(done, 0, episode_length),
      key=key,
    )
    return carry, ascent, info

  return transition


def _first_carry(env, network, estimator, act, params, key):
  """One environment's carry at the start: reset, the core's first step on
  `[o_0, 0, 0]`, the first action, and traces holding the first step's
  gradients."""
  reset_key, tangent_key, act_key, key = jax.random.split(key, 4)
  obs, env_state = env.reset(reset_key)
  core_state = network.initial_state()
  tstate = (
    ()
    if estimator is None
    else estimator.init(params["cell"], core_state, tangent_key)
  )
  zero_action = network.policy.zero_action()
  core_state, tstate, action, value, _, grads = act(
    params, core_state, tstate, obs, zero_action, 0.0, True, act_key
  )
  return EnvCarry(
    env_state=env_state,
    core_state=core_state,
    tstate=tstate,
    action=action,
    value=value,
    traces=grads.trace,
    episode_return=jnp.zeros((), jnp.float32),
    episode_length=jnp.zeros((), jnp.int32),
    key=key,
  )


def online_actor_critic(
  env: Environment,
  cell: Any = None,
  estimator: Estimator | None = None,
  optimizer: optax.GradientTransformation | None = None,
  *,
  gamma: float = 0.99,
  trace_decay: TraceDecay = RTRRL_TRACE_DECAY,
  entropy_rate: float = 1e-5,
  actor_trace_scale: float = 1.0,
  feedback_alignment: bool = False,
  meta_rl: bool = True,
) -> OnlineAgent:
  """RTRRL's online actor-critic (Lemmel & Grosu, AAAI 2025) with the core
  trained by `estimator`; see the module docstring for the algorithm.

  Args:
    env: an `rtrl.rl.envs.Environment`.
    cell: the recurrent core (any cell of `rtrl.cells`: `CTRNN(32)` is
      RTRRL's), or None for the memoryless linear TD(λ) agent.
    estimator: an estimator of `rtrl.estimators` built for `cell` (exact
      RTRL, r-OK, KF-RTRL, SnAp-n, SK-RTRL, RFLO, UORO, the LRU's
      `diagonal_rtrl`, ...); None exactly when `cell` is None.
    optimizer: applied to the negated ascent direction, the mean over the
      parallel environments; None: `rtrrl_optimizer()` (Adam 1e-3 for the
      heads and for the core, unclipped). A sparse core keeps its sparsity
      (`rtrl.optim.keep_recurrent_mask`).
    gamma: the discount, in (0, 1].
    trace_decay: `TraceDecay(actor, critic, core)`, each λ in [0, 1].
    entropy_rate: `η_H`, the entropy bonus's weight, >= 0.
    actor_trace_scale: `η_A`, the weight of `log π` in the core's trace.
    feedback_alignment: the heads send the error to the core through fixed
      random matrices (`rtrl.readout.feedback_alignment`).
    meta_rl: the core reads `[o_t, a_{t-1}, r_t]` (RTRRL's default);
      False: `o_t` alone.

  Returns:
    The `OnlineAgent`.

  Raises:
    ValueError: naming the argument (an estimator without a cell or the
      reverse, `gamma` outside (0, 1], a λ outside [0, 1], a negative
      rate).
  """
  _check_agent_args(cell, estimator, gamma, entropy_rate, actor_trace_scale)
  decay = traces_lib.check_decay(TraceDecay(*trace_decay))
  network = actor_critic_network(
    env, cell, feedback_alignment=feedback_alignment, meta_rl=meta_rl
  )
  optimizer = optim.keep_recurrent_mask(
    rtrrl_optimizer() if optimizer is None else optimizer, cell
  )
  act = make_act(network, estimator, actor_trace_scale)
  transition = make_transition(env, act, gamma, decay, entropy_rate)

  def init(key, num_envs: int) -> AgentState:
    params_key, env_key = jax.random.split(key)
    params = network.init(params_key)
    envs = jax.vmap(
      lambda k: _first_carry(env, network, estimator, act, params, k)
    )(jax.random.split(env_key, num_envs))
    return AgentState(params, optimizer.init(params), envs, jnp.zeros((), int))

  def step(state: AgentState) -> tuple[AgentState, StepInfo]:
    envs, ascent, info = jax.vmap(transition, in_axes=(None, 0))(
      state.params, state.envs
    )
    descent = jax.tree_util.tree_map(lambda a: -jnp.mean(a, axis=0), ascent)
    updates, opt_state = optimizer.update(
      descent, state.opt_state, state.params
    )
    params = optax.apply_updates(state.params, updates)
    return AgentState(params, opt_state, envs, state.steps + 1), info

  def run(state: AgentState, num_steps: int):
    return jax.lax.scan(lambda s, _: step(s), state, length=num_steps)

  def evaluate(params, key, num_envs: int = 10, num_steps: int = 1000):
    return evaluation.evaluate(network, env, params, key, num_envs, num_steps)

  return OnlineAgent(
    init=init,
    step=step,
    run=jax.jit(run, static_argnums=1),
    evaluate=evaluate,
    act=act,
    network=network,
    estimator=estimator,
  )


__all__ = [
  "RTRRL_TRACE_DECAY",
  "AgentState",
  "EnvCarry",
  "OnlineAgent",
  "StepGradients",
  "StepInfo",
  "TraceDecay",
  "make_act",
  "make_transition",
  "online_actor_critic",
  "rtrrl_optimizer",
]
