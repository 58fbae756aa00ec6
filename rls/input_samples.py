"""What `rls.layer_inputs(..., samples=S)` records for the second-moment RLS
(`rls.second_moment`): a sample of each dense layer's input rows and of each
conv layer's unfolded patches, spread over examples and positions.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


class LayerInputSamples(NamedTuple):
  """One layer's minibatch-mean input and a sample of its input rows.

  The first two fields are `rls.LayerInput`'s, so ``mean`` and ``steps`` mean
  the same; `scale_by_rls_second_moment` reads ``samples``.

  Attributes:
    mean: ``x̄``, shape ``(fan_in,)``, without the bias 1.
    steps: ``T`` (an int32 scalar; 1 for dense and conv layers).
    samples: ``(S, fan_in)`` input rows without the bias 1: a dense layer's
      input rows (all of them when there are at most ``S``), a conv layer's
      unfolded patches at ``S`` sampled (example, output position) pairs.
  """

  mean: jax.Array
  steps: jax.Array
  samples: jax.Array


_GOLDEN_FRACTION = 0.6180339887498949


def sample_indices(num_rows: int, num_samples: int) -> jax.Array:
  """``min(num_rows, num_samples)`` row indices spread over ``range(num_rows)``.

  All rows when there are few enough; else the golden-ratio sequence
  ``floor(num_rows · frac(i φ))``, a fixed low-discrepancy pattern. A stride
  would alias with the image grid (a stride of half an image picks the same
  two positions in every image); this sequence covers every example and
  output position about evenly. It is the same every step, but the examples
  in a minibatch change. Computed from static sizes at trace time.
  """
  if num_rows <= num_samples:
    return jnp.arange(num_rows)
  return jnp.asarray(
    [
      int(num_rows * ((i * _GOLDEN_FRACTION) % 1.0)) for i in range(num_samples)
    ],
    jnp.int32,
  )


def sample_rows(rows: jax.Array, num_samples: int) -> jax.Array:
  """At most ``num_samples`` of ``rows`` (``(..., features)``, leading axes
  flattened), by `sample_indices`; at least float32 and stop_gradient-ed."""
  dtype = jnp.promote_types(rows.dtype, jnp.float32)
  flat = jnp.reshape(rows, (-1, rows.shape[-1]))
  picked = flat[sample_indices(flat.shape[0], num_samples)]
  return jax.lax.stop_gradient(picked.astype(dtype))


def _conv_padding(
  conv,
  spatial_shape: tuple[int, ...],
  kernel_size: tuple[int, ...],
  strides,
  dilations,
  where: str,
):
  """Flax's ``padding`` of `conv` as ``(low, high)`` pairs per spatial axis."""
  padding = conv.padding
  if isinstance(padding, str):
    if padding.upper() not in ("SAME", "VALID"):
      raise ValueError(
        f"{where}: padding={padding!r}; the second-moment capture samples "
        "patches of 'SAME', 'VALID' or explicit padding only."
      )
    dilated = tuple((k - 1) * d + 1 for k, d in zip(kernel_size, dilations))
    return jax.lax.padtype_to_pads(
      spatial_shape, dilated, strides, padding.upper()
    )
  if isinstance(padding, int):
    return [(padding, padding)] * len(spatial_shape)
  return [(p, p) if isinstance(p, int) else tuple(p) for p in padding]


def conv_sampled_patches(
  conv,
  inputs: jax.Array,
  outputs: jax.Array,
  num_samples: int,
  path: tuple | None = None,
) -> jax.Array:
  """Unfolded input patches of `conv` at sampled output positions.

  The ``B · U · V`` (example, output position) pairs are numbered in
  row-major order and `sample_indices` picks at most ``num_samples``; each
  pick's patch is gathered from the zero-padded input and flattened in the
  kernel's row order ``(*kernel_size, in_features)``, as eq. (72) unfolds
  it. Only the picked patches are formed. Strides, kernel dilation and
  'SAME' / 'VALID' / explicit padding are handled; input dilation,
  'CIRCULAR' / 'CAUSAL' padding and grouped convolutions raise ValueError.

  Args:
    conv: the bound ``nn.Conv`` (or anything with its attributes).
    inputs: its input, ``(*batch, *spatial, in_features)``.
    outputs: its output, ``(*batch, *out_spatial, features)``.
    num_samples: ``S``.
    path: the layer's path, for error messages (default ``conv.path``).

  Returns:
    ``(min(S, B·U·V), prod(kernel_size) · in_features)``, at least float32,
    stop_gradient-ed.
  """
  where = f"Layer {'/'.join(map(str, conv.path if path is None else path))!r}"
  if conv.feature_group_count != 1:
    raise ValueError(
      f"{where}: grouped convolutions have one input per "
      "group, so no single P; RLS does not support them."
    )
  kernel_size = (
    (conv.kernel_size,)
    if isinstance(conv.kernel_size, int)
    else tuple(conv.kernel_size)
  )
  nd = len(kernel_size)

  def per_axis(value, name):
    if value is None:
      return (1,) * nd
    values = (value,) * nd if isinstance(value, int) else tuple(value)
    if name == "input_dilation" and any(v != 1 for v in values):
      raise ValueError(
        f"{where}: input_dilation={value!r}; the second-"
        "moment capture does not sample dilated inputs."
      )
    return values

  strides = per_axis(conv.strides, "strides")
  dilations = per_axis(conv.kernel_dilation, "kernel_dilation")
  per_axis(conv.input_dilation, "input_dilation")
  in_features = inputs.shape[-1]
  spatial = inputs.shape[-nd - 1 : -1]
  examples = jnp.reshape(inputs, (-1,) + tuple(spatial) + (in_features,))
  pads = _conv_padding(
    conv, tuple(spatial), kernel_size, strides, dilations, where
  )
  padded = jnp.pad(examples, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)])
  out_spatial = tuple(outputs.shape[-nd - 1 : -1])
  num_positions = math.prod(out_spatial)
  picks = sample_indices(examples.shape[0] * num_positions, num_samples)
  example_index = picks // num_positions
  position = jnp.unravel_index(picks % num_positions, out_spatial)
  offsets = jnp.unravel_index(jnp.arange(math.prod(kernel_size)), kernel_size)
  # (S, K) input coordinates per spatial axis, K kernel taps in row order.
  coordinates = [
    position[a][:, None] * strides[a] + offsets[a][None, :] * dilations[a]
    for a in range(nd)
  ]
  patches = padded[(example_index[:, None],) + tuple(coordinates)]
  dtype = jnp.promote_types(inputs.dtype, jnp.float32)
  flat = jnp.reshape(patches, (patches.shape[0], -1)).astype(dtype)
  return jax.lax.stop_gradient(flat)
