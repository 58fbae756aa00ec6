"""One program of the `compare_suite` target: a method trained online on a
task of `rtrl.tasks.suite`, its seeds vmapped, with an exact-RTRL shadow
on the learner's own trajectory (`make_online_trainer(...,
shadow_every=K)`), so that every K steps the method's gradient is set
beside exact RTRL's for the same weights, states and loss.

TBPTT-k gets the same measurement: between its updates the weights are
fixed, and its gradient of the step's loss `L_t` is exact RTRL's with the
tangent zeroed at the window's start, so a truncated exact tangent (reset
at every window) is compared with the untruncated one, step by step, while
`bptt.make_tbptt_trainer` trains.

A method is data (`Method`): the registry name, its hyper-parameters and
the cell's settings (e.g. `recurrent_density=0.1`). Its step time is
measured separately, without the shadow (whose exact RTRL would dominate
it), and its memory is the floats of its tangent per example.
"""

from __future__ import annotations

from collections.abc import Mapping
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl import readout as readouts
from rtrl.tasks import suite
from rtrl.tasks import task_metrics


class Method(NamedTuple):
  """A method of the comparison, as data."""

  label: str  # legend and table name, e.g. '4-OK', 'SnAp-2 (90% sparse)'
  estimator: str  # `rtrl.estimators.make` name, or 'tbptt'
  hparams: Mapping[str, Any] = {}  # make's keywords, or {'truncation': k}
  cell: Mapping[str, Any] = {}  # the cell's keywords (recurrent_density)
  cell_name: str = ""  # '' : the comparison's cell; else this one


class Settings(NamedTuple):
  """What every program of one comparison shares."""

  cell: str  # `cells.make` name
  hidden_size: int
  batch_size: int
  seeds: int  # vmapped: one program trains them all
  num_steps: int
  shadow_every: int  # compare with exact RTRL every this many steps
  learning_rate: float  # Adam's, every method
  timing_steps: int  # steps of the timed run (without the shadow)


class Outcome(NamedTuple):
  """One method on one task, per seed (numpy)."""

  steps: np.ndarray  # (R,) 1-based steps that compared with exact RTRL
  cosine: np.ndarray  # (seeds, R), NaN where a gradient was zero
  norm_ratio: np.ndarray  # (seeds, R) ||estimate|| / ||exact||
  loss: np.ndarray  # (seeds, num_steps) mean loss per step (NaN: no target)
  metric_sums: np.ndarray  # (seeds, num_steps, 2) the task metric's sums
  estimator_metrics: dict  # name -> (seeds, R)
  ms_per_step: float  # the program's step (all seeds), no shadow
  tangent_floats: int  # per example
  shadow_seconds: float  # the shadowed program's compile and run


def make_cell(settings: Settings, method: Method):
  """The cell `method` trains (the comparison's, with its settings)."""
  name = method.cell_name or settings.cell
  return cells.make(name, settings.hidden_size, **dict(method.cell))


def tangent_floats(cell, method: Method, input_size: int) -> int:
  """Floats of the method's tangent per example (TBPTT: the window's
  cell states it stores for the backward pass)."""
  state0 = cell.initial_state()
  state_floats = sum(int(np.size(a)) for a in jax.tree_util.tree_leaves(state0))
  if method.estimator == "tbptt":
    return int(method.hparams["truncation"]) * state_floats
  params = jax.eval_shape(
    lambda key: cell.init(key, input_size), jax.random.PRNGKey(0)
  )
  estimator = estimators.make(method.estimator, cell, **dict(method.hparams))
  tstate = jax.eval_shape(estimator.init, params, state0, jax.random.PRNGKey(0))
  return sum(
    int(np.prod(leaf.shape))
    for leaf in jax.tree_util.tree_leaves(
      tstate.tangent if hasattr(tstate, "tangent") else tstate
    )
    if jnp.issubdtype(leaf.dtype, jnp.floating)
  )


def _init_params(cell, task, key):
  cell_key, readout_key = jax.random.split(key)
  return {
    "cell": cell.init(cell_key, task.input_size),
    "readout": readouts.linear().init(
      readout_key, cell.hidden_size, task.output_size
    ),
  }


def make_trainer(task, cell, method: Method, settings: Settings, shadow_every):
  """The method's trainer (TBPTT's, or the online one with the shadow)."""
  optimizer = optax.adam(settings.learning_rate)
  if method.estimator == "tbptt":
    return bptt.make_tbptt_trainer(
      cell,
      optimizer,
      int(method.hparams["truncation"]),
      readout=readouts.linear(),
      loss=task.loss,
    )
  return online.make_online_trainer(
    cell,
    estimators.make(method.estimator, cell, **dict(method.hparams)),
    optimizer,
    readout=readouts.linear(),
    loss=task.loss,
    shadow_every=shadow_every,
  )


