"""The task suite: one registry of the small synthetic tasks online-learning
papers report on, each a `SuiteTask` that a comparison can program against.

    task = suite.make_task("adding", length=100)
    stream = task.init_stream(key, batch_size)
    stream, chunk = task.chunk(stream, num_steps)   # time-major StepBatch
    trainer = online.make_online_trainer(cell, estimator, optimizer,
                                         loss=task.loss)
    params = {"cell": cell.init(k1, task.input_size),
              "readout": readout.linear().init(k2, n, task.output_size)}
    state = trainer.init(params, k3, batch_size)
    state, step_metrics = trainer.run(state, chunk)  # losses only, or:
    (state, stream, metric_state), out = suite.train_chunk(
        task, cell, trainer, state, stream,
        task.metric.init(batch_size), num_steps)
    task_metrics.value(out.metric)                   # e.g. the MSE

The API (fixed: later versions only add to it):

- `SuiteTask` fields: `name`; `input_size`; `output_size` (the readout's
  outputs: logits for the classification tasks); `loss`, a per-example
  `rtrl.losses` function (`softmax_cross_entropy` with integer targets,
  or `squared_error` with `(output_size,)` float targets); `readout`, the
  readout kind the task is meant for ("linear"); `init_stream(key,
  batch_size) -> stream`, a pytree whose every leaf has the leading lane
  axis B; `chunk(stream, num_steps) -> (stream, StepBatch)`, the next
  `num_steps` steps, leaves `(num_steps, B, ...)`, `resets` True where a
  lane starts a sequence (as `copy_task.generate`; jittable, the sizes
  static); `metric`, a `task_metrics.Metric` whose state also has the lane
  axis B; `settings`, the keyword settings it was built with, defaults
  filled in.
- `TASKS`: name -> builder `(**settings) -> SuiteTask`, each setting's
  default the main peer's (sonaradarcn/sketched-rtrl's, see each task's
  module); `names()`; `make_task(name, **settings)` (a ValueError names an
  unknown task or setting).
- `predictions(cell, readout_params, cell_state, readout=None)`: `(B,
  output_size)` readout outputs; `train_chunk(...)`: online training steps
  with the metric of the predictions each step scored; `forward_chunk(...)`:
  the same at fixed parameters (TBPTT windows, frozen evaluation).

The tasks, each in its own module with the peers' settings beside it
(docs/results/task_suite.md gathers them):

  adding           `rtrl.tasks.adding`: sum of two marked values at the
                   last step, T = 100; MSE vs 1/6 (predicting 1).
  copy_memory      `rtrl.tasks.copy_memory`: recall 5 of 8 symbols after a
                   delay of 40 (or Arjovsky et al.'s protocol); recall
                   accuracy vs chance 1/8.
  rotation         `rtrl.tasks.rotation`: `R^(t+1) v0` of a fixed random
                   rotation of R^8 at every step, T = 64; MSE vs 1/8.
  rotation_recall  the same with targets at the last 8 steps only.
  anbn             `rtrl.tasks.anbn`: next symbol of a^n b^n, n in 1..16;
                   fraction of sequences solved (or per-step accuracy).
  henon            `rtrl.tasks.henon`: next x of the Hénon map; NMSE vs 1.
  lorenz           `rtrl.tasks.lorenz`: next x of the Lorenz system every
                   0.02 time units; NMSE vs 1 (last value: 0.0106).
  mackey_glass     `rtrl.tasks.series`: next Mackey-Glass value a time unit
                   later; NMSE vs 1 (last value: 0.021).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl import losses
from rtrl import online
from rtrl import readout as readouts
from rtrl import validation
from rtrl.cells import Cell
from rtrl.online import StepBatch
from rtrl.online import StepMetrics
from rtrl.tasks import adding as adding_task
from rtrl.tasks import anbn as anbn_task
from rtrl.tasks import copy_memory as copy_memory_task
from rtrl.tasks import henon as henon_task
from rtrl.tasks import lorenz as lorenz_task
from rtrl.tasks import rotation as rotation_task
from rtrl.tasks import series as series_task
from rtrl.tasks import task_metrics


class SuiteTask(NamedTuple):
  """A suite task (see the module docstring for each field's contract)."""

  name: str
  input_size: int
  output_size: int
  loss: losses.Loss
  readout: str
  init_stream: Callable[[jax.Array, int], Any]
  chunk: Callable[[Any, int], tuple[Any, StepBatch]]
  metric: task_metrics.Metric
  settings: dict


def _adding(length: int = 100) -> SuiteTask:
  adding_task.check_length(length)
  return SuiteTask(
    name="adding",
    input_size=adding_task.INPUT_SIZE,
    output_size=adding_task.OUTPUT_SIZE,
    loss=losses.squared_error,
    readout="linear",
    init_stream=lambda key, batch_size: adding_task.stream_init(
      key, batch_size, length
    ),
    chunk=lambda stream, num_steps: adding_task.chunk(
      stream, num_steps, length
    ),
    metric=adding_task.metric(),
    settings={"length": length},
  )


def _copy_memory(
  num_symbols: int = 8,
  num_recall: int = 5,
  delay: int = 40,
  protocol: str = "recall",
) -> SuiteTask:
  settings = dict(
    num_symbols=num_symbols,
    num_recall=num_recall,
    delay=delay,
    protocol=protocol,
  )
  args = (num_symbols, num_recall, delay, protocol)
  copy_memory_task.check_settings(*args)
  input_size, output_size = copy_memory_task.sizes(num_symbols, protocol)
  return SuiteTask(
    name="copy_memory",
    input_size=input_size,
    output_size=output_size,
    loss=losses.softmax_cross_entropy,
    readout="linear",
    init_stream=lambda key, batch_size: copy_memory_task.stream_init(
      key, batch_size, *args
    ),
    chunk=lambda stream, num_steps: copy_memory_task.chunk(
      stream, num_steps, *args
    ),
    metric=copy_memory_task.metric(num_symbols),
    settings=settings,
  )


def _rotation_task(name, dim, length, recall, rotation_seed) -> SuiteTask:
  settings = dict(
    dim=dim, length=length, recall=recall, rotation_seed=rotation_seed
  )
  args = (dim, length, recall, rotation_seed)
  rotation_task.check_settings(dim, length, recall)
  validation.nonnegative_int("rotation_seed", rotation_seed)
  return SuiteTask(
    name=name,
    input_size=dim + 1,
    output_size=dim,
    loss=losses.squared_error,
    readout="linear",
    init_stream=lambda key, batch_size: rotation_task.stream_init(
      key, batch_size, *args
    ),
    chunk=lambda stream, num_steps: rotation_task.chunk(
      stream, num_steps, *args
    ),
    metric=rotation_task.metric(dim),
    settings=settings,
  )


def _rotation(
  dim: int = 8, length: int = 64, recall: int = 0, rotation_seed: int = 0
) -> SuiteTask:
  return _rotation_task("rotation", dim, length, recall, rotation_seed)


def _rotation_recall(
  dim: int = 8, length: int = 64, recall: int = 8, rotation_seed: int = 0
) -> SuiteTask:
  return _rotation_task("rotation_recall", dim, length, recall, rotation_seed)


def _anbn(
  n_min: int = 1,
  n_max: int = 16,
  start_symbol: bool = False,
  metric: str = "sequences_solved",
) -> SuiteTask:
  settings = dict(n_min=n_min, n_max=n_max, start_symbol=start_symbol)
  args = (n_min, n_max, start_symbol)
  anbn_task.check_settings(n_min, n_max)
  return SuiteTask(
    name="anbn",
    input_size=anbn_task.input_size(start_symbol),
    output_size=anbn_task.NUM_OUTPUTS,
    loss=losses.softmax_cross_entropy,
    readout="linear",
    init_stream=lambda key, batch_size: anbn_task.stream_init(
      key, batch_size, *args
    ),
    chunk=lambda stream, num_steps: anbn_task.chunk(stream, num_steps, *args),
    metric=anbn_task.metric(metric, n_min, n_max),
    settings={**settings, "metric": metric},
  )


def _henon(sequence_length: int = 200) -> SuiteTask:
  henon_task.dynamical_streams.check_sequence_length(sequence_length)
  return SuiteTask(
    name="henon",
    input_size=1,
    output_size=1,
    loss=losses.squared_error,
    readout="linear",
    init_stream=henon_task.stream_init,
    chunk=lambda stream, num_steps: henon_task.chunk(
      stream, num_steps, sequence_length
    ),
    metric=henon_task.metric(),
    settings={"sequence_length": sequence_length},
  )


def _lorenz(sample_every: int = 2, sequence_length: int = 200) -> SuiteTask:
  lorenz_task.dynamical_streams.check_sequence_length(sequence_length)
  validation.positive_int("sample_every", sample_every)
  return SuiteTask(
    name="lorenz",
    input_size=1,
    output_size=1,
    loss=losses.squared_error,
    readout="linear",
    init_stream=lorenz_task.stream_init,
    chunk=lambda stream, num_steps: lorenz_task.chunk(
      stream, num_steps, sample_every, sequence_length
    ),
    metric=lorenz_task.metric(),
    settings={"sample_every": sample_every, "sequence_length": sequence_length},
  )


def _mackey_glass(
  sample_every: int = 10, sequence_length: int = 200
) -> SuiteTask:
  series_task.dynamical_streams.check_sequence_length(sequence_length)
  validation.positive_int("sample_every", sample_every)
  return SuiteTask(
    name="mackey_glass",
    input_size=1,
    output_size=1,
    loss=losses.squared_error,
    readout="linear",
    init_stream=series_task.stream_init,
    chunk=lambda stream, num_steps: series_task.stream_chunk(
      stream, num_steps, sample_every, sequence_length
    ),
    metric=task_metrics.mse(1.0, "predict the mean"),
    settings={"sample_every": sample_every, "sequence_length": sequence_length},
  )


TASKS: dict[str, Callable[..., SuiteTask]] = {
  "adding": _adding,
  "copy_memory": _copy_memory,
  "rotation": _rotation,
  "rotation_recall": _rotation_recall,
  "anbn": _anbn,
  "henon": _henon,
  "lorenz": _lorenz,
  "mackey_glass": _mackey_glass,
}


def names() -> tuple[str, ...]:
  """The registered task names."""
  return tuple(TASKS)


def make_task(name: str, **settings) -> SuiteTask:
  """The task `name` with `settings` (each task's module lists them).

  Raises:
    ValueError: `name` is not registered, a setting is unknown, or a
      setting's value is out of range (naming it).
  """
  if name not in TASKS:
    raise ValueError(f"name must be one of {names()}, got {name!r}")
  builder = TASKS[name]
  known = builder.__code__.co_varnames[: builder.__code__.co_argcount]
  unknown = sorted(set(settings) - set(known))
  if unknown:
    raise ValueError(
      f"settings {unknown} are not settings of task {name!r}; its "
      f"settings: {tuple(known)}"
    )
  return builder(**settings)


def predictions(
  cell: Cell, readout_params: Any, cell_state: Any, readout=None
) -> jax.Array:
  """`(B, output_size)` readout outputs at the batched `cell_state`."""
  readout = readouts.linear() if readout is None else readout
  hidden = jax.vmap(cell.output)(cell_state)
  return jax.vmap(readout.apply, in_axes=(None, 0))(readout_params, hidden)


class ChunkMetrics(NamedTuple):
  """Per-step outputs of `train_chunk` / `forward_chunk`, leaves
  `(num_steps,)`."""

  loss: StepMetrics  # the trainer's (loss_sum, weight_sum)
  metric: task_metrics.MetricSums  # the task metric's sums


def train_chunk(
  task: SuiteTask,
  cell: Cell,
  trainer: online.Trainer,
  trainer_state: Any,
  stream: Any,
  metric_state: Any,
  num_steps: int,
  readout=None,
):
  """`num_steps` online steps of `trainer` (one update a step) on the
  task's next chunk, scoring each step's prediction (the readout before
  that step's update, at the state after it: what the loss was taken of).

  Returns:
    `((trainer_state, stream, metric_state), ChunkMetrics)`.
  """
  stream, batches = task.chunk(stream, num_steps)

  def body(carry, batch):
    trainer_state, metric_state = carry
    scoring = trainer_state.params["readout"]
    trainer_state, step_metrics = trainer.step(trainer_state, batch)
    prediction = predictions(cell, scoring, trainer_state.cell_state, readout)
    metric_state, sums = task.metric.update(metric_state, prediction, batch)
    return (trainer_state, metric_state), ChunkMetrics(step_metrics, sums)

  (trainer_state, metric_state), outputs = jax.lax.scan(
    body, (trainer_state, metric_state), batches
  )
  return (trainer_state, stream, metric_state), outputs


def forward_chunk(
  task: SuiteTask,
  cell: Cell,
  params: dict,
  cell_state: Any,
  metric_state: Any,
  batches: StepBatch,
  readout=None,
):
  """The network at fixed `params` over a time-major chunk: each step's
  loss and metric, no update.

  Returns:
    `((cell_state, metric_state), ChunkMetrics)`.
  """
  batch_size = batches.resets.shape[1]
  initial = online.broadcast_state(cell.initial_state(), batch_size)

  def body(carry, batch):
    cell_state, metric_state = carry
    cell_state = online.where_reset(batch.resets, initial, cell_state)
    cell_state = jax.vmap(cell.step, in_axes=(None, 0, 0))(
      params["cell"], cell_state, batch.inputs
    )
    prediction = predictions(cell, params["readout"], cell_state, readout)
    per_example = jax.vmap(task.loss)(prediction, batch.targets)
    weights = batch.weights.astype(per_example.dtype)
    step_metrics = StepMetrics(jnp.sum(weights * per_example), jnp.sum(weights))
    metric_state, sums = task.metric.update(metric_state, prediction, batch)
    return (cell_state, metric_state), ChunkMetrics(step_metrics, sums)

  return jax.lax.scan(body, (cell_state, metric_state), batches)


# Presets, not the library's: sketched-rtrl's protocol and steps per task
# are `configs/suite_task.py`'s fields.
_MOVED_TO_CONFIGS = ("PEER_PROTOCOL", "PEER_NUM_STEPS")


def __getattr__(name: str):
  if name in _MOVED_TO_CONFIGS:
    raise AttributeError(
      f"rtrl.tasks.suite.{name} was removed: the peer's training protocol "
      "and steps per task are the presets of configs/suite_task.py"
    )
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
  "ChunkMetrics",
  "SuiteTask",
  "TASKS",
  "forward_chunk",
  "make_task",
  "names",
  "predictions",
  "train_chunk",
]
