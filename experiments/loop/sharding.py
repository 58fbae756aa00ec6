"""Data parallelism for the run loop: a device mesh, state shardings, and
multi-host start-up, all with `jax.sharding` and `jax.distributed`.

The mesh has two axes. `data` splits the batch: per-example state (cell
state, tangents, data streams) is sharded along its batch axis, parameters
and optimiser state are replicated, and the compiler turns the batch sums of
gradients into all-reduces. `runs` splits the stacked runs of a seed x
learning-rate grid (`experiments/run_axes.py`): independent programs, no
communication. An experiment says which axis of each state leaf is the batch
axis with `Experiment.batch_axes`; experiments whose batches are drawn inside
the chunk (the classifiers) mark them with `shard_batch`.

Config fields: `num_devices` (0 = every visible device; 1 = no mesh),
`mesh_shape` (`(data, runs)`; empty = every device on `data`), and
`distributed` (call `jax.distributed.initialize`, see
`initialize_distributed`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import jax
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

DATA, RUNS = "data", "runs"
Pytree = Any

_ACTIVE_MESH: list[Mesh] = []


def initialize_distributed(config) -> None:
  """`jax.distributed.initialize()` when `config.distributed` is set.

  With `coordinator_address` empty, JAX detects the cluster (SLURM, TPU pod
  slices, Open MPI, or the `JAX_COORDINATOR_ADDRESS` / `JAX_NUM_PROCESSES` /
  `JAX_PROCESS_ID` environment). Otherwise `coordinator_address`,
  `num_processes` and `process_id` are passed explicitly. On CPU the
  cross-process collectives use gloo.
  """
  if not config.get("distributed", False):
    return
  # Only the CPU backend reads this; it must be set before backends start.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  kwargs = {}
  if config.get("coordinator_address"):
    kwargs = dict(coordinator_address=config.coordinator_address,
                  num_processes=config.num_processes,
                  process_id=config.process_id)
  jax.distributed.initialize(**kwargs)


def is_writer() -> bool:
  """Only process 0 writes config, metrics, checkpoints and summaries."""
  return jax.process_index() == 0


def make_mesh(config, *, batch_size: int | None, num_runs: int,
              stacked: bool) -> Mesh | None:
  """The `(data, runs)` mesh for this config, or None for one device.

  Raises:
    ValueError: naming the field, if the devices do not divide the batch or
      the runs, or the shape does not match the device count.
  """
  num_devices = config.get("num_devices", 0) or 0
  devices = jax.devices()
  if isinstance(num_devices, bool) or not isinstance(num_devices, int) or \
      num_devices < 0:
    raise ValueError(f"config.num_devices must be 0 (all) or a positive "
                     f"integer, got {num_devices!r}")
  if num_devices > len(devices):
    raise ValueError(f"config.num_devices={num_devices} but only "
                     f"{len(devices)} devices are visible: {devices}")
  devices = devices[:num_devices or len(devices)]
  shape = tuple(config.get("mesh_shape", ()) or ())
  if not shape:
    shape = (len(devices), 1)
  if len(shape) != 2 or any(not isinstance(s, int) or s < 1 for s in shape):
    raise ValueError(f"config.mesh_shape must be (data, runs) positive "
                     f"integers, got {shape!r}")
  data, runs = shape
  if data * runs != len(devices):
    raise ValueError(f"config.mesh_shape {shape} needs {data * runs} "
                     f"devices; {len(devices)} are used (config.num_devices"
                     f"={num_devices})")
  if len(devices) == 1:
    return None
  if data > 1:
    if batch_size is None:
      raise ValueError(f"config.mesh_shape {shape} splits the batch over "
                       f"{data} devices, but this experiment has no batch "
                       "axis to split; put the devices on 'runs'")
    if batch_size % data:
      raise ValueError(f"config.batch_size ({batch_size}) must be a multiple "
                       f"of the 'data' mesh axis ({data} devices)")
  if runs > 1:
    if not stacked:
      raise ValueError(f"config.mesh_shape {shape} splits runs over {runs} "
                       "devices, but this config has a single run (set "
                       "num_seeds or a list of learning_rates)")
    if num_runs % runs:
      raise ValueError(f"the {num_runs} runs (num_seeds x learning_rates) "
                       f"must be a multiple of the 'runs' mesh axis ({runs} "
                       "devices)")
  return Mesh(np.asarray(devices).reshape(data, runs), (DATA, RUNS))


def state_shardings(mesh: Mesh, state_shape: Pytree, batch_axes: Pytree | None,
                    stacked: bool) -> Pytree:
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
      raise ValueError(f"batch_axes has {len(axes)} leaves, the state "
                       f"{len(leaves)}: it must mirror the state")
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
  return jax.tree_util.tree_map(
      lambda _: NamedSharding(mesh, PartitionSpec()), tree)


def put(tree: Pytree, shardings: Pytree) -> Pytree:
  """Host arrays (the same on every process) onto the mesh."""
  def one(value, sharding):
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding,
                                        lambda index: value[index])
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


@contextlib.contextmanager
def active(mesh: Mesh | None):
  """Makes `mesh` the one `shard_batch` constrains to, while tracing."""
  _ACTIVE_MESH.append(mesh)
  try:
    if mesh is None:
      yield
    else:
      with jax.set_mesh(mesh):  # Read by rtrl.online.batch_sum.
        yield
  finally:
    _ACTIVE_MESH.pop()


def shard_batch(tree: Pytree, axis: int = 0) -> Pytree:
  """Constrains arrays built inside a chunk (e.g. a minibatch drawn from the
  dataset) to be split along `axis` over the `data` mesh axis; identity
  without a mesh."""
  mesh = _ACTIVE_MESH[-1] if _ACTIVE_MESH else None
  if mesh is None or mesh.shape[DATA] == 1:
    return tree

  def constrain(x):
    spec = [None] * x.ndim
    spec[axis] = DATA
    return jax.lax.with_sharding_constraint(
        x, NamedSharding(mesh, PartitionSpec(*spec)))
  return jax.tree_util.tree_map(constrain, tree)


def vmap_runs(fn: Callable, mesh: Mesh | None, **kwargs) -> Callable:
  """`jax.vmap` over stacked runs, naming the `runs` mesh axis so that
  sharding constraints inside `fn` keep the runs split."""
  if mesh is not None and mesh.shape[RUNS] > 1:
    return jax.vmap(fn, spmd_axis_name=RUNS, **kwargs)
  return jax.vmap(fn, **kwargs)
