"""Capturing every layer's minibatch-mean input from an unmodified Flax model.

`layer_inputs` runs ``model.apply`` under a Flax method interceptor that, for
each ``nn.Dense`` and ``nn.Conv`` call, sows a `rls.LayerInput` into the
``'rls_inputs'`` collection at that module's scope; `rls.layers.RNN` and
`rls.layers.LSTM` sow their own (time-averaged) inputs. The collection is then
turned into the ``layer_inputs`` tree that `rls.scale_by_rls` takes: it mirrors
the params tree down to the layer.

`rls.layer_inputs` (`rls/flax_capture.py`) sends an ``nnx.Module`` to
`rls.capture_nnx` (imported only then), which uses the means, ``T``,
``time_axes`` and ``samples`` of this file.

Recorded means exclude the bias 1 (the transformation appends it), are
``stop_gradient``-ed, and are at least float32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import contextlib
import contextvars
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from rls import input_samples
from rls.layerwise import LayerInput

RLS_INPUTS = "rls_inputs"
"""Name of the Flax collection the captured inputs are sown into."""

_RECORD = "__rls_input__"

# True only while `layer_inputs` runs the model: `model.init` makes every
# collection mutable, and must not record inputs.
_CAPTURING = contextvars.ContextVar("rls_capturing", default=False)
# `layer_inputs(time_axes=...)` while it runs: (module path -> time axis,
# the set of paths whose T it has set).
_TIME_AXES: contextvars.ContextVar[tuple[Mapping[tuple, int], set] | None] = (
  contextvars.ContextVar("rls_time_axes", default=None)
)
# `layer_inputs(samples=S)` while it runs: S, the input rows (dense) or
# patches (conv) to record per layer for `rls.second_moment`; 0: means only.
_SAMPLES = contextvars.ContextVar("rls_samples", default=0)


def _time_axes_by_path(time_axes: Mapping | None) -> dict[tuple, int]:
  """`{'output': 1}` or `{'a/b': 1}` or `{('a', 'b'): 1}` -> path tuples."""
  out = {}
  for key, axis in (time_axes or {}).items():
    path = (
      tuple(str(k) for k in key)
      if isinstance(key, (tuple, list))
      else tuple(str(key).split("/"))
    )
    if not isinstance(axis, int) or isinstance(axis, bool):
      raise ValueError(
        f"time_axes[{key!r}] must be an int (the axis of the "
        f"layer's input that is time), got {axis!r}."
      )
    out[path] = axis
  return out


def _steps_of(module: nn.Module, inputs: jax.Array) -> int:
  """``T`` of a Dense / Conv call: 1, or the length of its time axis when
  `layer_inputs(time_axes=...)` names the module (eqs. 80-86)."""
  example_ndim = (
    1 if isinstance(module, nn.Dense) else len(kernel_size_tuple(module)) + 1
  )
  return steps_at(tuple(module.path), example_ndim, inputs)


def steps_at(path: tuple, example_ndim: int, inputs: jax.Array) -> int:
  """``T`` of the layer at `path` (1 unless `layer_inputs(time_axes=...)`
  names it), given its input and the number of trailing example axes
  (1 for a dense layer, ``len(kernel_size) + 1`` for a conv)."""
  time_axes: Mapping[tuple, int]
  applied: set
  time_axes, applied = _TIME_AXES.get() or ({}, set())
  # Paths of NNX list items are ints; time_axes keys parsed from 'a/0' are str.
  path = tuple(str(key) for key in path)
  axis = time_axes.get(path)
  if axis is None:
    return 1
  applied.add(path)
  name = "/".join(path)
  # A time axis is neither the first (batch) nor the feature axes.
  ndim = inputs.ndim
  if ndim < example_ndim + 2 or not 1 <= axis % ndim < ndim - example_ndim:
    raise ValueError(
      f"time_axes[{name!r}] = {axis}, but layer {name!r} got an input of "
      f"shape {tuple(inputs.shape)}, which has no time axis there: the "
      "time axis must lie between the batch axis (0) and the "
      f"{'feature' if example_ndim == 1 else 'image'} axes, e.g. 1 for a "
      "Dense applied to (batch, time, features)."
    )
  return int(inputs.shape[axis])


def kernel_size_tuple(conv: Any) -> tuple[int, ...]:
  """A Linen or NNX conv's ``kernel_size`` as a tuple."""
  return (
    (conv.kernel_size,)
    if isinstance(conv.kernel_size, int)
    else tuple(conv.kernel_size)
  )


def is_capturing(module: nn.Module) -> bool:
  """Whether `module` runs inside `layer_inputs` (so recording is wanted)."""
  return (
    _CAPTURING.get()
    and module.scope is not None
    and module.is_mutable_collection(RLS_INPUTS)
  )


def num_samples_wanted() -> int:
  """``S`` of the running `layer_inputs(..., samples=S)`, else 0: a custom
  layer records ``samples=`` only when this is positive."""
  return _SAMPLES.get()


