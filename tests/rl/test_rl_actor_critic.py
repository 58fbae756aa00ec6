"""The online actor-critic (`rtrl.rl.actor_critic`): its core gradient
equals BPTT's for exact RTRL, its traces equal the forward view's
λ-return, it learns MemoryChain-4, and bad input is named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rtrl
from rtrl import rl
from rtrl.rl import actor_critic
from rtrl.rl.traces import TraceDecay


def _record(agent, params, env, num_steps, key):
  """Acts `num_steps` steps with frozen `params` through `agent.act`;
  returns the per-step inputs and the agent's core gradients."""
  obs, env_state = env.reset(jax.random.PRNGKey(7))
  network, estimator = agent.network, agent.estimator
  core_state = network.initial_state()
  tstate = estimator.init(params["cell"], core_state, key)
  action, reward, reset = network.policy.zero_action(), 0.0, True
  act, env_step = jax.jit(agent.act), jax.jit(env.step)
  steps = []
  for t in range(num_steps):
    act_key, env_key = jax.random.split(jax.random.PRNGKey(100 + t))
    core_state, tstate, new_action, _, _, grads = act(
      params, core_state, tstate, obs, action, reward, reset, act_key
    )
    steps.append((obs, action, reward, reset, new_action, grads))
    obs, env_state, reward, done = env_step(env_key, env_state, new_action)
    action, reset = new_action, bool(done)
  return steps


def _bptt_core_gradient(network, params, steps, t, actor_trace_scale):
  """`d/dW [v(h_t) + η_A log π(a_t|h_t)]` by an explicit unroll (BPTT)
  from the last episode start at or before `t`."""
  start = max(s for s in range(t + 1) if steps[s][3])
  policy = network.policy

  def objective(cell_params):
    state = network.initial_state()
    for obs, action, reward, reset, _, _ in steps[start : t + 1]:
      action = policy.zero_action() if reset else action
      x = network.core_input(obs, action, 0.0 if reset else reward)
      state = network.core_step(cell_params, state, x)
    out, value = network.heads(params, network.features(state))
    return value + actor_trace_scale * policy.log_prob(out, steps[t][4])

  return jax.jit(jax.grad(objective))(params["cell"])


@pytest.mark.parametrize(
  "cell",
  [rtrl.cells.CTRNN(6, tau_seed=1), rtrl.cells.GRU(5)],
  ids=["ctrnn", "gru"],
)
def test_exact_rtrl_core_gradient_equals_bptt(x64, cell):
  env = rl.envs.make("MemoryChain-bsuite", memory_length=3)
  agent = actor_critic.online_actor_critic(
    env, cell, rtrl.estimators.make("rtrl", cell), actor_trace_scale=0.7
  )
  params = agent.network.init(jax.random.PRNGKey(0))
  steps = _record(agent, params, env, 11, jax.random.PRNGKey(1))
  assert sum(s[3] for s in steps) >= 3  # three episode starts
  for t in range(len(steps)):
    expected = _bptt_core_gradient(agent.network, params, steps, t, 0.7)
    np.testing.assert_allclose(
      steps[t][5].trace["cell"]["W"], expected["W"], rtol=1e-10, atol=1e-13
    )


def test_lru_diagonal_rtrl_core_gradient_equals_bptt(x64):
  env = rl.envs.make("CartPole-v1-positions-hidden")
  cell = rtrl.cells.LRU(state_size=4)
  agent = actor_critic.online_actor_critic(
    env, cell, rtrl.estimators.diagonal_rtrl(cell)
  )
  params = agent.network.init(jax.random.PRNGKey(3))
  steps = _record(agent, params, env, 6, jax.random.PRNGKey(4))
  for t in range(len(steps)):
    expected = _bptt_core_gradient(agent.network, params, steps, t, 1.0)
    for name, value in expected.items():
      np.testing.assert_allclose(
        steps[t][5].trace["cell"][name], value, rtol=1e-10, atol=1e-13
      )


def _lambda_returns(rewards, values, gamma, lam):
  """G^λ_s = r_{s+1} + γ((1-λ) v_{s+1} + λ G^λ_{s+1}), terminal at the end."""
  returns = np.zeros(len(rewards))
  following = 0.0
  for s in reversed(range(len(rewards))):
    bootstrap = 0.0 if s == len(rewards) - 1 else values[s + 1]
    following = rewards[s] + gamma * ((1 - lam) * bootstrap + lam * following)
    returns[s] = following
  return returns


