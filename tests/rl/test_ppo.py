"""Recurrent PPO (`rtrl.rl.ppo`): GAE against the λ-return by its
definition, the BPTT gradient of the loss against an explicit per-episode
unroll and finite differences, vmapped seeds and learning rates against
single runs (float64), a learning run on MemoryChain-4, bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl import cells
from rtrl.rl import envs
from rtrl.rl import evaluation
from rtrl.rl import ppo as ppo_lib
from rtrl.rl.gae import gae
from rtrl.rl.ppo_epochs import annealed
from rtrl.rl.ppo_loss import LossHyperparams
from rtrl.rl.ppo_loss import Minibatch
from rtrl.rl.ppo_loss import ppo_loss
from rtrl.rl.ppo_rollout import initial_runner
from rtrl.rl.ppo_rollout import rollout

pytest.importorskip("gymnax")

GAMMA = 0.9


def memory_chain(length: int = 4):
  return envs.make("MemoryChain-bsuite", memory_length=length)


def lambda_return(rewards, values, dones, last_value, gamma, lam, t):
  """The λ-return of step `t` by its definition, `(1 - λ) Σ_n λ^(n-1)
  G_t^(n)` truncated at the horizon `N` (the episode's end or the
  rollout's): `... + λ^(N-1) G_t^(N)`, one environment."""
  steps = len(rewards)
  end = next((k for k in range(t, steps) if dones[k]), None)
  horizon = (end + 1 if end is not None else steps) - t

  def n_step(n):
    ret = sum(gamma**i * rewards[t + i] for i in range(n))
    if n < horizon:
      return ret + gamma**n * values[t + n]
    return ret if end is not None else ret + gamma**n * last_value

  weighted = sum(
    (1 - lam) * lam ** (n - 1) * n_step(n) for n in range(1, horizon)
  )
  return weighted + lam ** (horizon - 1) * n_step(horizon)


@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_gae_equals_lambda_return_definition(x64, lam):
  rng = np.random.default_rng(0)
  steps, num_envs = 12, 3
  rewards = rng.standard_normal((steps, num_envs))
  values = rng.standard_normal((steps, num_envs))
  dones = np.zeros((steps, num_envs), bool)
  dones[[2, 3, 9], 0] = True  # episodes of 3, 1 and 6 steps, then a cut one
  dones[11, 1] = True  # the rollout's last step ends an episode
  last_value = rng.standard_normal(num_envs)
  advantages, targets = gae(
    jnp.asarray(rewards),
    jnp.asarray(values),
    jnp.asarray(dones),
    jnp.asarray(last_value),
    GAMMA,
    lam,
  )
  expected = np.array(
    [
      [
        lambda_return(
          rewards[:, e], values[:, e], dones[:, e], last_value[e], GAMMA, lam, t
        )
        for e in range(num_envs)
      ]
      for t in range(steps)
    ]
  )
  np.testing.assert_allclose(targets, expected, rtol=0, atol=1e-12)
  np.testing.assert_allclose(advantages, expected - values, rtol=0, atol=1e-12)


def recorded_minibatch(network, env, params, steps=9, num_envs=2):
  """A rollout of `steps` that starts mid-episode (after a first rollout of
  3 steps), with episode starts inside it, and GAE on it."""
  runner = initial_runner(network, env, jax.random.PRNGKey(1), num_envs)
  runner, _, _ = rollout(network, env, params, runner, jax.random.PRNGKey(2), 3)
  initial_state = runner.core_state
  _, batch, _ = rollout(
    network, env, params, runner, jax.random.PRNGKey(3), steps
  )
  assert not batch.starts[0].any() and batch.starts[1:].any()
  advantages, targets = gae(
    batch.rewards, batch.values, batch.dones, batch.values[-1], 0.99, 0.95
  )
  return Minibatch(initial_state, batch, advantages, targets)


def unrolled_outputs(network, params, batch):
  """Per environment, per episode: the core unrolled step by step from
  its initial state (or the stored state, for the rollout's first,
  continuing, episode); `(T, E)` log-probabilities, values, entropies."""
  roll = batch.rollout
  steps, num_envs = roll.rewards.shape
  starts = np.asarray(roll.starts)  # concrete: the episodes' boundaries
  policy = network.policy
  columns = []
  for e in range(num_envs):
    state = jax.tree_util.tree_map(lambda s: s[e], batch.initial_core_state)
    column = []
    for t in range(steps):
      if starts[t, e]:
        state = network.initial_state()
      state = network.core_step(params["cell"], state, roll.inputs[t, e])
      out, value = network.heads(params, network.features(state))
      action = roll.actions[t, e]
      column.append((policy.log_prob(out, action), value, policy.entropy(out)))
    columns.append(column)
  return [
    jnp.stack([jnp.stack([columns[e][t][k] for e in range(num_envs)])
               for t in range(steps)])
    for k in range(3)
  ]  # fmt: skip


def reference_loss(network, params, batch, eps, value_coef, entropy_coef):
  """PPO's loss written out from its definition on the unrolled outputs."""
  log_probs, values, entropies = unrolled_outputs(network, params, batch)
  roll = batch.rollout
  adv = batch.advantages
  adv = (adv - adv.mean()) / (adv.std() + 1e-8)
  ratio = jnp.exp(log_probs - roll.log_probs)
  surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - eps, 1 + eps) * adv)
  v_clip = roll.values + jnp.clip(values - roll.values, -eps, eps)
  v_loss = jnp.maximum(
    (values - batch.targets) ** 2, (v_clip - batch.targets) ** 2
  )
  return (
    -surrogate.mean()
    + value_coef * 0.5 * v_loss.mean()
    - entropy_coef * entropies.mean()
  )


