"""The RL environments' rewards, episode lengths, masks and auto-reset:
gymnax's MemoryChain and masked CartPoles (through `rtrl.rl.envs`) and
POPGym's RepeatPrevious and StatelessCartPole (`rtrl.rl.envs.popgym`),
each driven by scripted policies that act on what the agent sees.

A scripted policy is `policy(obs, state, memory) -> (action, memory)`; the
right and the wrong variant of a policy run in one compiled program
(vmapped over a `right` flag carried in the memory)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl.rl import envs

pytest.importorskip("gymnax")

MEMORY_LENGTHS = (4, 8, 16, 32, 64)
REPEAT_PREVIOUS = {
  # name: (num_decks, k, episode length)
  "RepeatPreviousEasy": (1, 4, 51),
  "RepeatPreviousMedium": (2, 32, 103),
  "RepeatPreviousHard": (3, 64, 155),
}
STATELESS_CARTPOLE = {
  "StatelessCartPoleEasy": 200,
  "StatelessCartPoleMedium": 400,
  "StatelessCartPoleHard": 600,
}
RIGHT_AND_WRONG = jnp.array([True, False])
THETA_LIMIT = 12 * 2 * np.pi / 360


def rollout(env, policy, memory, key, num_steps):
  """`num_steps` steps of `env` from `reset(split(key)[0])`, `policy`
  acting on the observation it is shown (`state` is for scripted checks
  only); `memory` returns to its initial value when an episode ends.
  Returns per-step arrays: `obs` (what the action was taken on), `state`,
  `action`, `reward`, `done`, `next_obs`, `next_state`, `key` (the step's
  key)."""
  reset_key, step_key = jax.random.split(key)
  obs, state = env.reset(reset_key)

  def body(carry, key):
    obs, state, mem = carry
    action, new_mem = policy(obs, state, mem)
    next_obs, next_state, reward, done = env.step(key, state, action)
    new_mem = jax.tree_util.tree_map(
      lambda m0, m: jnp.where(done, m0, m), memory, new_mem
    )
    record = dict(
      obs=obs,
      state=state,
      action=action,
      reward=reward,
      done=done,
      next_obs=next_obs,
      next_state=next_state,
      key=key,
    )
    return (next_obs, next_state, new_mem), record

  keys = jax.random.split(step_key, num_steps)
  _, records = jax.lax.scan(body, (obs, state, memory), keys)
  return records


def run(env, policy, memory, key, num_steps, batched=True):
  """`rollout` jitted (vmapped over the memory's leading axis when
  `batched`, e.g. a right and a wrong policy), its records as NumPy."""
  go = jax.vmap(rollout, (None, None, 0, None, None)) if batched else rollout
  records = jax.jit(go, static_argnums=(0, 1, 4))(
    env, policy, memory, key, num_steps
  )
  return jax.tree_util.tree_map(np.asarray, records)


def pick(records, i):
  """Run `i` of batched records."""
  return jax.tree_util.tree_map(lambda x: x[i], records)


def episodes(records):
  """`(returns, lengths)` of the episodes that ended in `records`."""
  ends = np.flatnonzero(records["done"])
  starts = np.concatenate([[0], ends[:-1] + 1])
  rewards = records["reward"].astype(np.float64)
  returns = [rewards[s : e + 1].sum() for s, e in zip(starts, ends)]
  return np.array(returns), ends - starts + 1


def random_policy(num_actions):
  """Uniform actions from a key carried in the memory."""

  def policy(obs, state, key):
    del obs, state
    key, sub = jax.random.split(key)
    return jax.random.randint(sub, (), 0, num_actions), key

  return policy


# MemoryChain (gymnax, bsuite): what the agent sees, the reward at the end.


def memory_chain_policy(obs, state, memory):
  """Remembers the context bit shown at the start (obs[2] = 2 c - 1 while
  the context is shown, 0 after) and answers it (or its opposite)."""
  del state
  bit, right = memory
  bit = jnp.where(obs[2] != 0, (obs[2] > 0).astype(jnp.int32), bit)
  return jnp.where(right, bit, 1 - bit), (bit, right)


@pytest.mark.parametrize("memory_length", MEMORY_LENGTHS)
def test_memory_chain_rewards_episode_length_and_observations(memory_length):
  m = memory_length
  env = envs.make("MemoryChain-bsuite", memory_length=m)
  assert env.observation_size == 3
  assert env.actions == envs.DiscreteActions(2)
  memory = (jnp.zeros(2, jnp.int32), RIGHT_AND_WRONG)
  records = run(env, memory_chain_policy, memory, jax.random.PRNGKey(m), 520)
  num_episodes = 520 // (m + 1)
  for i, sign in ((0, 1.0), (1, -1.0)):
    returns, lengths = episodes(pick(records, i))
    # Episodes of m + 1 steps; the reward (+-1) comes at the last one only.
    np.testing.assert_array_equal(lengths, [m + 1] * num_episodes)
    np.testing.assert_array_equal(returns, sign)
    rewards = records["reward"][i, : num_episodes * (m + 1)]
    rewards = rewards.reshape(num_episodes, m + 1)
    np.testing.assert_array_equal(rewards[:, :-1], 0.0)
    np.testing.assert_array_equal(rewards[:, -1], sign)
  # What the agent sees before each action of an episode: gymnax's step
  # returns the pre-step observation, so the context shows twice (reset and
  # step 1), then [1 - (j - 1) / m, 0, 0] before action j + 1; the query
  # action (the last) is taken on [1 / m, 0, 0] (one context bit: the query
  # entry is always 0).
  steps = num_episodes * (m + 1)
  obs = records["obs"][0, :steps].reshape(num_episodes, m + 1, 3)
  context = records["state"].context[0, :steps, 0]
  context = context.reshape(num_episodes, m + 1)[:, 0]
  assert set(context.tolist()) == {0, 1}  # both contexts were drawn
  for j in (0, 1):
    np.testing.assert_array_equal(obs[:, j, 0], 1.0)
    np.testing.assert_array_equal(obs[:, j, 1], 0.0)
    np.testing.assert_array_equal(obs[:, j, 2], 2.0 * context - 1.0)
  later = 1.0 - (np.arange(2, m + 1) - 1.0) / m
  np.testing.assert_allclose(obs[:, 2:, 0], np.tile(later, (num_episodes, 1)))
  np.testing.assert_array_equal(obs[:, 2:, 1:], 0.0)
  np.testing.assert_allclose(obs[:, -1, 0], 1.0 / m)


# CartPole-v1 with velocities / positions hidden (gymnax under `masked`).


def balance_or_push_right(obs, state, right):
  """Balances gymnax's CartPole from its hidden state (a scripted check of
  the time limit, not an agent), or always pushes right."""
  del obs
  s = jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot])
  balance = (s @ jnp.array([1.0, 1.5, 18.0, 3.0]) > 0).astype(jnp.int32)
  return jnp.where(right, balance, 1), right


@pytest.mark.parametrize(
  "name, kept",
  [
    ("CartPole-v1-velocities-hidden", ("x", "theta")),
    ("CartPole-v1-positions-hidden", ("x_dot", "theta_dot")),
  ],
)
def test_masked_cartpole_keeps_its_entries_pays_one_and_cuts_at_500(name, kept):
  env = envs.make(name)
  assert env.observation_size == 2 and env.name == name
  assert env.max_episode_steps == 500
  records = run(
    env, balance_or_push_right, RIGHT_AND_WRONG, jax.random.PRNGKey(0), 1100
  )
  seen = np.stack([getattr(records["next_state"], k) for k in kept], -1)
  np.testing.assert_array_equal(records["next_obs"], seen)
  np.testing.assert_array_equal(records["reward"], 1.0)
  balanced = pick(records, 0)
  returns, lengths = episodes(balanced)
  np.testing.assert_array_equal(lengths, [500, 500])
  np.testing.assert_array_equal(returns, [500.0, 500.0])
  # Cut by the time limit, the pole still up.
  assert np.abs(balanced["state"].theta).max() < THETA_LIMIT
  # Pushed right all along, the pole falls within a few dozen steps.
  returns, lengths = episodes(pick(records, 1))
  assert len(lengths) >= 20 and lengths.max() < 60
  np.testing.assert_array_equal(returns, lengths)  # 1 per step, last too


# POPGym RepeatPrevious.


def repeat_previous_policy(k, num_cards):
  """Answers from the suits seen so far (the memory: all of them, a count
  and the `right` flag): the suit shown k - 1 steps before the one on show,
  or the next suit (always wrong)."""

  def policy(obs, state, memory):
    del state
    seen, count, right = memory
    seen = seen.at[count].set(jnp.argmax(obs).astype(jnp.int32))
    answer = seen[jnp.maximum(count - k + 1, 0)]
    action = jnp.where(right, answer, (answer + 1) % 4)
    return action, (seen, count + 1, right)

  memory = (
    jnp.zeros((2, num_cards), jnp.int32),
    jnp.zeros(2, jnp.int32),
    RIGHT_AND_WRONG,
  )
  return policy, memory


@pytest.mark.parametrize("name", sorted(REPEAT_PREVIOUS))
def test_repeat_previous_returns_and_episode_length(name):
  num_decks, k, length = REPEAT_PREVIOUS[name]
  num_cards = 52 * num_decks
  env = envs.make(name)
  assert env.observation_size == 4 and env.actions == envs.DiscreteActions(4)
  assert env.max_episode_steps == length == num_cards - 1
  policy, memory = repeat_previous_policy(k, num_cards)
  records = run(env, policy, memory, jax.random.PRNGKey(k), 2 * length)
  for i, total in ((0, 1.0), (1, -1.0)):
    returns, lengths = episodes(pick(records, i))
    np.testing.assert_array_equal(lengths, [length, length])
    np.testing.assert_allclose(returns, [total, total], rtol=1e-5)
    rewards = records["reward"][i].reshape(2, length)
    np.testing.assert_array_equal(rewards[:, : k - 1], 0.0)  # steps 1..k-1
    scale = 1.0 / (num_cards - k)
    np.testing.assert_allclose(rewards[:, k - 1 :], total * scale, rtol=1e-6)
  # Observations: one-hot suits; the shoe has 13 num_decks of each suit,
  # its last card never shown.
  obs = records["obs"][0].reshape(2, length, 4)
  np.testing.assert_array_equal(obs.sum(-1), 1.0)
  last = records["state"].suits[0].reshape(2, length, -1)[:, 0, -1]
  np.testing.assert_array_equal(obs.sum(1) + np.eye(4)[last], 13 * num_decks)


def test_repeat_previous_scores_step_t_against_card_t_minus_k():
  # As POPGym's own test (k = 2): a constant answer scores +-1/(N - k) by
  # the suit of card t - k at step t (card 0 shown by reset); steps before
  # k score 0.
  env = envs.make("RepeatPrevious", k=2)
  records = run(
    env,
    lambda o, s, m: (jnp.int32(3), m),
    0,
    jax.random.PRNGKey(5),
    51,
    batched=False,
  )
  suits = records["state"].suits[0]
  step = np.arange(1, 52)
  expected = np.where(suits[np.maximum(step - 2, 0)] == 3, 1.0, -1.0) / 50
  expected[0] = 0.0
  np.testing.assert_allclose(records["reward"], expected, rtol=1e-6)
  np.testing.assert_array_equal(records["done"], step == 51)


# POPGym StatelessCartPole.


def velocity_from_memory_policy(obs, state, memory):
  """A linear controller on [x, x_dot, theta, theta_dot], the velocities
  taken from the last two observations ((o_t - o_{t-1}) / tau: exactly the
  previous step's velocities under forward Euler); when not `right`,
  always pushes left."""
  del state
  previous, right = memory
  velocity = (obs - jnp.where(jnp.isnan(previous), obs, previous)) / 0.02
  s = jnp.array([obs[0], velocity[0], obs[1], velocity[1]])
  push = (s @ jnp.array([1.0, 1.5, 18.0, 3.0]) > 0).astype(jnp.int32)
  return jnp.where(right, push, 0), (obs, right)


def gym_cartpole_step(physics, action):
  """gym's CartPole-v1 step in float64 NumPy, `(T, 4)` states."""
  x, x_dot, theta, theta_dot = physics.astype(np.float64).T
  force = np.where(action == 1, 10.0, -10.0)
  cos, sin = np.cos(theta), np.sin(theta)
  temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
  theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4 / 3 - 0.1 * cos**2 / 1.1))
  x_acc = temp - 0.05 * theta_acc * cos / 1.1
  return np.stack(
    [
      x + 0.02 * x_dot,
      x_dot + 0.02 * x_acc,
      theta + 0.02 * theta_dot,
      theta_dot + 0.02 * theta_acc,
    ],
    -1,
  )