def record_layer_input(
  module: nn.Module, mean: jax.Array, steps: int = 1, samples=None
) -> None:
  """Records the mean input of the layer whose params `module` holds.

  Call it from a custom layer to make it usable with `rls.scale_by_rls`: the
  module must own ``'kernel'`` (``(..., out)``, rows in the order of ``mean``)
  and optionally ``'bias'`` params. A no-op outside `layer_inputs`.

  Args:
    module: the bound module whose params are the layer's kernel and bias.
    mean: ``x̄``, shape ``(fan_in,)``, averaged over batch (and positions or
      time steps), without the bias 1.
    steps: ``T``, the number of time steps averaged into ``mean`` (eq. 92).
    samples: optional ``(S, fan_in)`` input rows (for
      `rls.second_moment`, e.g. ``input_samples.sample_rows(rows,
      num_samples_wanted())``); recorded only under ``layer_inputs(...,
      samples=S)``, as a `rls.input_samples.LayerInputSamples`.
  """
  if not is_capturing(module):
    return
  module.sow(RLS_INPUTS, _RECORD, layer_input_entry(mean, steps, samples))


def layer_input_entry(
  mean: jax.Array, steps: Any = 1, samples: jax.Array | None = None
) -> LayerInput | input_samples.LayerInputSamples:
  """One recorded entry: ``mean`` (and ``samples`` when `layer_inputs` asked
  for them) stop_gradient-ed and at least float32, ``steps`` as int32."""
  mean = jax.lax.stop_gradient(mean)
  dtype = jnp.promote_types(mean.dtype, jnp.float32)
  entry = LayerInput(mean.astype(dtype), jnp.asarray(steps, jnp.int32))
  if samples is None or not num_samples_wanted():
    return entry
  return input_samples.LayerInputSamples(
    entry.mean, entry.steps, jax.lax.stop_gradient(samples).astype(dtype)
  )


def mean_over_leading_axes(inputs: jax.Array) -> jax.Array:
  """Mean of ``inputs`` (``(..., features)``) over every axis but the last."""
  dtype = jnp.promote_types(inputs.dtype, jnp.float32)
  flat = jnp.reshape(inputs, (-1, inputs.shape[-1])).astype(dtype)
  return jnp.mean(flat, axis=0)


def conv_mean_patch(conv: nn.Conv, inputs: jax.Array) -> jax.Array:
  """Mean over batch and output positions of the conv's unfolded patches.

  Eq. (72): ``x̄ = 1/(M U V) Σ_{m,u,v} patch(m, u, v)``, flattened in the
  kernel's row order ``(*kernel_size, in_features)``, with padded positions
  counted as zeros. Computed without materialising patches, by linearity:
  the batch mean of the patches is the patches of the batch-mean input, and
  their sum over positions is the gradient, with respect to a one-output
  kernel, of the summed output of the same convolution
  (``Σ_{u,v} Σ_j K_j patch_j(u, v)``). The convolution is a clone of `conv`
  (same strides, padding, dilations), so Flax's own padding modes apply. Cost:
  about two convolutions of a single image with one output channel.

  Args:
    conv: the bound ``nn.Conv``.
    inputs: its input, ``(*batch, *spatial, in_features)``.

  Returns:
    ``x̄``, shape ``(prod(kernel_size) * in_features,)``.
  """
  kernel_size = kernel_size_tuple(conv)
  example_ndim = len(kernel_size) + 1
  dtype = jnp.promote_types(inputs.dtype, jnp.float32)
  examples = jnp.reshape(inputs, (-1,) + inputs.shape[-example_ndim:])
  mean_example = jnp.mean(examples.astype(dtype), axis=0, keepdims=True)
  probe = conv.clone(
    parent=None,
    name=None,
    features=1,
    use_bias=False,
    mask=None,
    dtype=dtype,
    param_dtype=dtype,
    precision=jax.lax.Precision.HIGHEST,
  )
  kernel_shape = kernel_size + (inputs.shape[-1], 1)

  def convolve(kernel):
    return probe.apply({"params": {"kernel": kernel}}, mean_example)

  outputs, pullback = jax.vjp(convolve, jnp.zeros(kernel_shape, dtype))
  (patch_sum,) = pullback(jnp.ones_like(outputs))
  num_positions = math.prod(outputs.shape[1:-1])
  return jnp.reshape(patch_sum, (-1,)) / num_positions


def _interceptor(next_fun, args, kwargs, context):
  """Records Dense / Conv inputs; passes every call through unchanged."""
  outputs = next_fun(*args, **kwargs)
  module = context.module
  if context.method_name != "__call__" or not is_capturing(module):
    return outputs
  inputs = args[0] if args else kwargs.get("inputs")
  num_samples = num_samples_wanted()
  if isinstance(module, nn.Dense):
    record_layer_input(
      module,
      mean_over_leading_axes(inputs),
      _steps_of(module, inputs),
      input_samples.sample_rows(inputs, num_samples) if num_samples else None,
    )
  elif isinstance(module, nn.Conv) and module.feature_group_count == 1:
    # Grouped convolutions have one input per group, hence no single P; they
    # get no entry and scale_by_rls reports them by name.
    record_layer_input(
      module,
      conv_mean_patch(module, inputs),
      _steps_of(module, inputs),
      input_samples.conv_sampled_patches(module, inputs, outputs, num_samples)
      if num_samples
      else None,
    )
  return outputs


