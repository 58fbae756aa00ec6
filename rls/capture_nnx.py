"""Capturing every layer's minibatch-mean input from an NNX model.

``rls.layer_inputs(model, *inputs)`` for an ``nnx.Module`` runs a copy of
``model`` (``nnx.split`` / ``nnx.merge``) in which each ``nnx.Linear`` and
``nnx.Conv`` records its input, as the Linen interceptor of `rls.capture`
does, and each ``nnx.RNN`` makes its scanned cell return the inputs of the
cell's layers at every step, so that they leave the scan as outputs and are
averaged over batch and time with ``T`` = the sequence length (eq. 92). The
copy's layers are given recording subclasses of their own classes, so the
user's objects are never changed; state the forward pass updates (batch
statistics, RNG counts) is written back to ``model``.

Entries are keyed like ``nnx.state(model, nnx.Param)``, which is what
``nnx.Optimizer(model, tx, wrt=nnx.Param).update(model, grads,
layer_inputs=...)`` hands to ``tx.update`` with the grads. Means, ``T`` and
samples are computed by the same functions as the Linen path.

This module imports ``flax.nnx``; `rls.layer_inputs` imports it only when
given an ``nnx.Module``.
"""

from __future__ import annotations

from collections.abc import Callable
import contextvars
import functools
from typing import Any

from flax import nnx
from flax.core import tracers
import flax.linen as nn
import jax
import jax.numpy as jnp

from rls import capture
from rls import input_samples
from rls import layer_tree

Path = tuple[Any, ...]


class _Recorder:
  """Records of one forward pass (`layer_inputs`) or one scanned RNN step.

  Attributes:
    trace: the JAX trace the layers must run in: a layer called under another
      one (inside ``nnx.scan``, ``nnx.vmap``, ...) cannot hand its input out.
    per_step: inside an ``nnx.RNN`` cell: keep raw inputs, returned by the
      scan, instead of entries.
    records: path -> recorded entries (or, per step, raw inputs) in call
      order.
  """

  def __init__(self, per_step: bool):
    self.trace = tracers.current_trace()
    self.per_step = per_step
    self.records: dict[Path, list[Any]] = {}

  def add(self, path: Path, record: Any) -> None:
    self.records.setdefault(path, []).append(record)


_RECORDER: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar(
  "rls_nnx_recorder", default=None
)
# While an nnx.RNN runs: where its cell puts the paths of the layers whose
# step inputs it returns (filled when the scan traces the cell).
_STEP_PATHS: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar(
  "rls_nnx_step_paths", default=None
)


def _active_recorder(path: Path) -> _Recorder | None:
  """The recorder a layer at `path` reports to, after checking its trace."""
  recorder = _RECORDER.get()
  if recorder is not None and tracers.current_trace() != recorder.trace:
    raise ValueError(
      f"Layer {layer_tree.format_path(path)!r} runs inside a JAX "
      "transformation within the model (nnx.scan, nnx.vmap, nnx.remat, "
      "...), so rls.layer_inputs cannot hand its input out. It records "
      "layers called directly by the model, step by step in a Python loop, "
      "or as the cell of nnx.RNN; call the layer outside the transformation, "
      "or give its parameters to another optimiser with "
      "optax.multi_transform."
    )
  return recorder


def _linen_conv_like(conv: nnx.Conv) -> nn.Conv:
  """An unbound ``nn.Conv`` with the geometry of `conv`, so the Linen path's
  `capture.conv_mean_patch` and `input_samples.conv_sampled_patches`
  (Flax's padding modes included) apply unchanged."""
  return nn.Conv(
    features=1,
    kernel_size=tuple(capture.kernel_size_tuple(conv)),
    strides=conv.strides,
    padding=conv.padding,
    input_dilation=conv.input_dilation,
    kernel_dilation=conv.kernel_dilation,
    feature_group_count=conv.feature_group_count,
  )


def _record_linear(path: Path, inputs: jax.Array) -> None:
  recorder = _active_recorder(path)
  if recorder is None:
    return
  if recorder.per_step:
    recorder.add(path, jax.lax.stop_gradient(inputs))
    return
  num_samples = capture.num_samples_wanted()
  recorder.add(
    path,
    capture.layer_input_entry(
      capture.mean_over_leading_axes(inputs),
      capture.steps_at(path, 1, inputs),
      input_samples.sample_rows(inputs, num_samples) if num_samples else None,
    ),
  )


def _record_conv(
  path: Path, conv: nnx.Conv, inputs: jax.Array, outputs: jax.Array
) -> None:
  recorder = _active_recorder(path)
  # Grouped convolutions have one input per group, hence no single P; they
  # get no entry and scale_by_rls reports them by name, as with Linen.
  if recorder is None or conv.feature_group_count != 1:
    return
  if recorder.per_step:
    raise ValueError(
      f"Layer {layer_tree.format_path(path)!r}: rls.layer_inputs records "
      "nnx.Linear layers inside an nnx.RNN cell, not convolutions."
    )
  like = _linen_conv_like(conv)
  num_samples = capture.num_samples_wanted()
  recorder.add(
    path,
    capture.layer_input_entry(
      capture.conv_mean_patch(like, inputs),
      capture.steps_at(path, len(capture.kernel_size_tuple(like)) + 1, inputs),
      input_samples.conv_sampled_patches(
        like, inputs, outputs, num_samples, path
      )
      if num_samples
      else None,
    ),
  )


def _recording_linear_call(self, inputs, *args, **kwargs):
  outputs = super(type(self), self).__call__(inputs, *args, **kwargs)
  _record_linear(self._rls_path, inputs)
  return outputs


