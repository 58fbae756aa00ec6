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
the cell's settings (e.g. `recurrent_density=0.1`), which are fields of the
suite task's config (`method_config`: `configs/suite_task.py` for the task
with the comparison's `Settings` and the method's fields), so the cell, the
parameters, the estimator and the trainer come from the shared setup
(`experiments/online/setup.py`) as in `python -m experiments.suite_task`,
and `--plan` measures a run of that experiment through the shared run loop
(`train`). Its step time is measured separately,
without the shadow (whose exact RTRL would dominate it), and its memory is
the floats of its tangent per example.
"""

from __future__ import annotations

from collections.abc import Mapping
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.loop import config_files
from experiments.online import setup as online_setup
from experiments.online import suite_experiment
from rtrl import estimators
from rtrl import online
from rtrl.tasks import suite
from rtrl.tasks import task_metrics


class Method(NamedTuple):
  """A method of the comparison, as data."""

  label: str  # legend and table name, e.g. '4-OK', 'SnAp-2 (90% sparse)'
  estimator: str  # `rtrl.estimators.make` name, or 'tbptt'
  hparams: Mapping[str, Any] = {}  # make's keywords, or {'truncation': k}
  cell: Mapping[str, Any] = {}  # the cell's keywords (recurrent_density)
  cell_name: str = ""  # '' : the comparison's cell; else this one

  def fields(self) -> dict[str, Any]:
    """The suite config's fields this method sets."""
    fields = {"estimator": self.estimator, **self.hparams, **self.cell}
    if self.cell_name:
      fields["cell"] = self.cell_name
    return fields


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


def method_config(
  task: suite.SuiteTask, method: Method, settings: Settings
) -> ml_collections.ConfigDict:
  """`configs/suite_task.py`'s config for `task` (its settings as built)
  with the comparison's `settings` and `method`'s fields. Its shadow is the
  online trainer's (`shadow_every`); TBPTT's is `_tbptt_program`'s."""
  config = config_files.load_config("suite_task", task.name)
  config.task_settings = ml_collections.ConfigDict(dict(task.settings))
  config.update(
    cell=settings.cell,
    hidden_size=settings.hidden_size,
    batch_size=settings.batch_size,
    num_seeds=settings.seeds,
    num_steps=settings.num_steps,
    learning_rate=settings.learning_rate,
    shadow_every=0 if method.estimator == "tbptt" else settings.shadow_every,
  )
  config.update(method.fields())
  return config


def tangent_floats(config, cell, input_size: int) -> int:
  """Floats of the method's tangent per example (TBPTT: the window's
  cell states it stores for the backward pass)."""
  state0 = cell.initial_state()
  state_floats = sum(int(np.size(a)) for a in jax.tree_util.tree_leaves(state0))
  if config.estimator == "tbptt":
    return config.truncation * state_floats
  params = jax.eval_shape(
    lambda key: cell.init(key, input_size), jax.random.PRNGKey(0)
  )
  estimator = online_setup.make_estimator(config, cell)
  tstate = jax.eval_shape(estimator.init, params, state0, jax.random.PRNGKey(0))
  return sum(
    int(np.prod(leaf.shape))
    for leaf in jax.tree_util.tree_leaves(
      tstate.tangent if hasattr(tstate, "tangent") else tstate
    )
    if jnp.issubdtype(leaf.dtype, jnp.floating)
  )


def _initial_state(config, cell, task, trainer, key):
  """One seed's `(trainer state, stream, metric state)`, as the suite
  experiment starts a run (`suite_experiment.initial_state`), its keys
  split as the comparison's published runs drew them: parameters, stream,
  trainer."""
  params_key, stream_key, train_key = jax.random.split(key, 3)
  keys = (params_key, train_key, stream_key)
  return suite_experiment.initial_state(config, cell, task, trainer, keys)


def _trainer(config, cell, task, shadow_every: int):
  return online_setup.make_trainer(
    config, cell, loss=task.loss, shadow_every=shadow_every
  )


def _online_program(task, cell, method, settings):
  """`seed key -> per-step outputs` of the online trainer."""
  config = method_config(task, method, settings)
  trainer = _trainer(config, cell, task, config.shadow_every)
  readout = online_setup.make_readout(config)

  def one_seed(key):
    state, stream, metric_state = _initial_state(
      config, cell, task, trainer, key
    )
    _, out = suite.train_chunk(
      task,
      cell,
      trainer,
      state,
      stream,
      metric_state,
      settings.num_steps,
      readout,
    )
    return out

  return one_seed


def _tbptt_program(task, cell, method, settings):
  """`seed key -> per-step outputs` of TBPTT, with the truncated-vs-exact
  shadow (the module docstring)."""
  config = method_config(task, method, settings)
  truncation = config.truncation
  shadow_every = settings.shadow_every
  trainer = _trainer(config, cell, task, 0)
  readout = online_setup.make_readout(config)
  exact = estimators.make("rtrl", cell)
  batch = settings.batch_size

  def one_seed(key):
    state, stream, metric_state = _initial_state(
      config, cell, task, trainer, key
    )
    params = state.params
    train_key = jax.random.split(key, 3)[2]  # _initial_state's trainer key
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
          readout=readout,
          loss=task.loss,
        )
        prediction = suite.predictions(
          cell, state.params["readout"], cell_state, readout
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

    carry = (state, full, metric_state)
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
  config = method_config(task, method, settings)
  config.shadow_every = 0
  trainer = _trainer(config, cell, task, 0)

  def one_seed(key):
    state, stream, _ = _initial_state(config, cell, task, trainer, key)
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
  config = method_config(task, method, settings)
  cell = online_setup.make_cell(config)
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
    tangent_floats=tangent_floats(config, cell, task.input_size),
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


def program_config(task_name: str, task_settings: dict, method, settings):
  """One program as the suite experiment's config, without the shadow, for
  `--plan`'s measuring child (`experiments/reproduce/plan.py` runs `train`
  on a short version of it)."""
  task = suite.make_task(task_name, **dict(task_settings))
  config = method_config(task, method, settings)
  config.update(
    shadow_every=0,
    chunk_steps=settings.timing_steps,
    log_every=settings.timing_steps,
  )
  return config


def train(config, workdir: str) -> dict:
  """`--plan`'s measurement: the program without the shadow as a run of
  the suite experiment (`python -m experiments.suite_task`), which writes a
  `metrics.jsonl` record with `steps_per_second` every `log_every` steps."""
  return suite_experiment.train(config, workdir)