def test_accumulating_traces_equal_the_lambda_return_forward_view(x64):
  """Offline, with the weights fixed over an episode, the summed TD(λ)
  updates of the critic with accumulating traces equal the λ-return
  algorithm's (Sutton & Barto 2018, section 12.4)."""
  gamma, lam = 0.9, 0.7
  env = rl.envs.make("MemoryChain-bsuite", memory_length=6)
  cell = rtrl.cells.CTRNN(5)
  agent = actor_critic.online_actor_critic(
    env,
    cell,
    rtrl.estimators.make("rtrl", cell),
    gamma=gamma,
    trace_decay=TraceDecay(actor=0.5, critic=lam, core=0.3),
    entropy_rate=0.0,
  )
  state = agent.init(jax.random.PRNGKey(0), 1)
  transition = jax.jit(
    actor_critic.make_transition(
      env, agent.act, gamma, TraceDecay(0.5, lam, 0.3), 0.0
    )
  )
  carry = jax.tree_util.tree_map(lambda a: a[0], state.envs)
  params = state.params
  features = [jnp.append(agent.network.features(carry.core_state), 1.0)]
  values, rewards, summed = [carry.value], [], None
  while True:
    carry, ascent, info = transition(params, carry)
    critic = jnp.append(ascent["critic"]["w"][:, 0], ascent["critic"]["b"])
    summed = critic if summed is None else summed + critic
    rewards.append(float(info.reward))
    if bool(info.done):
      break
    values.append(info.value)
    features.append(jnp.append(agent.network.features(carry.core_state), 1.0))
  values = np.asarray(values)
  forward = _lambda_returns(np.asarray(rewards), values, gamma, lam) - values
  expected = np.sum(forward[:, None] * np.asarray(features), axis=0)
  assert len(rewards) == 7  # MemoryChain-6: seven steps, reward at the end
  np.testing.assert_allclose(summed, expected, rtol=1e-10, atol=1e-12)


def test_exact_rtrl_solves_memory_chain_4():
  """Exact RTRL on a CT-RNN-32 (RTRRL's settings) solves MemoryChain-4: an
  evaluation return of at least 0.9 after 20,000 steps (seed 0)."""
  env = rl.envs.make("MemoryChain-bsuite", memory_length=4)
  cell = rtrl.cells.CTRNN(32)
  agent = actor_critic.online_actor_critic(
    env, cell, rtrl.estimators.make("rtrl", cell)
  )
  state = agent.init(jax.random.PRNGKey(0), 1)
  state, info = agent.run(state, 20_000)
  score = jax.jit(agent.evaluate)(state.params, jax.random.PRNGKey(1))
  assert float(score) >= 0.9
  assert int(info.done.sum()) == 20_000 // 5  # five steps per episode


def test_bad_arguments_are_named():
  env = rl.envs.make("CartPole-v1")
  cell = rtrl.cells.CTRNN(8)
  estimator = rtrl.estimators.make("rtrl", cell)
  with pytest.raises(ValueError, match="estimator must be given"):
    actor_critic.online_actor_critic(env, cell)
  with pytest.raises(ValueError, match="estimator must be given"):
    actor_critic.online_actor_critic(env, None, estimator)
  with pytest.raises(ValueError, match=r"gamma must be a number in \(0, 1\]"):
    actor_critic.online_actor_critic(env, cell, estimator, gamma=1.5)
  with pytest.raises(ValueError, match=r"gamma must be a number in \(0, 1\]"):
    actor_critic.online_actor_critic(env, cell, estimator, gamma=0.0)
  with pytest.raises(ValueError, match=r"lambda_critic must be a number"):
    actor_critic.online_actor_critic(
      env, cell, estimator, trace_decay=TraceDecay(critic=-0.1)
    )
  with pytest.raises(ValueError, match="entropy_rate must be a number >= 0"):
    actor_critic.online_actor_critic(env, cell, estimator, entropy_rate=-1.0)
  with pytest.raises(ValueError, match="ok needs a cell in the Lemma-1 form"):
    lru = rtrl.cells.LRU(state_size=4)
    actor_critic.online_actor_critic(env, lru, rtrl.estimators.ok(lru, rank=2))


def test_the_linear_agent_remembers_through_its_actions_only():
  """Without a cell, an agent that sees its own previous action (RTRRL's
  Meta-RL input) can carry MemoryChain's bit through its actions: of 4
  seeds, one returns > 0.9 on average over its last 50k of 200k steps.
  Seeing the observation alone (`meta_rl=False`), every seed stays at
  chance (|mean| < 0.1)."""
  env = rl.envs.make("MemoryChain-bsuite", memory_length=4)
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  late = {}
  for meta_rl in (True, False):
    agent = actor_critic.online_actor_critic(env, meta_rl=meta_rl)
    state = jax.vmap(lambda k, agent=agent: agent.init(k, 1))(keys)
    run = jax.jit(jax.vmap(lambda s, agent=agent: agent.run(s, 50_000)))
    for _ in range(4):
      state, info = run(state)
    late[meta_rl] = info.episode_return.sum((1, 2)) / info.done.sum((1, 2))
  assert np.all(np.abs(late[False]) < 0.1), late[False]
  assert np.max(late[True]) > 0.9, late[True]
