r"""Online recurrent RL (RTRRL, Lemmel & Grosu 2025): a CT-RNN-32 core
trained online by `estimator`, TD(λ) actor-critic heads, RTRRL's
hyper-parameters (their appendix Table 1; no gradient clipping, as their
code runs: see max_grad_norm). Default: MemoryChain-4, exact
RTRL, 200k environment steps, a few minutes on a CPU.

  python -m experiments.rl --config configs/rl.py --workdir runs/rl
  python -m experiments.rl --config configs/rl.py:memory_chain \
    --config.memory_length=16 --workdir runs/rl_mc16

Presets, RTRRL's protocol on each task (evaluate every 100k steps with 10
environments x 1000 steps, stop after 20 evaluations without improvement,
5 seeds in one program, a step cap that fits a CPU: `num_steps`; RTRRL
allows 50M):
  memory_chain                 MemoryChain-bsuite, field memory_length
  cartpole_velocities_hidden   CartPole-v1 observing x and theta (RTRRL's
                               "CartPole-pos")
  cartpole_positions_hidden    CartPole-v1 observing x_dot and theta_dot
                               (RTRRL's "CartPole-vel")
  repeat_previous              POPGym RepeatPreviousEasy
  stateless_cartpole           POPGym StatelessCartPoleEasy
  small                        the default, named

`estimator`: any of `rtrl.estimators` (rtrl, rflo, ok, ok_biased, kf,
kf_avg, ktp, snap, snap1, sk_rtrl, uoro, ...; `rank`, `order` as they take
them), `tbptt` (online TBPTT: each step's gradient backpropagated through the
last `truncation` steps), `linear` (the memoryless linear TD(λ) agent,
RTRRL's baseline) or `ppo` (PPO with the same network trained by BPTT over
rollouts).
`cell`: ctrnn (RTRRL's), lru (exact diagonal RTRL with estimator=rtrl), or
any name of `rtrl.cells.make`.
"""

import ml_collections

from configs import common

PRESETS = (
  "small",
  "memory_chain",
  "cartpole_velocities_hidden",
  "cartpole_positions_hidden",
  "repeat_previous",
  "stateless_cartpole",
)


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  """Every field the RL experiment reads, at the small default; `preset`
  (see the docstring) overrides some of them."""
  config = ml_collections.ConfigDict()

  # Environment (rtrl.rl.envs.make): a gymnax or POPGym name, or one of
  # the masked CartPoles; memory_length for MemoryChain.
  config.env = "MemoryChain-bsuite"
  config.memory_length = 4

  # Method: an estimator of rtrl.estimators (the core's gradient in RTRRL's
  # online agent), tbptt (online TBPTT-truncation), linear (no core) or ppo
  # (BPTT over rollouts).
  config.estimator = "rtrl"
  config.rank = 4  # ok, ok_biased, kf_avg, kf_approx, ktp, sk_rtrl
  config.order = 2  # snap (SnAp-n's n)
  config.truncation = 16  # tbptt: each step's gradient through T steps
  # RTRRL's RFLO agent sends the heads' error to the core through fixed
  # random matrices; auto: on for rflo only (true | false to force).
  config.feedback_alignment = "auto"
  # The core reads [observation, previous action, previous reward] (RTRRL's
  # Meta-RL input); false: the observation alone.
  config.meta_rl = True

  # Core: RTRRL's CT-RNN with time constants U(tau_min, tau_max) (fixed;
  # RTRRL also learns them), or any cell of rtrl.cells.make; a sparse
  # recurrence keeps recurrent_density of W_h (1: dense) from mask_seed.
  config.cell = "ctrnn"
  config.hidden_size = 32
  config.tau_min = 1.0
  config.tau_max = 5.0
  config.tau_seed = 0
  config.recurrent_density = 1.0
  config.mask_seed = 0

  # TD(λ) actor-critic (RTRRL's Table 1).
  config.gamma = 0.99
  config.lambda_actor = 0.99
  config.lambda_critic = 0.99
  config.lambda_core = 0.99
  config.entropy_rate = 1e-5
  config.actor_trace_scale = 1.0  # η_A: log π's weight in the core's trace
  config.num_envs = 1  # parallel environments (RTRRL: 1); update = mean

  # PPO (estimator=ppo; rtrl.rl.ppo.recurrent_ppo, purejaxrl's PPO-RNN
  # defaults): ppo_num_envs environments x ppo_rollout_steps steps per
  # update (chunk_steps a multiple of their product), BPTT through each
  # rollout; its Adam rate is learning_rate (3e-3 solved the tasks; the
  # reproduction targets set it).
  config.ppo_num_envs = 8
  config.ppo_rollout_steps = 125
  config.ppo_num_minibatches = 4
  config.ppo_update_epochs = 4
  config.ppo_gae_lambda = 0.95
  config.ppo_clip_eps = 0.2
  config.ppo_value_coef = 0.5
  config.ppo_entropy_coef = 0.01
  config.ppo_max_grad_norm = 0.5  # 0: off

  # Optimizer: Adam for the heads at learning_rate and for the core at
  # learning_rate x core_learning_rate_factor; max_grad_norm > 0 clips each
  # part's update by global norm. 0 (off): RTRRL's code; its appendix says
  # 1.0, which breaks TD(λ) here (CartPole collapses, MemoryChain-8 stays
  # unsolved: docs/results/online_rl.md).
  config.learning_rate = 1e-3
  config.learning_rates = ()  # e.g. (1e-3, 3e-4); empty: learning_rate
  config.core_learning_rate_factor = 1.0
  config.max_grad_norm = 0.0

  # Evaluation (rtrl.rl.evaluation, RTRRL's): every eval_every steps,
  # eval_envs fresh environments x eval_steps steps with sampled actions,
  # the mean return of their first episodes. patience: stop a run after
  # that many evaluations without improvement (0: never).
  config.eval_every = 20_000  # environment steps between evaluations
  config.eval_envs = 10
  config.eval_steps = 1000
  config.patience = 0

  # Run: steps are environment steps (summed over the parallel
  # environments); chunk_steps environment steps per jitted chunk.
  common.online_run_fields(
    config,
    num_steps=200_000,
    chunk_steps=10_000,
    log_every=10_000,
    checkpoint_every=100_000,
  )

  if preset in ("", "small"):
    return config
  if preset not in PRESETS:
    raise common.unknown_preset("configs/rl.py", preset, PRESETS)
  config.update(RTRRL_PROTOCOL)
  config.update(TASKS[preset])
  return config


# RTRRL's protocol (appendix): evaluate every 100 x 1000 steps, stop after
# 20 evaluations without improvement, 5 seeds; the step cap is a CPU's
# (RTRRL: up to 50M).
RTRRL_PROTOCOL = dict(
  num_seeds=5,
  eval_every=100_000,
  patience=20,
  num_steps=2_000_000,
  chunk_steps=10_000,
  log_every=100_000,
  checkpoint_every=500_000,
)

TASKS = {
  "memory_chain": dict(env="MemoryChain-bsuite"),
  "cartpole_velocities_hidden": dict(env="CartPole-v1-velocities-hidden"),
  "cartpole_positions_hidden": dict(env="CartPole-v1-positions-hidden"),
  "repeat_previous": dict(env="RepeatPreviousEasy"),
  "stateless_cartpole": dict(env="StatelessCartPoleEasy"),
}
