"""Online recurrent RL on a memory POMDP: one method (`methods.py`) trained
on one environment, evaluated by RTRRL's protocol, best evaluation kept.

  python -m experiments.rl --config configs/rl.py:memory_chain --workdir W

Steps are environment steps (summed over a method's parallel
environments), the one budget every method is given. Every `eval_every`
steps the network is evaluated with frozen weights (`rtrl.rl.evaluation`:
`eval_envs` fresh environments x `eval_steps` steps, the mean return of
their first episodes); `best_eval_return` is the best evaluation so far,
RTRRL's metric. With `patience` > 0 a run stops learning after that many
evaluations without improvement (RTRRL's early stop): its parameters and
best evaluation are frozen while the other runs of the program go on.

Records: `episode_return` (mean return of the episodes that ended in the
record's window), `episodes`, `episode_length`, and at
evaluations `eval_return`, `best_eval_return`, `stopped`. `summary.json`:
`best_eval_return`, `best_eval_step`, `last_eval_return`, `stopped_at_step`
(lists over runs when there are several).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from experiments.loop import checks
from experiments.loop import runner
from experiments.online_rl import methods as methods_lib
from rtrl import estimators
from rtrl import validation
from rtrl.rl import evaluation


class EvalState(NamedTuple):
  """The evaluations so far: the best, when, how many since, stopped."""

  best: jax.Array
  best_step: jax.Array
  since_best: jax.Array
  stopped: jax.Array
  last: jax.Array


def validate(config) -> None:
  """Raises ValueError naming the first bad field."""
  names = (
    tuple(estimators.names())
    + methods_lib.WINDOW_ESTIMATORS
    + methods_lib.NON_ESTIMATORS
  )
  if config.estimator not in names:
    raise ValueError(
      f"config.estimator must be one of {names}, got {config.estimator!r}"
    )
  wanted = (
    estimators.hyperparameters(config.estimator)
    if config.estimator in estimators.names()
    else ()
  )
  if config.estimator == "tbptt":
    checks.positive_ints(config, "truncation")
  if config.estimator == "sk_rtrl":  # rank 0 is SnAp-1
    checks.nonnegative_ints(config, "rank")
  elif "rank" in wanted:
    checks.positive_ints(config, "rank")
  if "order" in wanted:
    checks.positive_ints(config, "order")
  checks.positive_ints(
    config, "hidden_size", "num_envs", "chunk_steps", "eval_envs", "eval_steps"
  )
  checks.multiple_of(config, "chunk_steps", config.num_envs, "config.num_envs")
  checks.nonnegative_ints(config, "patience", zero_means="no early stop")
  for rate in list(config.learning_rates) + [config.learning_rate]:
    validation.positive_number("config.learning_rate(s)", rate)
  if not 0.0 < config.gamma <= 1.0:
    raise ValueError(f"config.gamma must be in (0, 1], got {config.gamma!r}")
  for part in ("actor", "critic", "core"):
    value = config[f"lambda_{part}"]
    if not 0.0 <= value <= 1.0:
      raise ValueError(f"config.lambda_{part} must be in [0, 1], got {value!r}")
  if config.feedback_alignment not in ("auto", True, False):
    raise ValueError(
      "config.feedback_alignment must be 'auto', true or false, got "
      f"{config.feedback_alignment!r}"
    )


def evaluate_fn(config, method, env):
  """`state -> (state, metrics)`: one evaluation and the best-so-far."""

  def evaluate(state):
    key, eval_key = jax.random.split(state["eval_key"])
    score = evaluation.evaluate(
      method.network,
      env,
      method.params(state["method"]),
      eval_key,
      config.eval_envs,
      config.eval_steps,
    ).astype(jnp.float32)
    old = state["eval"]
    improved = jnp.logical_and(score > old.best, ~old.stopped)
    since = jnp.where(improved, 0, old.since_best + 1)
    stop = jnp.logical_and(config.patience > 0, since >= config.patience)
    new = EvalState(
      best=jnp.where(improved, score, old.best),
      best_step=jnp.where(improved, state["env_steps"], old.best_step),
      since_best=jnp.where(old.stopped, old.since_best, since),
      stopped=jnp.logical_or(old.stopped, stop),
      last=score,
    )
    metrics = {"eval_return": score, "best": new.best, "stopped": new.stopped}
    return {**state, "eval": new, "eval_key": key}, metrics

  return evaluate


def make_experiment(config) -> runner.Experiment:
  """The `runner.Experiment` of `config`."""
  validate(config)
  env = methods_lib.make_env(config)
  method = methods_lib.make_method(config, env)
  checks.multiple_of(
    config, "chunk_steps", method.env_steps_per_call, "one update's steps"
  )

  def init(key, hparams):
    method_key, eval_key = jax.random.split(key)
    nan = jnp.asarray(jnp.nan, jnp.float32)
    return {
      "method": method.init(method_key, hparams["learning_rate"]),
      "hparams": hparams,
      "eval": EvalState(-jnp.inf * jnp.ones((), jnp.float32), 0, 0, False, nan),
      "eval_key": eval_key,
      "env_steps": jnp.zeros((), jnp.int32),
    }

  def train_chunk(state):
    def learn(method_state):
      return method.train(method_state, state["hparams"]["learning_rate"])

    new, metrics = learn(state["method"])
    # A stopped run keeps its parameters and counts nothing (under vmap
    # the chunk is computed for every run and selected).
    stopped = state["eval"].stopped
    new = jax.tree_util.tree_map(
      lambda a, b: jnp.where(stopped, a, b), state["method"], new
    )
    metrics = jax.tree_util.tree_map(
      lambda m: jnp.where(stopped, jnp.zeros_like(m), m), metrics
    )
    steps = state["env_steps"] + method.env_steps_per_call
    return {**state, "method": new, "env_steps": steps}, metrics

  return runner.Experiment(
    name=f"{method.name} on {env.name}",
    init=init,
    train_chunk=train_chunk,
    chunk_steps=config.chunk_steps,
    summarize=summarize,
    evaluate=evaluate_fn(config, method, env),
    eval_every=config.eval_every,
    summarize_eval=lambda m: {
      "eval_return": float(m["eval_return"]),
      "best_eval_return": float(m["best"]),
      "stopped": bool(m["stopped"]),
    },
    finish=finish,
    progress_fields=("episode_return", "eval_return", "best_eval_return"),
    swept_hparams=("learning_rate",),
  )


def summarize(window) -> dict:
  """A record's fields from its window of `ChunkMetrics` (host arrays)."""
  total = {
    name: float(sum(np.asarray(getattr(m, name)) for m in window))
    for name in methods_lib.ChunkMetrics._fields
  }
  episodes = total["episodes"]
  return {
    "episodes": int(episodes),
    "episode_return": total["return_sum"] / episodes if episodes else None,
    "episode_length": total["length_sum"] / episodes if episodes else None,
  }


def finish(state, workdir) -> dict:
  """`summary.json`: the best evaluation and when, the last, the stop."""
  del workdir
  evals = state["eval"]
  best = float(evals.best)
  return {
    "best_eval_return": best if np.isfinite(best) else None,
    "best_eval_step": int(evals.best_step),
    "last_eval_return": float(evals.last),
    "stopped_at_step": int(state["env_steps"]) if evals.stopped else None,
  }


def train(config, workdir: str) -> list[dict]:
  """Runs (or resumes) the experiment; returns its records."""
  return runner.run(config, workdir, make_experiment(config))


__all__ = ["EvalState", "make_experiment", "summarize", "train", "validate"]
