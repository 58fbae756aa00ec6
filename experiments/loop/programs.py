"""The run loop's compiled programs: an experiment's (vmapped) functions
jitted for one device or sharded over a mesh, and the context they are
traced and called under.

The mesh (read inside the chunk by `sharding.shard_batch`) and the matmul
precision (read by `rtrl.linalg`) are JAX's own settings, `jax.set_mesh` and
`jax.default_matmul_precision`, entered around every trace and call by
`traced_under`: both are part of JAX's jit cache key, so a program never
runs with a setting other than the one it was traced with.
"""

from __future__ import annotations

from collections.abc import Callable
import contextlib
import functools
from typing import Any, NamedTuple

import jax

from experiments.loop import health
from experiments.loop import run_axes
from experiments.loop import sharding

Pytree = Any


class Program(NamedTuple):
  """The jitted pieces of a run, their data placed on the devices.

  Attributes:
    init: `(keys, hparams) -> state` (every leaf with a leading run axis
      when the runs are stacked).
    train_chunk: `state -> (state, metrics)`; the input state is donated.
    evaluate: `state -> (state, eval_metrics)`, or None.
    place_state: a host (NumPy) state -> that state on the devices.
    state_shape: `jax.ShapeDtypeStruct` tree of the state.
    metrics_shape: that of `train_chunk`'s metrics.
    skip_counters: `state -> {'consecutive', 'total'}` updates skipped as
      non-finite (`health.skip_counters`), or None when the state holds no
      `optax.apply_if_finite` counters.
  """

  init: Callable[[jax.Array, Pytree], Pytree]
  train_chunk: Callable[[Pytree], tuple[Pytree, Pytree]]
  evaluate: Callable[[Pytree], tuple[Pytree, Pytree]] | None
  place_state: Callable[[Pytree], Pytree]
  state_shape: Pytree
  metrics_shape: Pytree
  skip_counters: Callable[[Pytree], Pytree] | None = None


def _data_args(data: Pytree) -> tuple:
  return () if data is None else (data,)


def _with_data(jitted: Callable | None, data: Pytree) -> Callable | None:
  """`state -> jitted(state, data)`: the data stay a jit argument."""
  if jitted is None or data is None:
    return jitted
  return lambda state: jitted(state, data)


def compile_program(
  experiment, runs: run_axes.Runs, mesh: jax.sharding.Mesh | None
) -> Program:
  """`runs`' functions jitted for one device, or sharded over `mesh`.

  `experiment` is the `runner.Experiment` that `runs` was made from (its
  data and batch axes).
  """
  state_shape = jax.eval_shape(runs.init, runs.keys, runs.hparams)
  metrics_shape = jax.eval_shape(
    runs.train_chunk, state_shape, *_data_args(experiment.data)
  )[1]
  if mesh is None:
    program = _single_device_program(
      runs, experiment.data, state_shape, metrics_shape
    )
  else:
    axes = experiment.batch_axes(state_shape) if experiment.batch_axes else None
    program = _sharded_program(
      runs, experiment.data, mesh, state_shape, metrics_shape, axes
    )
  if not health.has_skip_counters(state_shape):
    return program
  counters = functools.partial(health.skip_counters, stacked=runs.stacked)
  if mesh is not None:  # Tiny outputs: replicated, as the metrics are.
    counters_jit = jax.jit(
      counters,
      out_shardings=sharding.replicated(
        mesh, jax.eval_shape(counters, state_shape)
      ),
    )
  else:
    counters_jit = jax.jit(counters)
  return program._replace(skip_counters=counters_jit)


def _single_device_program(
  runs: run_axes.Runs, data: Pytree, state_shape: Pytree, metrics_shape: Pytree
) -> Program:
  data = jax.device_put(data)
  evaluate = jax.jit(runs.evaluate) if runs.evaluate else None
  return Program(
    init=jax.jit(runs.init),
    train_chunk=_with_data(jax.jit(runs.train_chunk, donate_argnums=0), data),
    evaluate=_with_data(evaluate, data),
    place_state=jax.device_put,
    state_shape=state_shape,
    metrics_shape=metrics_shape,
  )


def _sharded_program(
  runs: run_axes.Runs,
  data: Pytree,
  mesh: jax.sharding.Mesh,
  state_shape: Pytree,
  metrics_shape: Pytree,
  batch_axes: Pytree | None,
) -> Program:
  """The state sharded by `batch_axes` (and the run axis), the data and the
  metrics replicated."""
  state_sh = sharding.state_shardings(
    mesh, state_shape, batch_axes, runs.stacked
  )
  data_sh = () if data is None else (sharding.replicated(mesh, data),)
  if data is not None:
    data = sharding.put(data, data_sh[0])
  train_chunk = jax.jit(
    runs.train_chunk,
    donate_argnums=0,
    in_shardings=(state_sh,) + data_sh,
    out_shardings=(state_sh, sharding.replicated(mesh, metrics_shape)),
  )
  evaluate = (
    jax.jit(runs.evaluate, in_shardings=(state_sh,) + data_sh)
    if runs.evaluate
    else None
  )
  return Program(
    init=jax.jit(runs.init, out_shardings=state_sh),
    train_chunk=_with_data(train_chunk, data),
    evaluate=_with_data(evaluate, data),
    place_state=lambda tree: sharding.put(tree, state_sh),
    state_shape=state_shape,
    metrics_shape=metrics_shape,
  )


@contextlib.contextmanager
def traced_under(mesh: jax.sharding.Mesh | None, matmul_precision: str | None):
  """The mesh (read by `sharding.shard_batch`) and the matmul precision
  (read by `rtrl.linalg`) that the programs are traced and called under."""
  with contextlib.ExitStack() as stack:
    if mesh is not None:
      stack.enter_context(jax.set_mesh(mesh))
    if matmul_precision is not None:
      stack.enter_context(jax.default_matmul_precision(matmul_precision))
    yield
