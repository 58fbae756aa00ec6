#!/usr/bin/env python
"""Recurrent PPO (`rtrl.rl.ppo.recurrent_ppo`, CT-RNN core): environment
steps per second and environment steps to solve a task.

1. Speed: `--updates` updates of one run, then of `--seeds` seeds vmapped
   in one program, each compiled first and timed after (best of
   `--repeats`); environment steps per second in total over the seeds.
2. Steps to solve (with `--solve`): seed `--seed` trained in chunks of
   `--eval_every` updates, RTRRL's evaluation (`rtrl.rl.evaluation.
   evaluate`: 10 fresh environments x 1000 steps, sampled actions, the mean
   first-episode return) after each chunk, until the evaluation reaches
   `--threshold` or `--max_steps` environment steps have run.

  python -m scripts.bench_ppo --memory_length 4               # speed
  python -m scripts.bench_ppo --memory_length 16 --solve --max_steps 2e6
  python -m scripts.bench_ppo --env CartPole-v1-velocities-hidden --solve \\
      --threshold 500 --max_steps 2e6
  python -m scripts.bench_ppo --solve --set num_envs=16 --set learning_rate=3e-3
"""

from __future__ import annotations

import argparse
import ast
import time

import jax

from rtrl import cells
from rtrl.rl import envs
from rtrl.rl import evaluation
from rtrl.rl.ppo import recurrent_ppo


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--env", default="MemoryChain-bsuite")
  parser.add_argument("--memory_length", type=int, default=4)
  parser.add_argument("--hidden_size", type=int, default=32)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--seeds", type=int, default=5)
  parser.add_argument("--updates", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--solve", action="store_true")
  parser.add_argument("--threshold", type=float, default=0.9)
  parser.add_argument("--max_steps", type=float, default=1e6)
  parser.add_argument("--eval_every", type=int, default=5)
  parser.add_argument(
    "--set",
    action="append",
    default=[],
    help="a recurrent_ppo keyword, NAME=VALUE (a Python literal)",
  )
  return parser.parse_args(argv)


def make_env(args):
  if args.env == "MemoryChain-bsuite":
    return envs.make(args.env, memory_length=args.memory_length)
  return envs.make(args.env)


def overrides(pairs):
  kwargs = {}
  for pair in pairs:
    name, value = pair.split("=", 1)
    kwargs[name] = ast.literal_eval(value)
  return kwargs


def timed(fn, state, repeats):
  """Best wall time of `fn(state)` after a compiling call, and the process
  CPU time of that call (on a shared machine, the wall time includes the
  waits for a core; the CPU time does not)."""
  jax.block_until_ready(fn(state))
  best = (float("inf"), float("inf"))
  for _ in range(repeats):
    start, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(state))
    wall = time.perf_counter() - start
    best = min(best, (wall, time.process_time() - cpu))
  return best


def speed(ppo, args):
  steps = args.updates * ppo.config.steps_per_update
  state = ppo.init(jax.random.PRNGKey(args.seed))
  single, single_cpu = timed(
    lambda s: ppo.run(s, args.updates), state, args.repeats
  )
  keys = jax.random.split(jax.random.PRNGKey(args.seed), args.seeds)
  states = jax.vmap(ppo.init)(keys)
  run = jax.jit(jax.vmap(lambda s: ppo.run(s, args.updates)))
  vmapped, vmapped_cpu = timed(run, states, args.repeats)
  total = args.seeds * steps
  print(
    f"speed: {steps} steps per run; single {steps / single:,.0f} steps/s "
    f"({steps / single_cpu:,.0f} per CPU second); {args.seeds} seeds "
    f"vmapped {total / vmapped:,.0f} steps/s in total ({total / vmapped_cpu:,.0f} "
    f"per CPU second; {vmapped / single:.2f}x the single run's time)"
  )


def solve(ppo, env, args):
  state = ppo.init(jax.random.PRNGKey(args.seed))
  score_fn = jax.jit(
    lambda params, key: evaluation.evaluate(ppo.network, env, params, key)
  )
  eval_key = jax.random.PRNGKey(args.seed + 1)
  start = time.perf_counter()
  best = -float("inf")
  while int(state.env_steps) < args.max_steps:
    state, metrics = ppo.run(state, args.eval_every)
    eval_key, key = jax.random.split(eval_key)
    score = float(score_fn(state.params, key))
    best = max(best, score)
    steps = int(state.env_steps)
    elapsed = time.perf_counter() - start
    print(
      f"  {steps:>9,} steps  eval {score:8.3f}  best {best:8.3f}  train "
      f"return {float(metrics.episode_return[-1]):8.3f}  {elapsed:6.1f} s",
      flush=True,
    )
    if score >= args.threshold:
      print(f"solved: eval {score:.3f} >= {args.threshold} at {steps:,} steps")
      return
  print(f"not solved in {int(state.env_steps):,} steps (best {best:.3f})")


def main(argv=None):
  args = parse_args(argv)
  env = make_env(args)
  ppo = recurrent_ppo(env, cells.CTRNN(args.hidden_size), **overrides(args.set))
  print(f"{env.name}: {ppo.config}")
  if args.solve:
    solve(ppo, env, args)
  else:
    speed(ppo, args)


if __name__ == "__main__":
  main()