def perturbed(params, key, scale):
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(key, len(leaves))
  noise = [scale * jax.random.normal(k, x.shape, x.dtype) for k, x in
           zip(keys, leaves)]  # fmt: skip
  return jax.tree_util.tree_unflatten(
    tree, [x + n for x, n in zip(leaves, noise)]
  )


def test_replay_reproduces_the_rollout(x64):
  """At the rollout's weights the replay recomputes its log-probabilities
  and values: the ratio is 1 and the clipped terms are inactive."""
  env = memory_chain()
  network = ppo_lib.recurrent_ppo(env, cells.CTRNN(6)).network
  params = network.init(jax.random.PRNGKey(0))
  batch = recorded_minibatch(network, env, params)
  outputs = jax.jit(lambda p: unrolled_outputs(network, p, batch))
  log_probs, values, _ = outputs(params)
  np.testing.assert_allclose(log_probs, batch.rollout.log_probs, atol=1e-12)
  np.testing.assert_allclose(values, batch.rollout.values, atol=1e-12)
  hp = LossHyperparams(clip_eps=0.2, value_coef=0.5, entropy_coef=0.01)
  _, metrics = ppo_loss(network, params, batch, hp)
  assert abs(float(metrics.approx_kl)) < 1e-12
  assert float(metrics.clip_fraction) == 0.0