def combine_calls(records: tuple[Any, ...]) -> Any:
  """One entry from a module's calls: the step-weighted mean, total steps.

  A module called several times (weight sharing, or a Dense applied once per
  time step in a Python loop) gets the mean of all its inputs, and ``T`` the
  total number of steps, as a recurrent weight does in eqs. (92)-(94).
  """
  if len(records) == 1:
    return records[0]
  steps = jnp.stack([r.steps for r in records])
  means = jnp.stack([r.mean for r in records])
  total = jnp.sum(steps)
  weights = (steps / total).astype(means.dtype)
  combined = LayerInput(jnp.einsum("c,cf->f", weights, means), total)
  if all(isinstance(r, input_samples.LayerInputSamples) for r in records):
    # Every call's rows are rows of the same layer: pool them.
    return input_samples.LayerInputSamples(
      *combined, jnp.concatenate([r.samples for r in records])
    )
  return combined


def _to_layer_inputs(recorded: Mapping, path=()) -> Any:
  out = {}
  for key, value in recorded.items():
    if key == _RECORD:
      continue
    out[key] = _to_layer_inputs(value, path + (key,))
  if _RECORD in recorded:
    if out:
      raise ValueError(
        f"Module {'/'.join(map(str, path))!r} recorded its own input and "
        f"has sub-layers {sorted(out)} that did too; rls.layer_inputs "
        "needs one entry per params mapping."
      )
    return combine_calls(tuple(recorded[_RECORD]))
  return out


def check_time_axes_applied(
  axes_by_path: Mapping[tuple, int], applied: set
) -> None:
  for path in axes_by_path:
    if path not in applied:
      raise ValueError(
        f"time_axes names layer {'/'.join(path)!r}, which is not a Dense "
        "or Conv module called by the model (rls.layers.RNN / LSTM and "
        "nnx.RNN set their own T): give its path as in the params tree, "
        "e.g. {'output': 1}."
      )


@contextlib.contextmanager
def capture_options(time_axes: Mapping | None, samples: int):
  """Validates and sets `layer_inputs`'s ``time_axes`` and ``samples`` for
  the forward pass inside; on exit, checks every named time axis was used."""
  axes_by_path = _time_axes_by_path(time_axes)
  applied: set = set()
  if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
    raise ValueError(
      f"samples must be an int >= 0 (input rows to record per "
      f"layer), got {samples!r}."
    )
  samples_token = _SAMPLES.set(samples)
  axes_token = _TIME_AXES.set((axes_by_path, applied))
  try:
    yield
  finally:
    _TIME_AXES.reset(axes_token)
    _SAMPLES.reset(samples_token)
  check_time_axes_applied(axes_by_path, applied)


def linen_layer_inputs(
  apply_fn: Callable[..., Any],
  *args,
  time_axes: Mapping | None = None,
  samples: int = 0,
  **kwargs,
) -> tuple[Any, Any]:
  """`rls.layer_inputs` of a Linen model: ``(model.apply, variables,
  *inputs)``, with the options and results documented there."""
  if not args or not isinstance(args[0], Mapping):
    raise ValueError(
      "layer_inputs takes (model.apply, variables, *inputs) for a Linen "
      "model or (model, *inputs) for an nnx.Module; got first arguments "
      f"{type(apply_fn).__name__} and "
      f"{type(args[0]).__name__ if args else 'nothing'}."
    )
  with capture_options(time_axes, samples):
    return _linen_layer_inputs(apply_fn, *args, **kwargs)


def _linen_layer_inputs(
  apply_fn: Callable[..., Any], variables: Mapping, *args, **kwargs
) -> tuple[Any, dict]:
  """`layer_inputs` of a Linen ``apply_fn`` under `capture_options`."""
  user_mutable = kwargs.pop("mutable", False)
  if user_mutable is True:
    mutable: Any = True
  elif not user_mutable:
    mutable = [RLS_INPUTS]
  elif isinstance(user_mutable, str):
    mutable = [user_mutable, RLS_INPUTS]
  else:
    mutable = list(user_mutable) + [RLS_INPUTS]
  variables = {k: v for k, v in variables.items() if k != RLS_INPUTS}
  token = _CAPTURING.set(True)
  try:
    with nn.intercept_methods(_interceptor):
      outputs, mutated = apply_fn(variables, *args, mutable=mutable, **kwargs)
  finally:
    _CAPTURING.reset(token)
  mutated = dict(mutated)
  recorded = mutated.pop(RLS_INPUTS, {})
  inputs_tree = _to_layer_inputs(recorded)
  if user_mutable:
    return (outputs, mutated), inputs_tree
  return outputs, inputs_tree