@pytest.mark.parametrize("name", sorted(STATELESS_CARTPOLE))
def test_stateless_cartpole_returns_and_episode_lengths(name):
  length = STATELESS_CARTPOLE[name]
  env = envs.make(name)
  assert env.observation_size == 2 and env.actions == envs.DiscreteActions(2)
  assert env.max_episode_steps == length
  memory = (jnp.full((2, 2), jnp.nan), RIGHT_AND_WRONG)
  records = run(
    env,
    velocity_from_memory_policy,
    memory,
    jax.random.PRNGKey(2),
    2 * length,
  )
  # The velocities are hidden: the agent sees [x, theta] of the state.
  physics = records["next_state"].physics
  np.testing.assert_array_equal(records["next_obs"], physics[..., [0, 2]])
  assert np.abs(physics[..., [1, 3]]).max() > 0.1
  np.testing.assert_allclose(records["reward"], 1.0 / length, rtol=1e-7)
  # Balanced from memory: every episode runs to the limit, return 1 (the
  # max).
  returns, lengths = episodes(pick(records, 0))
  np.testing.assert_array_equal(lengths, [length, length])
  np.testing.assert_allclose(returns, [1.0, 1.0], rtol=1e-5)
  # Pushed left all along: the pole falls fast, return = length / limit.
  wrong = pick(records, 1)
  returns, lengths = episodes(wrong)
  assert len(lengths) >= 20 and lengths.max() < 30
  np.testing.assert_allclose(returns, lengths / length, rtol=1e-5)
  # gym's physics and termination: an episode ends on the step whose
  # physics pass 2.4 or 12 degrees; then the state is the next episode's
  # first.
  stepped = gym_cartpole_step(wrong["state"].physics, wrong["action"])
  out = (np.abs(stepped[:, 0]) > 2.4) | (np.abs(stepped[:, 2]) > THETA_LIMIT)
  np.testing.assert_array_equal(out, wrong["done"])
  live = ~wrong["done"]
  np.testing.assert_allclose(
    stepped[live], wrong["next_state"].physics[live], rtol=1e-5, atol=1e-6
  )
  assert np.all(np.abs(wrong["next_state"].physics[~live]) <= 0.05)
  np.testing.assert_array_equal(wrong["next_state"].time[~live], 0)


