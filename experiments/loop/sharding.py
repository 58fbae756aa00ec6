"""Data parallelism for the run loop: a device mesh, state shardings, and
multi-host start-up, all with `jax.sharding` and `jax.distributed`.

The mesh has two axes. `data` splits the batch: per-example state (cell
state, tangents, data streams) is sharded along its batch axis, parameters
and optimiser state are replicated, and the compiler turns the batch sums of
gradients into all-reduces. `runs` splits the stacked runs of a seed x
learning-rate grid (`run_axes.py`): independent programs, no
communication. An experiment says which axis of each state leaf is the batch
axis with `Experiment.batch_axes`; experiments whose batches are drawn inside
the chunk (the classifiers) mark them with `shard_batch`.

Config fields: `num_devices` (0 = every visible device; 1 = no mesh),
`mesh_shape` (`(data, runs)`; empty = every device on `data`), and
`distributed` (call `jax.distributed.initialize`, see
`initialize_distributed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np

from experiments.loop import checks
from experiments.loop.errors import ConfigError

DATA, RUNS = "data", "runs"
Pytree = Any


def initialize_distributed(config) -> None:
  """`jax.distributed.initialize()` when `config.distributed` is set.

  With `coordinator_address` empty, JAX detects the cluster (SLURM, TPU pod
  slices, Open MPI, or the `JAX_COORDINATOR_ADDRESS` / `JAX_NUM_PROCESSES` /
  `JAX_PROCESS_ID` environment). Otherwise `coordinator_address`,
  `num_processes` and `process_id` are passed explicitly. On CPU the
  cross-process collectives use gloo.
  """
  if not config.distributed:
    return
  # Only the CPU backend reads this; it must be set before backends start.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  kwargs = {}
  if config.coordinator_address:
    kwargs = dict(
      coordinator_address=config.coordinator_address,
      num_processes=config.num_processes,
      process_id=config.process_id,
    )
  jax.distributed.initialize(**kwargs)


def is_writer() -> bool:
  """Only process 0 writes config, metrics, checkpoints and summaries."""
  return jax.process_index() == 0


def make_mesh(
  config, *, batch_size: int | None, num_runs: int, stacked: bool
) -> Mesh | None:
  """The `(data, runs)` mesh for this config, or None for one device.

  Raises:
    ValueError: naming the field, if the devices do not divide the batch or
      the runs, or the shape does not match the device count.
  """
  devices = _devices(config)
  shape = _mesh_shape(config, len(devices))
  if len(devices) == 1:
    return None
  _check_divides(
    shape, batch_size=batch_size, num_runs=num_runs, stacked=stacked
  )
  return Mesh(np.asarray(devices).reshape(shape), (DATA, RUNS))


def _devices(config) -> list:
  """The first `config.num_devices` visible devices (0: all of them)."""
  num_devices = checks.nonnegative_int(
    "config.num_devices",
    config.num_devices,
    zero_means="every visible device",
  )
  devices = jax.devices()
  if num_devices > len(devices):
    raise ConfigError(
      f"config.num_devices={num_devices} but only "
      f"{len(devices)} devices are visible: {devices}"
    )
  return devices[: num_devices or len(devices)]


def _mesh_shape(config, num_devices: int) -> tuple[int, int]:
  """`config.mesh_shape` `(data, runs)`, checked against the device count;
  empty: every device on `data`."""
  shape = tuple(config.mesh_shape) or (num_devices, 1)
  if len(shape) != 2 or any(
    isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape
  ):
    raise ConfigError(
      f"config.mesh_shape must be (data, runs) positive integers, got {shape!r}"
    )
  if shape[0] * shape[1] != num_devices:
    raise ConfigError(
      f"config.mesh_shape {shape} needs "
      f"{shape[0] * shape[1]} devices; {num_devices} are used "
      f"(config.num_devices={config.num_devices})"
    )
  return shape


def _check_divides(
  shape: tuple[int, int],
  *,
  batch_size: int | None,
  num_runs: int,
  stacked: bool,
) -> None:
  """The `data` axis divides the batch and the `runs` axis the runs."""
  data, runs = shape
  if data > 1:
    if batch_size is None:
      raise ConfigError(
        f"config.mesh_shape {shape} splits the batch over "
        f"{data} devices, but this experiment has no batch "
        "axis to split; put the devices on 'runs'"
      )
    if batch_size % data:
      raise ConfigError(
        f"config.batch_size ({batch_size}) must be a multiple "
        f"of the 'data' mesh axis ({data} devices)"
      )
  if runs > 1:
    if not stacked:
      raise ConfigError(
        f"config.mesh_shape {shape} splits runs over {runs} "
        "devices, but this config has a single run (set "
        "num_seeds or a list of learning_rates)"
      )
    if num_runs % runs:
      raise ConfigError(
        f"the {num_runs} runs (num_seeds x learning_rates) "
        f"must be a multiple of the 'runs' mesh axis ({runs} "
        "devices)"
      )


def state_shardings(
  mesh: Mesh, state_shape: Pytree, batch_axes: Pytree | None, stacked: bool
) -> Pytree:
  """One `NamedSharding` per leaf of `state_shape` (a single run's state, or
  the stacked runs' when `stacked`).

  `batch_axes` mirrors a single run's state: for each leaf the index of its
  batch axis, or None (replicated). None for the whole tree: replicated.
  """
  leaves, treedef = jax.tree_util.tree_flatten(state_shape)
  if batch_axes is None:
    axes = [None] * len(leaves)
  else:
    axes = jax.tree_util.tree_leaves(batch_axes, is_leaf=lambda x: x is None)
    if len(axes) != len(leaves):
      raise ValueError(
        f"batch_axes has {len(axes)} leaves, the state "
        f"{len(leaves)}: it must mirror the state"
      )
  shardings = []
  for leaf, axis in zip(leaves, axes):
    spec = [None] * len(leaf.shape)
    offset = 1 if stacked else 0
    if stacked and spec:
      spec[0] = RUNS
    if axis is not None and len(spec) > axis + offset:
      spec[axis + offset] = DATA
    shardings.append(NamedSharding(mesh, PartitionSpec(*spec)))
  return jax.tree_util.tree_unflatten(treedef, shardings)


def replicated(mesh: Mesh, tree: Pytree) -> Pytree:
  """A replicated `NamedSharding` for every leaf of `tree`."""
  return jax.tree_util.tree_map(
    lambda _: NamedSharding(mesh, PartitionSpec()), tree
  )


def put(tree: Pytree, shardings: Pytree) -> Pytree:
  """Host arrays (the same on every process) onto the mesh."""

  def one(value, sharding):
    value = np.asarray(value)
    return jax.make_array_from_callback(
      value.shape, sharding, lambda index: value[index]
    )

  return jax.tree_util.tree_map(one, tree, shardings)


def to_host(tree: Pytree) -> Pytree:
  """Global arrays as NumPy on every process (a collective with several
  processes: every process must call it)."""
  if jax.process_count() > 1:
    return multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_get(tree)


def any_process(flag: bool) -> bool:
  """True if `flag` is true on any process (collective across processes)."""
  if jax.process_count() == 1:
    return flag
  flags = multihost_utils.process_allgather(np.asarray(flag))
  return bool(np.any(flags))


def shard_batch(tree: Pytree, axis: int = 0) -> Pytree:
  """Constrains arrays built inside a chunk (e.g. a minibatch drawn from the
  dataset) to be split along `axis` over the `data` axis of the mesh the
  chunk is traced under (`jax.set_mesh`, entered by the run loop); identity
  without one."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.shape.get(DATA, 1) == 1:
    return tree

  def constrain(x):
    spec = [None] * x.ndim
    spec[axis] = DATA
    return jax.lax.with_sharding_constraint(x, PartitionSpec(*spec))

  return jax.tree_util.tree_map(constrain, tree)


def vmap_runs(fn: Callable, mesh: Mesh | None, **kwargs) -> Callable:
  """`jax.vmap` over stacked runs, naming the `runs` mesh axis so that
  sharding constraints inside `fn` keep the runs split."""
  if mesh is not None and mesh.shape[RUNS] > 1:
    return jax.vmap(fn, spmd_axis_name=RUNS, **kwargs)
  return jax.vmap(fn, **kwargs)
