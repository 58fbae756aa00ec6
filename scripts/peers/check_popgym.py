"""Replays POPGym's own RepeatPrevious and PositionOnlyCartPole (its
StatelessCartPole) episodes in `rtrl.rl.envs.popgym` and compares them step
by step: observations, rewards and the step that ends each episode.

POPGym runs in its own venv outside the project (measurement only; popgym
is never a dependency), so the check has two halves:

  python3 -m venv /tmp/popgym-venv
  /tmp/popgym-venv/bin/pip install popgym==1.0.7
  /tmp/popgym-venv/bin/python -m scripts.peers.check_popgym record /tmp/p.npz
  .venv/bin/python -m scripts.peers.check_popgym compare /tmp/p.npz

`record` plays seeded POPGym episodes (RepeatPrevious: right and random
answers mixed; CartPole: random pushes, and on Hard a controller that
differences the observed positions) and saves the deck or initial state,
the actions and what POPGym returned; `compare` starts ours from the same
deck or state, takes the same actions (the balanced CartPoles: the same
controller) and prints the largest differences.
"""

from __future__ import annotations

import sys

import numpy as np

DIFFICULTIES = ("Easy", "Medium", "Hard")
SEEDS = range(5)


def record_repeat_previous(popgym, name, seed, out):
  env = getattr(popgym.envs.repeat_previous, name)()
  obs, _ = env.reset(seed=seed)
  suits = env.deck.suits_idx[env.deck.idx[::-1]]  # dealt from the end
  rng = np.random.default_rng(seed)
  seen, actions, rewards, observations = [obs], [], [], []
  while True:
    t = len(actions) + 1
    right = seen[max(t - env.k, 0)]
    action = right if rng.random() < 0.5 else int(rng.integers(4))
    obs, reward, terminated, truncated, _ = env.step(action)
    actions.append(action)
    rewards.append(reward)
    observations.append(obs)
    seen.append(obs)
    if terminated or truncated:
      break
  out[f"{name}/{seed}"] = dict(
    start=suits, actions=actions, rewards=rewards, obs=observations
  )


def record_cartpole(popgym, name, seed, out, balance):
  env = getattr(popgym.envs.position_only_cartpole, name)()
  obs, _ = env.reset(seed=seed)
  start = np.array(env.unwrapped.state, np.float64)
  rng = np.random.default_rng(seed)
  previous, actions, rewards, observations = obs, [], [], []
  while True:
    velocity = (obs - previous) / 0.02
    score = obs[0] + 1.5 * velocity[0] + 18 * obs[1] + 3 * velocity[1]
    action = int(score > 0) if balance else int(rng.integers(2))
    previous = obs
    obs, reward, terminated, truncated, _ = env.step(action)
    actions.append(action)
    rewards.append(reward)
    observations.append(obs)
    if terminated or truncated:
      break
  tag = "balanced" if balance else "random"
  out[f"{name}/{tag}/{seed}"] = dict(
    start=start, actions=actions, rewards=rewards, obs=observations
  )


def record(path):
  import popgym  # pylint: disable=g-import-not-at-top

  out = {}
  for seed in SEEDS:
    for level in DIFFICULTIES:
      record_repeat_previous(popgym, f"RepeatPrevious{level}", seed, out)
      cartpole = f"PositionOnlyCartPole{level}"
      record_cartpole(popgym, cartpole, seed, out, balance=False)
    record_cartpole(popgym, "PositionOnlyCartPoleHard", seed, out, True)
  flat = {
    f"{key}/{field}": np.asarray(value)
    for key, episode in out.items()
    for field, value in episode.items()
  }
  np.savez(path, **flat)
  print(f"recorded {len(out)} POPGym episodes in {path}")


def replay(env, state, actions):
  """Our env from `state`, taking `actions`: (obs, rewards, done)."""
  import jax  # pylint: disable=g-import-not-at-top

  step = jax.jit(env.step)
  observations, rewards, dones = [], [], []
  for action in actions:
    obs, state, reward, done = step(jax.random.PRNGKey(0), state, action)
    observations.append(np.asarray(obs))
    rewards.append(float(reward))
    dones.append(bool(done))
  return np.array(observations), np.array(rewards), np.array(dones)


def balance(env, state, num_steps):
  """Our env from `state` under `record_cartpole`'s controller (closed
  loop: open-loop replay of 600 actions drifts apart, float32 against
  gym's float64, by ~1e-5 at step 100 and ~1e-2 at step 200): rewards."""
  import jax  # pylint: disable=g-import-not-at-top

  step = jax.jit(env.step)
  obs = previous = np.asarray(state.physics)[[0, 2]]
  rewards = []
  for _ in range(num_steps):
    velocity = (obs - previous) / 0.02
    score = obs[0] + 1.5 * velocity[0] + 18 * obs[1] + 3 * velocity[1]
    previous = obs
    new_obs, state, reward, done = step(
      jax.random.PRNGKey(0), state, int(score > 0)
    )
    obs = np.asarray(new_obs)
    rewards.append(float(reward))
    if done:
      break
  return np.array(rewards)


def compare(path):
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  from rtrl.rl.envs import make  # pylint: disable=g-import-not-at-top
  from rtrl.rl.envs import popgym  # pylint: disable=g-import-not-at-top

  data = np.load(path)
  keys = sorted({k.rsplit("/", 1)[0] for k in data.files})
  worst = {"obs": 0.0, "reward": 0.0}
  for key in keys:
    start, actions = data[f"{key}/start"], data[f"{key}/actions"]
    theirs_obs, theirs_rewards = data[f"{key}/obs"], data[f"{key}/rewards"]
    name = key.split("/")[0].replace(
      "PositionOnlyCartPole", "StatelessCartPole"
    )
    env = make(name)
    if name.startswith("RepeatPrevious"):
      state = popgym.RepeatPreviousState(
        jnp.asarray(start, jnp.int32), jnp.int32(0)
      )
      obs, rewards, dones = replay(env, state, actions)
      obs_error = float(np.any(obs.argmax(-1)[:-1] != theirs_obs[:-1]))
    elif "balanced" in key:
      state = popgym.CartPoleState(
        jnp.asarray(start, jnp.float32), jnp.int32(0)
      )
      rewards = balance(env, state, len(actions) + 1)
      assert len(rewards) == len(actions), key
      dones = np.arange(len(rewards)) == len(rewards) - 1
      obs_error = 0.0  # closed loop: the actions differ
    else:
      state = popgym.CartPoleState(
        jnp.asarray(start, jnp.float32), jnp.int32(0)
      )
      obs, rewards, dones = replay(env, state, actions)
      obs_error = float(np.abs(obs[:-1] - theirs_obs[:-1]).max(initial=0.0))
    # POPGym ends exactly where ours says done, and not before.
    assert dones[-1] and not dones[:-1].any(), key
    worst["obs"] = max(worst["obs"], obs_error)
    reward_error = float(np.abs(rewards - theirs_rewards).max())
    worst["reward"] = max(worst["reward"], reward_error)
    print(
      f"{key}: {len(actions)} steps, return ours {rewards.sum():+.4f} "
      f"POPGym {theirs_rewards.sum():+.4f}"
    )
  print(
    f"{len(keys)} episodes end on the same step; largest differences: "
    f"observation {worst['obs']:.2e} (RepeatPrevious: any suit differs), "
    f"reward {worst['reward']:.2e}"
  )


if __name__ == "__main__":
  if len(sys.argv) != 3 or sys.argv[1] not in ("record", "compare"):
    sys.exit(__doc__)
  (record if sys.argv[1] == "record" else compare)(sys.argv[2])