def test_stateless_cartpole_is_gymnax_cartpole_without_velocities():
  import gymnax  # pylint: disable=g-import-not-at-top

  gym_env, params = gymnax.make("CartPole-v1")
  reference = envs.masked(
    envs.from_gymnax(gym_env, params.replace(max_steps_in_episode=200)),
    (0, 2),
  )
  ours = envs.make("StatelessCartPoleEasy")
  policy = random_policy(2)
  key, policy_key = jax.random.PRNGKey(3), jax.random.PRNGKey(4)
  a = run(ours, policy, policy_key, key, 400, batched=False)
  b = run(reference, policy, policy_key, key, 400, batched=False)
  np.testing.assert_array_equal(a["action"], b["action"])
  np.testing.assert_array_equal(a["done"], b["done"])
  np.testing.assert_allclose(a["next_obs"], b["next_obs"], atol=1e-6)
  np.testing.assert_allclose(a["reward"] * 200, b["reward"], rtol=1e-6)
  assert a["done"].sum() >= 10


# Every kind of environment: auto-reset and vmap, under random actions.


@pytest.mark.parametrize(
  "name, compare_single_runs",
  [
    ("MemoryChain-bsuite", False),
    ("CartPole-v1-positions-hidden", True),
    ("RepeatPreviousEasy", True),
    ("StatelessCartPoleEasy", False),
  ],
)
def test_auto_reset_and_vmap_over_8_environments(name, compare_single_runs):
  env = envs.make(name)
  policy = random_policy(env.actions.num_actions)
  keys = jax.random.split(jax.random.PRNGKey(7), 8)
  policy_keys = jax.random.split(jax.random.PRNGKey(8), 8)
  batched = jax.jit(jax.vmap(lambda p, k: rollout(env, policy, p, k, 120)))(
    policy_keys, keys
  )
  batched = jax.tree_util.tree_map(np.asarray, batched)
  assert batched["reward"].dtype == np.float32
  assert batched["done"].dtype == np.bool_
  assert batched["next_obs"].dtype == np.float32
  assert batched["next_obs"].shape == (8, 120, env.observation_size)
  # vmap over 8 environments equals 8 single runs (a gymnax and a POPGym
  # environment: a compilation each).
  single = jax.jit(lambda p, k: rollout(env, policy, p, k, 120))
  for i in range(8 if compare_single_runs else 0):
    one = single(policy_keys[i], keys[i])
    for field in ("action", "reward", "done", "next_obs"):
      np.testing.assert_allclose(
        batched[field][i], one[field], rtol=1e-6, atol=1e-7
      )
  # When done, the obs and state returned are a first one: reset's, with
  # the second half of the step's key (gymnax's split).
  done = batched["done"]
  assert done.sum() >= 8
  first_obs, first_state = jax.jit(
    jax.vmap(lambda key: env.reset(jax.random.split(key)[1]))
  )(batched["key"][done])
  np.testing.assert_array_equal(batched["next_obs"][done], first_obs)
  jax.tree_util.tree_map(
    np.testing.assert_array_equal,
    jax.tree_util.tree_map(lambda x: x[done], batched["next_state"]),
    jax.tree_util.tree_map(np.asarray, first_state),
  )