def test_bptt_gradient_equals_per_episode_unroll(x64):
  """The loss's gradient (BPTT through the rollout, the core reset at
  episode starts inside the scan) equals the gradient of the loss of an
  explicit per-episode unroll, and finite differences, at weights moved
  away from the rollout's (ratios clipped)."""
  env = memory_chain()
  network = ppo_lib.recurrent_ppo(env, cells.CTRNN(6)).network
  rollout_params = network.init(jax.random.PRNGKey(0))
  batch = recorded_minibatch(network, env, rollout_params)
  params = perturbed(rollout_params, jax.random.PRNGKey(7), 0.3)
  eps, value_coef, entropy_coef = 0.1, 0.5, 0.01
  hp = LossHyperparams(eps, value_coef, entropy_coef)
  grad, metrics = jax.grad(
    lambda p: ppo_loss(network, p, batch, hp), has_aux=True
  )(params)
  assert 0.0 < float(metrics.clip_fraction) < 1.0  # both branches taken

  def reference(p):
    return reference_loss(network, p, batch, eps, value_coef, entropy_coef)

  expected = jax.jit(jax.grad(reference))(params)
  jax.tree_util.tree_map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12),
    grad,
    expected,
  )
  np.testing.assert_allclose(
    ppo_loss(network, params, batch, hp)[0], reference(params), atol=1e-12
  )
  # Central differences along the core's gradient direction.
  direction = jax.tree_util.tree_map(jnp.zeros_like, params)
  direction["cell"] = grad["cell"]
  h = 1e-5

  def loss_at(step):
    moved = jax.tree_util.tree_map(lambda p, d: p + step * d, params, direction)
    return ppo_loss(network, moved, batch, hp)[0]

  numeric = (loss_at(h) - loss_at(-h)) / (2 * h)
  analytic = sum(
    jnp.vdot(g, g) for g in jax.tree_util.tree_leaves(grad["cell"])
  )
  np.testing.assert_allclose(numeric, analytic, rtol=1e-6)


def small_ppo(**overrides):
  kwargs = dict(num_envs=4, rollout_steps=12, num_minibatches=2)
  kwargs.update(overrides)
  return ppo_lib.recurrent_ppo(memory_chain(), cells.CTRNN(8), **kwargs)


def assert_trees_close(actual, expected, atol):
  jax.tree_util.tree_map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=atol),
    actual,
    expected,
  )


def test_vmapped_seeds_and_rates_equal_single_runs(x64):
  """Seeds x learning rates in one program (the rates in the state, and
  the rate traced into a factory built inside `vmap`) equal the single
  runs; the episode log records MemoryChain-4's 5-step episodes."""
  ppo = small_ppo()
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  rates = jnp.array([1e-3, 3e-3])
  singles = [ppo.run(ppo.init(keys[i], rates[i]), 3) for i in range(2)]
  vmapped = jax.vmap(lambda s: ppo.run(s, 3))(jax.vmap(ppo.init)(keys, rates))

  def swept(key, rate):
    agent = small_ppo(learning_rate=rate)
    return agent.run(agent.init(key), 3)

  traced = jax.jit(jax.vmap(swept))(keys, rates)
  for i, single in enumerate(singles):
    for both in (vmapped, traced):
      assert_trees_close(
        jax.tree_util.tree_map(lambda x: x[i], both), single, 1e-12
      )
  first, second = (s[0].params["cell"]["W"] for s in singles)
  assert not np.allclose(first, second)

  state, metrics = singles[0]
  ended = np.asarray(metrics.episodes.ended)
  assert ended.sum() >= 3 * 4 * 2  # 36 steps per environment
  assert set(np.asarray(metrics.episodes.lengths)[ended].tolist()) == {5}
  returns = np.asarray(metrics.episodes.returns)
  assert set(returns[ended].tolist()) <= {-1.0, 1.0}
  per_update = [returns[u][ended[u]].mean() for u in range(3)]
  np.testing.assert_allclose(metrics.episode_return, per_update, atol=1e-12)
  assert int(state.env_steps) == 3 * 4 * 12


def test_annealing_is_purejaxrls_linear_decay():
  config = small_ppo(anneal_updates=4).config
  rates = [
    float(annealed(config, jnp.asarray(2e-3), jnp.asarray(k))) for k in range(6)
  ]
  np.testing.assert_allclose(rates, [2e-3, 1.5e-3, 1e-3, 5e-4, 0.0, 0.0])
  constant = annealed(small_ppo().config, jnp.asarray(2e-3), jnp.asarray(9))
  np.testing.assert_allclose(constant, 2e-3)


def test_update_has_no_host_callbacks():
  ppo = small_ppo()
  jaxpr = jax.make_jaxpr(ppo.update)(ppo.init(jax.random.PRNGKey(0)))
  assert "callback" not in str(jaxpr)


