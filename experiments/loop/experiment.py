"""`Experiment`: what an experiment gives the run loop (`runner.run`).

An experiment (Copy task, PTB, MNIST, ...) supplies only pure single-run
pieces; the loop does the rest (see `runner.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax

Pytree = Any


class Experiment(NamedTuple):
  """What an experiment gives the run loop (see the module docstring).

  Attributes:
    name: printed when the run starts.
    init: `key -> state`, a pytree of arrays for one run; with
      `swept_hparams`, `(key, hparams) -> state` where `hparams` maps each
      swept name to this run's value (a scalar array: keep the dict at
      `state['hparams']` and read it in `train_chunk`; on resume the runner
      puts the config's values there).
    train_chunk: pure, jittable `state -> (state, metrics)` advancing exactly
      `chunk_steps` training steps; `metrics` is a pytree of arrays.
    chunk_steps: training steps per `train_chunk` call.
    summarize: host function from the list of per-chunk metrics (NumPy
      pytrees) since the last record to a dict of numbers for that record.
    evaluate: optional pure, jittable `state -> (state, eval_metrics)`, run
      every `eval_every` steps; may update the state (e.g. keep the best
      parameters).
    eval_every: training steps between evaluations (a multiple of
      `chunk_steps`; the experiment's `config.eval_every`); None without
      `evaluate`.
    summarize_eval: host function from eval metrics (NumPy) to record fields.
    finish: optional host function `(state, workdir) -> dict`, written as
      `summary.json` at the end of the run.
    progress_fields: record fields echoed on the progress line.
    examples_per_step: when positive, records get `examples_per_second`.
    data: optional pytree of arrays (a dataset) given to `train_chunk` and
      `evaluate` as a second argument, `train_chunk(state, data)`, as a jit
      argument: arrays a jitted function closes over are embedded in the
      program as constants (a 600 MB CIFAR-10 array takes minutes to compile).
      Never checkpointed.
    swept_hparams: config fields that may take a list of values (in the
      plural field, e.g. `learning_rates`), vmapped as runs.
    batch_axes: optional `state -> tree` giving, per leaf of one run's state,
      the index of its batch axis (split over the `data` mesh axis) or None
      (replicated). Without it the state is replicated.
    batch_size: the batch that the `data` mesh axis splits (checked to
      divide over it).
    resume_defaults: the config fields this experiment added after runs
      were saved, each at the value that reproduces what those runs
      computed: a saved `config.json` without the field counts as that
      value, so those runs resume (`workdir.config_differences`).
    chance_loss: `(record field, value)`: the field holding the training
      loss and its value for an uninformed prediction (uniform over the
      classes): the divergence bound's unit (`health.py`). None: no
      divergence check.
  """

  name: str
  init: Callable[[jax.Array], Pytree]
  train_chunk: Callable[[Pytree], tuple[Pytree, Pytree]]
  chunk_steps: int
  summarize: Callable[[list[Pytree]], dict]
  evaluate: Callable[[Pytree], tuple[Pytree, Pytree]] | None = None
  eval_every: int | None = None
  summarize_eval: Callable[[Pytree], dict] | None = None
  finish: Callable[[Pytree, str], dict] | None = None
  progress_fields: tuple[str, ...] = ()
  examples_per_step: int = 0
  data: Pytree = None
  swept_hparams: tuple[str, ...] = ()
  batch_axes: Callable[[Pytree], Pytree] | None = None
  batch_size: int | None = None
  resume_defaults: Mapping[str, Any] | None = None
  chance_loss: tuple[str, float] | None = None