def _recording_conv_call(self, inputs, *args, **kwargs):
  outputs = super(type(self), self).__call__(inputs, *args, **kwargs)
  _record_conv(self._rls_path, self, inputs, outputs)
  return outputs


def _recording_cell_call(self, carry, inputs, *args, **kwargs):
  """One step; under an ``nnx.RNN``, also returns the step's layer inputs,
  in the order of the paths it puts in `_STEP_PATHS`."""
  step_paths = _STEP_PATHS.get()
  if step_paths is None:  # Called directly: its layers record per call.
    return super(type(self), self).__call__(carry, inputs, *args, **kwargs)
  step = _Recorder(per_step=True)
  tokens = _RECORDER.set(step), _STEP_PATHS.set(None)
  try:
    carry, outputs = super(type(self), self).__call__(
      carry, inputs, *args, **kwargs
    )
  finally:
    _STEP_PATHS.reset(tokens[1])
    _RECORDER.reset(tokens[0])
  paths = sorted(step.records, key=layer_tree.format_path)
  step_paths[:] = paths
  return carry, (outputs, tuple(tuple(step.records[p]) for p in paths))


def _recording_rnn_call(self, inputs, *args, **kwargs):
  """``nnx.RNN.__call__``; records each cell layer's input over batch and
  time, with ``T`` = the number of steps."""
  path = self._rls_path
  if kwargs.get("seq_lengths") is not None:
    raise ValueError(
      f"Layer {layer_tree.format_path(path)!r}: nnx.RNN with seq_lengths "
      "under rls.layer_inputs; padded steps would count in the cell's mean "
      "inputs. Pass sequences of equal length (no seq_lengths)."
    )
  return_carry = kwargs.get("return_carry")
  if return_carry is None:
    return_carry = self.return_carry
  step_paths: list[Path] = []
  token = _STEP_PATHS.set(step_paths)
  try:
    result = super(type(self), self).__call__(inputs, *args, **kwargs)
  finally:
    _STEP_PATHS.reset(token)
  carry, (outputs, per_path) = result if return_carry else (None, result)
  time_major = kwargs.get("time_major")
  if time_major is None:
    time_major = self.time_major
  recorder = _active_recorder(path)
  if recorder is None:
    return (carry, outputs) if return_carry else outputs
  if recorder.per_step:
    raise ValueError(
      f"Layer {layer_tree.format_path(path)!r}: an nnx.RNN inside the cell "
      "of another nnx.RNN; rls.layer_inputs records one level of nnx.RNN."
    )
  for layer_path, calls in zip(step_paths, per_path):
    for rows in calls:  # One call per step, stacked: (*batch, T, in) or so.
      recorder.add(layer_path, _scanned_entry(rows, time_major))
  return (carry, outputs) if return_carry else outputs


def _scanned_entry(rows: jax.Array, time_major: bool) -> Any:
  """The entry of a cell layer's inputs over all steps, ``rows`` with time
  at axis 0 (time major) or -2: what `capture.combine_calls` makes of the
  same cell stepped in a Python loop (the mean over batch and time, ``T``
  the number of steps, each step's sampled rows pooled), computed at once."""
  by_step = jnp.moveaxis(rows, 0 if time_major else -2, 0)
  num_samples = capture.num_samples_wanted()
  samples = None
  if num_samples:
    per_step = jax.vmap(lambda r: input_samples.sample_rows(r, num_samples))
    samples = jnp.reshape(per_step(by_step), (-1, rows.shape[-1]))
  return capture.layer_input_entry(
    capture.mean_over_leading_axes(rows), by_step.shape[0], samples
  )


@functools.cache
def _recording_class(cls: type, call: Callable[..., Any]) -> type:
  """A subclass of `cls` whose ``__call__`` is `call` (made once per class,
  since NNX registers each Module class)."""
  return type(cls)(f"_Recording{cls.__name__}", (cls,), {"__call__": call})


def _make_recording(module: nnx.Module, path: Path, call) -> None:
  object.__setattr__(module, "__class__", _recording_class(type(module), call))
  object.__setattr__(module, "_rls_path", path)


def _instrument(model: nnx.Module) -> None:
  """Gives the layers of `model` (a private copy) recording classes."""
  for path, node in nnx.iter_graph(model):
    path = tuple(path)
    if isinstance(node, nnx.Linear):
      _make_recording(node, path, _recording_linear_call)
    elif isinstance(node, nnx.Conv):
      _make_recording(node, path, _recording_conv_call)
    elif isinstance(node, nnx.RNN):
      _make_recording(node, path, _recording_rnn_call)
      _make_recording(node.cell, path + ("cell",), _recording_cell_call)


def run_and_record(model: nnx.Module, *args, **kwargs) -> tuple[Any, dict]:
  """Calls `model` and returns ``(outputs, layer_inputs)``; the NNX form of
  `rls.layer_inputs`, run under its `capture.capture_options`."""
  graphdef, state = nnx.split(model)
  copy = nnx.merge(graphdef, state)
  _instrument(copy)
  recorder = _Recorder(per_step=False)
  token = _RECORDER.set(recorder)
  try:
    outputs = copy(*args, **kwargs)
  finally:
    _RECORDER.reset(token)
  nnx.update(model, nnx.state(copy))
  inputs_tree: dict = {}
  for path in sorted(recorder.records, key=layer_tree.format_path):
    entry = capture.combine_calls(tuple(recorder.records[path]))
    inputs_tree = layer_tree.nested_set(inputs_tree, path, entry)
  return outputs, inputs_tree