def solved_score(env, num_updates, seed=0):
  """RTRRL's evaluation of PPO-CT-RNN-32 (defaults) after `num_updates`
  updates of 1024 environment steps, and the training returns."""
  ppo = ppo_lib.recurrent_ppo(env, cells.CTRNN(32))
  state, metrics = ppo.run(ppo.init(jax.random.PRNGKey(seed)), num_updates)
  assert int(state.env_steps) == 1024 * num_updates
  score = evaluation.evaluate(
    ppo.network, env, state.params, jax.random.PRNGKey(1)
  )
  return float(score), np.asarray(metrics.episode_return)


def test_solves_memory_chain_4():
  """MemoryChain-4 solved (every one of RTRRL's 10 evaluation episodes
  right) within 10 updates, 10240 environment steps (seed 0: from 5120
  on, under 5 evaluation keys)."""
  score, returns = solved_score(memory_chain(4), 10)
  assert score >= 0.9
  assert np.nanmean(returns[-3:]) > 0.9


def best_evaluation(env, max_steps, eval_every, threshold, seed=0):
  """RTRRL's metric: the best evaluation of PPO-CT-RNN-32 (defaults),
  evaluated every `eval_every` updates, stopped at `threshold` or
  `max_steps` environment steps."""
  ppo = ppo_lib.recurrent_ppo(env, cells.CTRNN(32))
  score = jax.jit(
    lambda params, key: evaluation.evaluate(ppo.network, env, params, key)
  )
  state = ppo.init(jax.random.PRNGKey(seed))
  eval_key = jax.random.PRNGKey(seed + 1)
  best = -np.inf
  while int(state.env_steps) < max_steps and best < threshold:
    state, _ = ppo.run(state, eval_every)
    eval_key, key = jax.random.split(eval_key)
    best = max(best, float(score(state.params, key)))
  return best


@pytest.mark.slow
def test_solves_memory_chain_16():
  """MemoryChain-16: an evaluation >= 0.9 within 20480 environment steps,
  evaluating every 2048 (seed 0: at 4096)."""
  assert best_evaluation(memory_chain(16), 20480, 2, 0.9) >= 0.9


@pytest.mark.slow
def test_cartpole_velocities_hidden_reaches_500():
  """CartPole with its velocities hidden: an evaluation return of 500 (the
  time limit) within 1.5M environment steps, evaluating every 51200
  (seed 0: at 1.23M)."""
  env = envs.make("CartPole-v1-velocities-hidden")
  assert best_evaluation(env, 1_500_000, 50, 500.0) >= 500.0


@pytest.mark.parametrize(
  "overrides, name",
  [
    (dict(num_envs=0), "num_envs"),
    (dict(rollout_steps=-1), "rollout_steps"),
    (dict(num_minibatches=0), "num_minibatches"),
    (dict(update_epochs=0), "update_epochs"),
    (dict(num_envs=6, num_minibatches=4), "num_minibatches"),
    (dict(gamma=0.0), "gamma"),
    (dict(gamma=1.5), "gamma"),
    (dict(gae_lambda=-0.1), "gae_lambda"),
    (dict(clip_eps=0.0), "clip_eps"),
    (dict(clip_eps=-0.2), "clip_eps"),
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(max_grad_norm=0.0), "max_grad_norm"),
    (dict(entropy_coef=-1.0), "entropy_coef"),
    (dict(anneal_updates=0), "anneal_updates"),
  ],
)
def test_bad_input_names_the_argument(overrides, name):
  with pytest.raises(ValueError, match=name):
    ppo_lib.recurrent_ppo(memory_chain(), cells.CTRNN(4), **overrides)


def test_bad_env_and_init_rate():
  with pytest.raises(ValueError, match="env"):
    ppo_lib.recurrent_ppo("MemoryChain-bsuite", cells.CTRNN(4))
  ppo = ppo_lib.recurrent_ppo(memory_chain(), cells.CTRNN(4))
  with pytest.raises(ValueError, match="learning_rate"):
    ppo.init(jax.random.PRNGKey(0), -1e-3)