def _online_program(task, cell, method, settings):
  """`seed key -> per-step outputs` of the online trainer."""
  trainer = make_trainer(task, cell, method, settings, settings.shadow_every)

  def one_seed(key):
    params_key, stream_key, train_key = jax.random.split(key, 3)
    state = trainer.init(
      _init_params(cell, task, params_key), train_key, settings.batch_size
    )
    stream = task.init_stream(stream_key, settings.batch_size)
    metric_state = task.metric.init(settings.batch_size)
    _, out = suite.train_chunk(
      task, cell, trainer, state, stream, metric_state, settings.num_steps
    )
    return out

  return one_seed


def _tbptt_program(task, cell, method, settings):
  """`seed key -> per-step outputs` of TBPTT, with the truncated-vs-exact
  shadow (the module docstring)."""
  truncation = int(method.hparams["truncation"])
  shadow_every = settings.shadow_every
  trainer = make_trainer(task, cell, method, settings, 0)
  exact = estimators.make("rtrl", cell)
  batch = settings.batch_size

  def one_seed(key):
    params_key, stream_key, train_key = jax.random.split(key, 3)
    params = _init_params(cell, task, params_key)
    state = trainer.init(params, train_key, batch)
    stream = task.init_stream(stream_key, batch)
    _, chunk = task.chunk(stream, settings.num_steps)
    windows = jax.tree_util.tree_map(
      lambda a: a.reshape((-1, truncation) + a.shape[1:]), chunk
    )
    keys = jax.random.split(train_key, batch)
    full = jax.vmap(exact.init, in_axes=(None, None, 0))(
      params["cell"], cell.initial_state(), keys
    )

    def window(carry, window_batches):
      state, full, metric_state = carry
      truncated = jax.vmap(exact.reset)(full)

      def step(inner, step_batch):
        tstates, cell_state, metric_state, step = inner
        report = (step + 1) % shadow_every == 0
        tstates, cell_state, _, _, compared = online.shadow_estimate_step(
          cell,
          exact,
          exact,
          state.params,
          tstates,
          cell_state,
          step_batch,
          report,
          readout=readouts.linear(),
          loss=task.loss,
        )
        prediction = suite.predictions(
          cell, state.params["readout"], cell_state
        )
        metric_state, sums = task.metric.update(
          metric_state, prediction, step_batch
        )
        return (tstates, cell_state, metric_state, step + 1), (compared, sums)

      inner0 = (
        online.ShadowTangents(truncated, full),
        state.cell_state,
        metric_state,
        state.step,
      )
      (tstates, _, metric_state, _), (compared, sums) = jax.lax.scan(
        step, inner0, window_batches
      )
      state, metrics = trainer.step(state, window_batches)
      return (state, tstates.exact, metric_state), (metrics, compared, sums)

    carry = (state, full, task.metric.init(batch))
    _, (metrics, compared, sums) = jax.lax.scan(window, carry, windows)
    flat = lambda tree: jax.tree_util.tree_map(
      lambda a: a.reshape((-1,) + a.shape[2:]), tree
    )
    metrics, compared, sums = flat(metrics), flat(compared), flat(sums)
    return suite.ChunkMetrics(
      online.ShadowStepMetrics(*metrics, *compared), sums
    )

  return one_seed


def program(task, cell, method: Method, settings: Settings):
  """The jitted `(seed keys (seeds, 2)) -> ChunkMetrics` (leaves `(seeds,
  num_steps)`) of `method` on `task`, with the shadow."""
  build = _tbptt_program if method.estimator == "tbptt" else _online_program
  return jax.jit(jax.vmap(build(task, cell, method, settings)))


def timing_program(task, cell, method: Method, settings: Settings):
  """The jitted `(seed keys) -> StepMetrics` of `settings.timing_steps`
  training steps, no shadow and no task metric: the method's own cost."""
  trainer = make_trainer(task, cell, method, settings, 0)

  def one_seed(key):
    params_key, stream_key, train_key = jax.random.split(key, 3)
    state = trainer.init(
      _init_params(cell, task, params_key), train_key, settings.batch_size
    )
    stream = task.init_stream(stream_key, settings.batch_size)
    _, chunk = task.chunk(stream, settings.timing_steps)
    return trainer.run(state, chunk)[1]

  return jax.jit(jax.vmap(one_seed))


def _block(tree):
  return jax.tree_util.tree_map(lambda a: a.block_until_ready(), tree)


# The shadowed programs run once each and are not timed: XLA's cheapest
# backend optimisation compiles them ~3x faster (same values up to rounding).
SHADOW_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}


