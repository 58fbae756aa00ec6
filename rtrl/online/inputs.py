"""The online trainers' entry checks: a bad argument is a ValueError naming
it, the shape (or value) it got and the one it needs.

Static checks (shapes, dtypes, sizes) cost nothing, also under `jax.jit`, and
run at every call of `init`, `step` and `run`:

* `init`: `batch_size` a positive integer; floating-point params of at least
  32 bits (16-bit params overflow in the tangents and optimiser moments);
* `step` / `run`: the batch (`StepBatch`, leading `(B,)`) or chunk (leading
  `(T, B)`) shapes: `inputs (.., input_size)`, `targets` and `weights` and
  `resets` with exactly that leading shape (`weights (T,)` is refused, not
  broadcast), and `B` equal to the state's batch.

Value checks need the numbers: `run` makes them when its chunk is concrete
(called eagerly, not traced inside a `jax.jit`), at the cost of one small
reduction and one device-to-host transfer per call: integer `targets` of the
default loss (`losses.softmax_cross_entropy`) within `[0, num_classes)`
(else the loss is NaN while the parameters still move), and `inputs` free
of NaN and Inf. A trainer built with `check_inputs=False` skips them.
Inside your own jitted loop nothing can raise: wrap the optimiser in
`optax.apply_if_finite` to skip non-finite steps.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import validation
from rtrl.online.records import Trainer


def check_params(params: Any) -> None:
  """Floating-point leaves of `params` have at least 32 bits."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    dtype = jnp.result_type(leaf)
    if jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits < 32:
      raise ValueError(
        f"params{jax.tree_util.keystr(path)} has dtype {dtype}, but the "
        "online trainers need float32 or float64 parameters (16-bit "
        "tangents and optimiser moments overflow); cast them, e.g. "
        "jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), params), "
        "and lower the matmul precision instead (rtrl.linalg)."
      )


def check_init(params: Any, batch_size: Any) -> None:
  """`init`'s arguments."""
  validation.positive_int("batch_size", batch_size)
  check_params(params)


def state_batch_size(cell_state: Any) -> int | None:
  """The batch of a trainer state's `cell_state` (its leaves' leading axis)."""
  leaves = jax.tree_util.tree_leaves(cell_state)
  return (
    int(jnp.shape(leaves[0])[0]) if leaves and jnp.ndim(leaves[0]) else None
  )


def check_batch(batch: Any, batch_size: int | None, time_major: bool) -> None:
  """`batch` (a `StepBatch`) has the leading shape `(B,)`, or `(T, B)` when
  `time_major`, on every field, with `B == batch_size` (None: any)."""
  name = "chunk" if time_major else "batch"
  fields = ("inputs", "targets", "weights", "resets")
  if not all(hasattr(batch, f) for f in fields):
    raise ValueError(
      f"{name} must be an rtrl.online.StepBatch(inputs, targets, weights, "
      f"resets), got {type(batch).__name__}"
    )
  axes = "(T, B)" if time_major else "(B,)"
  inputs = jnp.shape(batch.inputs)
  lead = inputs[: 2 if time_major else 1]
  if len(inputs) < len(lead) + 1 or len(lead) < (2 if time_major else 1):
    raise ValueError(
      f"{name}.inputs has shape {inputs}, but needs {axes} + (input_size,)"
    )
  if batch_size is not None and lead[-1] != batch_size:
    raise ValueError(
      f"{name}.inputs has a batch of {lead[-1]} (shape {inputs}), but the "
      f"trainer state was made by init for a batch of {batch_size}"
    )
  for field, exact in (("weights", True), ("resets", True), ("targets", False)):
    shape = jnp.shape(getattr(batch, field))
    if (shape if exact else shape[: len(lead)]) != lead:
      needs = f"{lead}" if exact else f"{lead} + the target's shape"
      raise ValueError(
        f"{name}.{field} has shape {shape}, but needs {axes} = {needs}: one "
        "per step and example, like inputs"
      )


def _is_concrete(*arrays: Any) -> bool:
  return not any(isinstance(a, jax.core.Tracer) for a in arrays)


@jax.jit
def _summary(inputs: jax.Array, targets: jax.Array) -> tuple:
  finite = (
    jnp.isfinite(inputs).all()
    if jnp.issubdtype(inputs.dtype, jnp.inexact)
    else jnp.asarray(True)
  )
  if jnp.issubdtype(targets.dtype, jnp.integer) and targets.size:
    return finite, targets.min(), targets.max()
  return finite, jnp.asarray(0), jnp.asarray(0)


def check_values(chunk: Any, num_classes: int | None) -> None:
  """`chunk.inputs` finite and, with `num_classes`, integer `targets` in
  `[0, num_classes)`; skipped for traced arrays (module docstring)."""
  if not _is_concrete(chunk.inputs, chunk.targets):
    return
  finite, low, high = jax.device_get(_summary(chunk.inputs, chunk.targets))
  if not finite:
    where = np.argwhere(~np.isfinite(np.asarray(chunk.inputs)))[0]
    raise ValueError(
      f"chunk.inputs holds NaN or Inf (first at index "
      f"{tuple(int(i) for i in where)} of "
      f"shape {jnp.shape(chunk.inputs)}); the loss and the parameters "
      "would become NaN. Clean the data, or build the trainer with "
      "check_inputs=False and skip such steps with optax.apply_if_finite."
    )
  if num_classes is not None and (low < 0 or high >= num_classes):
    bad = low if low < 0 else high
    raise ValueError(
      f"chunk.targets holds the class {bad}, but the readout predicts "
      f"{num_classes} classes: targets must be integers in "
      f"[0, {num_classes})"
    )


def classes_of(cell: Any, readout: Any, loss: Any) -> Any:
  """`params -> number of classes` the readout predicts, for the default
  loss's target check; None for another loss (its targets are not class
  labels)."""
  from rtrl import losses  # pylint: disable=g-import-not-at-top

  if loss is not losses.softmax_cross_entropy:
    return None

  def num_classes(params: Any) -> int | None:
    hidden = jax.eval_shape(cell.output, cell.initial_state())
    prediction = jax.eval_shape(readout.apply, params["readout"], hidden)
    return int(prediction.shape[-1]) if len(prediction.shape) == 1 else None

  return num_classes


def checked(trainer: Trainer, check_inputs: bool = True, num_classes=None):
  """`trainer` with the module's checks at the entry of `init`, `step` and
  `run` (value checks in `run` only with `check_inputs`; `num_classes`:
  `params -> int | None`, see `classes_of`)."""

  def init(params, key, batch_size):
    check_init(params, batch_size)
    return trainer.init(params, key, batch_size)

  def step(state, batch):
    check_batch(batch, state_batch_size(state.cell_state), time_major=False)
    return trainer.step(state, batch)

  def run(state, chunk):
    check_batch(chunk, state_batch_size(state.cell_state), time_major=True)
    if check_inputs:
      check_values(chunk, num_classes(state.params) if num_classes else None)
    return trainer.run(state, chunk)

  return Trainer(init=init, step=step, run=run)
