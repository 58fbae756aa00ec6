"""Seeds and swept hyper-parameters as an array axis of the run loop.

`config.num_seeds = S` and, for each hyper-parameter an experiment declares
in `Experiment.swept_hparams` (e.g. `learning_rate`), a list in the plural
field (`config.learning_rates`; empty means the single `learning_rate`) make
`S x L` runs that train as ONE vmapped, jitted program (purejaxrl style).
Run `r` is the single run with seed `config.seed + j` and that value: same
PRNG keys, data stream and curriculum logic. `run_grid` gives the order
(sweep values slowest, seeds fastest).
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from experiments.loop import checks
from experiments.loop import sharding
from experiments.loop.errors import ConfigError

Pytree = Any


def run_grid(config, swept_hparams: tuple[str, ...] = ()) -> list[dict]:
  """The runs of a config, in run-axis order: one dict per run with its
  `seed` and its value of each swept hyper-parameter.

  With learning rates `[a, b]` and 2 seeds from `seed = 0`:
  `[{seed 0, a}, {seed 1, a}, {seed 0, b}, {seed 1, b}]`.
  """
  num_seeds = checks.positive_int("config.num_seeds", config.num_seeds)
  value_lists = []
  for name in swept_hparams:
    listed = config[name + "s"]
    values = list(listed) if listed else [config[name]]
    for value in values:
      if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(
          f"config.{name}s must be a list of numbers, got {listed!r}"
        )
    value_lists.append(values)
  return [
    {"seed": config.seed + j, **dict(zip(swept_hparams, combo))}
    for combo in itertools.product(*value_lists)
    for j in range(num_seeds)
  ]


def nonfinite_leaves(tree: Pytree) -> list[str]:
  """Paths of float leaves holding a NaN or Inf."""
  bad = []
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    leaf = np.asarray(leaf)
    if np.issubdtype(leaf.dtype, np.inexact) and not np.isfinite(leaf).all():
      bad.append(jax.tree_util.keystr(key_path) or "metrics")
  return bad


@functools.lru_cache(maxsize=64)
def _without_hparams(init: Callable) -> Callable:
  """`(key, hparams) -> init(key)`, one per `init`: a second run of the same
  experiment in this process reuses its compiled `init`."""
  return lambda key, hparams: init(key)


@functools.lru_cache(maxsize=64)
def _vmapped(fn: Callable, mesh, in_axes) -> Callable:
  """`sharding.vmap_runs`, one per function: reused, so compiled once."""
  return sharding.vmap_runs(fn, mesh, in_axes=in_axes)


def run_index(tree: Pytree, r: int) -> Pytree:
  return jax.tree_util.tree_map(lambda a: np.asarray(a)[r], tree)


class Runs:
  """An experiment's single-run pieces, vmapped over the runs when there are
  several, and its metrics turned into records (lists over runs).

  Attributes:
    runs: `run_grid`'s list.
    stacked: more than one run (every state leaf has a leading run axis).
    keys, hparams: the arguments of `init`.
    init, train_chunk, evaluate: functions to jit (vmapped when stacked).
  """

  def __init__(self, experiment, runs: list[dict], mesh=None):
    self.runs = runs
    self.stacked = len(runs) > 1
    swept = experiment.swept_hparams
    keys = jnp.stack([jax.random.PRNGKey(r["seed"]) for r in runs])
    hparams = {name: jnp.asarray([r[name] for r in runs]) for name in swept}

    init_one = experiment.init if swept else _without_hparams(experiment.init)

    data_axes = () if experiment.data is None else (None,)
    if self.stacked:
      vmap = lambda fn, in_axes=0: _vmapped(fn, mesh, in_axes)
      self.keys, self.hparams = keys, hparams
      self.init = vmap(init_one)
      self.train_chunk = vmap(experiment.train_chunk, in_axes=(0,) + data_axes)
      self.evaluate = (
        vmap(experiment.evaluate, in_axes=(0,) + data_axes)
        if experiment.evaluate
        else None
      )
    else:
      self.keys = keys[0]
      self.hparams = {name: v[0] for name, v in hparams.items()}
      self.init = init_one
      self.train_chunk = experiment.train_chunk
      self.evaluate = experiment.evaluate

  def per_run(self, fn: Callable[[Any], dict], tree: Any) -> dict:
    """`fn` on each run's slice of `tree`; values become lists over runs."""
    if not self.stacked:
      return fn(tree)
    dicts = [fn(run_index(tree, r)) for r in range(len(self.runs))]
    return {k: [d[k] for d in dicts] for k in dicts[0]}

  def nonfinite_runs(self, metrics: Pytree) -> list[int]:
    return [
      r
      for r in range(len(self.runs))
      if nonfinite_leaves(run_index(metrics, r))
    ]


def progress_value(value: Any) -> Any:
  """A record value for the progress line: with several runs, the mean of
  the finite ones."""
  if isinstance(value, list):
    finite = [
      v for v in value if isinstance(v, (int, float)) and np.isfinite(v)
    ]
    return float(np.mean(finite)) if finite else float("nan")
  return value