def run_method(
  task: suite.SuiteTask,
  method: Method,
  settings: Settings,
  seed: int = 0,
  timed: bool = True,
) -> Outcome:
  """Trains `method` on `task` (all seeds at once) with the shadow, then,
  where `timed`, times its step without it (else `ms_per_step` is NaN)."""
  cell = make_cell(settings, method)
  keys = jax.random.split(jax.random.PRNGKey(seed), settings.seeds)
  start = time.perf_counter()
  compiled = (
    program(task, cell, method, settings)
    .lower(keys)
    .compile(compiler_options=SHADOW_COMPILER_OPTIONS)
  )
  out = _block(compiled(keys))
  seconds = time.perf_counter() - start
  ms_per_step = (
    time_step(task, cell, method, settings, keys) if timed else float("nan")
  )
  shadow = out.loss
  reported = np.asarray(shadow.reported[0])
  exact_norm = np.asarray(shadow.exact_norm)[:, reported]
  weight = np.asarray(shadow.weight_sum)
  loss = np.asarray(shadow.loss_sum) / np.where(weight > 0, weight, np.nan)
  return Outcome(
    steps=np.flatnonzero(reported) + 1,
    cosine=np.asarray(shadow.cosine)[:, reported],
    norm_ratio=np.asarray(shadow.estimate_norm)[:, reported]
    / np.where(exact_norm > 0, exact_norm, np.nan),
    loss=loss,
    metric_sums=np.stack(
      [np.asarray(out.metric.value_sum), np.asarray(out.metric.weight_sum)],
      axis=-1,
    ),
    estimator_metrics={
      k: np.asarray(v)[:, reported] for k, v in shadow.estimator_metrics.items()
    },
    ms_per_step=ms_per_step,
    tangent_floats=tangent_floats(cell, method, task.input_size),
    shadow_seconds=seconds,
  )


def time_step(task, cell, method, settings: Settings, keys) -> float:
  """Milliseconds per step of the method's program without the shadow
  (all seeds), over `settings.timing_steps` steps after compiling: the
  fastest of `TIMING_REPEATS` runs (a shared machine only ever slows one)."""
  run = timing_program(task, cell, method, settings)
  _block(run(keys))
  seconds = []
  for _ in range(TIMING_REPEATS):
    start = time.perf_counter()
    _block(run(keys))
    seconds.append(time.perf_counter() - start)
  return min(seconds) / settings.timing_steps * 1e3


TIMING_REPEATS = 5


def metric_value(metric_sums: np.ndarray, last: int) -> np.ndarray:
  """`(seeds,)` task metric over the last `last` steps (`task_metrics.value`
  of each seed's sums)."""
  window = metric_sums[:, -last:]
  return np.array(
    [
      float(
        task_metrics.value(
          task_metrics.MetricSums(jnp.asarray(w[:, 0]), jnp.asarray(w[:, 1]))
        )
      )
      for w in window
    ]
  )


def method_of(config) -> Method:
  """The `Method` a plan config (`program_config`) describes."""
  return Method(
    config.label,
    config.estimator,
    dict(config.hparams),
    dict(config.cell_settings),
    config.cell_name,
  )


def program_config(task_name: str, task_settings: dict, method, settings):
  """One program as a flat config, for `--plan`'s measuring child
  (`experiments/reproduce/plan.py` runs `train` on a short version)."""
  import ml_collections  # pylint: disable=g-import-not-at-top

  return ml_collections.ConfigDict(
    {
      "task": task_name,
      "task_settings": dict(task_settings),
      "label": method.label,
      "estimator": method.estimator,
      "hparams": dict(method.hparams),
      "cell_settings": dict(method.cell),
      "cell_name": method.cell_name,
      "truncation": int(method.hparams.get("truncation", 0)),
      **settings._asdict(),
      "chunk_steps": settings.timing_steps,
      "log_every": settings.timing_steps,
      # What plan.measure counts runs by: the seeds, one learning rate.
      "seed": 0,
      "num_seeds": settings.seeds,
      "learning_rates": (),
    }
  )


def train(config, workdir: str) -> None:
  """`--plan`'s measurement: the program's training steps without the
  shadow, `config.num_steps` in chunks of `config.chunk_steps`, one
  `metrics.jsonl` record (with `steps_per_second`) per chunk."""
  from experiments.loop import workdir as workdir_lib  # pylint: disable=g-import-not-at-top

  settings = Settings(
    **{field: config[field] for field in Settings._fields}
  )._replace(timing_steps=config.chunk_steps)
  task = suite.make_task(config.task, **dict(config.task_settings))
  method = method_of(config)
  cell = make_cell(settings, method)
  run = timing_program(task, cell, method, settings)
  keys = jax.random.split(jax.random.PRNGKey(0), settings.seeds)
  os.makedirs(workdir, exist_ok=True)
  writer = workdir_lib.MetricsWriter(workdir)
  for step in range(
    config.chunk_steps, config.num_steps + 1, config.chunk_steps
  ):
    start = time.perf_counter()
    _block(run(keys))
    elapsed = time.perf_counter() - start
    writer.write(
      {"step": step, "steps_per_second": config.chunk_steps / elapsed}
    )