# Bad input: a ValueError naming the argument.


@pytest.mark.parametrize(
  "name, params, argument",
  [
    ("NoSuchEnv-v0", {}, "name"),
    ("RepeatPreviousEasy-typo", {}, "name"),
    ("CartPole-v1", {"memory_length": 4}, "memory_length"),
    ("RepeatPreviousEasy", {"deck": 2}, "deck"),
    ("StatelessCartPoleEasy", {"max_steps": 9}, "max_steps"),
    ("MemoryChain-bsuite", {"memory_length": 0}, "memory_length"),
    ("RepeatPrevious", {"k": 0}, "k"),
    ("RepeatPrevious", {"k": 52}, "k"),
    ("RepeatPrevious", {"k": 2.0}, "k"),
    ("RepeatPrevious", {"num_decks": 0}, "num_decks"),
    ("StatelessCartPole", {"max_episode_length": 0}, "max_episode_length"),
  ],
)
def test_make_rejects_bad_input_naming_the_argument(name, params, argument):
  with pytest.raises(ValueError, match=rf"\b{argument}\b"):
    envs.make(name, **params)


def test_make_lists_every_known_name_for_an_unknown_one():
  with pytest.raises(ValueError) as error:
    envs.make("NoSuchEnv-v0")
  for known in ("MemoryChain-bsuite", "RepeatPreviousEasy", "CartPole-v1"):
    assert known in str(error.value)


@pytest.mark.parametrize("keep", [[], [2], [-1], [0, 0], [0.5]], ids=str)
def test_masked_rejects_a_bad_keep(keep):
  env = envs.make("StatelessCartPoleEasy")
  with pytest.raises(ValueError, match=r"\bkeep\b"):
    envs.masked(env, keep)
