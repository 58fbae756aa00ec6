"""The per-layer loop every form of the RLS transform runs on.

An RLS transform keeps one matrix per layer (``P``, or its square root ``S``)
and, at every step, maps one layer's update over the layers of the gradient
tree paired with their entries of ``layer_inputs``. `layerwise_transform`
writes that loop once; `rls.conventional`, `rls.square_root` and
`rls.second_moment` give it their per-layer ``init`` and ``update``.

Conventions (relied on by `rls.capture` and `rls.alias`):

* ``layer_inputs`` mirrors the params tree down to the layer (the mapping that
  holds ``'kernel'`` / ``'bias'``): ``params['Dense_0'] = {'kernel', 'bias'}``
  pairs with ``layer_inputs['Dense_0']``, ``params['LSTM_0']['recurrent']``
  with ``layer_inputs['LSTM_0']['recurrent']``.
* An entry is a `LayerInput` ``(mean, steps)`` or a bare array (``steps = 1``).
  ``mean`` is ``x̄`` *without* the bias 1, shape ``(fan_in,)`` with
  ``fan_in = prod(kernel.shape[:-1])`` in the kernel's row order (for a conv
  kernel ``(kh, kw, cin, cout)``: ``(kh, kw, cin)`` flattened). The
  transforms append the 1 when the layer has a bias.
* ``steps`` is the paper's ``T`` (eqs. 82, 94): 1 for dense and conv layers,
  the number of time steps averaged into ``x̄`` for recurrent ones.
* The state is a NamedTuple with one field, a nested dict of the per-layer
  matrices mirroring the params down to the layer (the matrix itself when the
  params are a single layer at the root, a bare ``nn.Dense``).

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eqs. (2), (51), (72), (92).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rls import hyperparameters
from rls import layer_tree


class LayerInput(NamedTuple):
  """The minibatch-mean input of one layer.

  Attributes:
    mean: ``x̄``, shape ``(fan_in,)``, without the bias 1 (eqs. 51, 72, 92).
    steps: ``T``, the number of time steps averaged into ``mean`` (an int32
      scalar array; 1 for dense and conv layers).
  """

  mean: jax.Array
  steps: jax.Array


# init_layer(layer) -> the layer's initial matrix.
InitLayer = Callable[[layer_tree.Layer], jax.Array]
# update_layer(matrix, layer, entry, grad, eta) -> (direction, new matrix),
# grad and direction the augmented (fan_in [+ 1], out) matrix in the
# matrix's dtype.
UpdateLayer = Callable[
  [jax.Array, layer_tree.Layer, Any, jax.Array, Any],
  tuple[jax.Array, jax.Array],
]


def is_layer_input_entry(node: Any) -> bool:
  """Whether `node` is one layer's entry of `layer_inputs` (not a sub-tree)."""
  return isinstance(node, LayerInput) or (
    not isinstance(node, Mapping) and hasattr(node, "shape")
  )


def check_steps(layer: layer_tree.Layer, steps: Any) -> None:
  """An entry's ``T`` must be a scalar."""
  if jnp.ndim(steps) != 0:
    raise ValueError(
      f"layer_inputs[{layer_tree.format_path(layer.path)!r}].steps must be "
      "a scalar (the number of time steps T), got shape "
      f"{jnp.shape(steps)}."
    )


def augmented_input(layer: layer_tree.Layer, entry: Any, dtype) -> tuple:
  """``(x̄ with the bias 1 appended if the layer has a bias, T)``."""
  mean: Any = entry.mean if isinstance(entry, LayerInput) else entry
  steps: Any = entry.steps if isinstance(entry, LayerInput) else 1
  if tuple(jnp.shape(mean)) != (layer.fan_in,):
    raise ValueError(
      f"layer_inputs[{layer_tree.format_path(layer.path)!r}] has shape "
      f"{tuple(jnp.shape(mean))}; expected ({layer.fan_in},): the mean input "
      "of the layer without the bias 1, fan_in = prod(kernel.shape[:-1]) "
      f"for kernel shape {tuple(layer.kernel.shape)}."
    )
  check_steps(layer, steps)
  if not isinstance(mean, jax.core.Tracer) and not np.isfinite(mean).all():
    raise ValueError(  # Checked when called eagerly: P would become NaN.
      f"layer_inputs[{layer_tree.format_path(layer.path)!r}] holds NaN or "
      "Inf. (Inside jit nothing is checked: NaN data makes the gradient "
      "NaN too, and optax.apply_if_finite around the optimiser skips the "
      "step.)"
    )
  x = jnp.asarray(mean, dtype)
  if layer.bias is not None:
    x = jnp.concatenate([x, jnp.ones((1,), dtype)])
  return x, jnp.asarray(steps, dtype)


def augment(
  layer: layer_tree.Layer, kernel: jax.Array, bias: jax.Array | None, dtype
) -> jax.Array:
  """``[kernel.reshape(fan_in, out); bias]`` in `dtype` (eq. 2)."""
  matrix = jnp.reshape(kernel, (layer.fan_in, layer.num_outputs)).astype(dtype)
  if bias is None:
    return matrix
  if tuple(jnp.shape(bias)) != (layer.num_outputs,):
    raise ValueError(
      f"Layer {layer_tree.format_path(layer.path)!r} has bias shape "
      f"{tuple(jnp.shape(bias))}; RLS expects ({layer.num_outputs},), one "
      f"bias per output (kernel shape {tuple(layer.kernel.shape)})."
    )
  return jnp.concatenate([matrix, jnp.reshape(bias, (1, -1)).astype(dtype)])


def split_augmented(
  layer: layer_tree.Layer, matrix: jax.Array, kernel_like, bias_like
) -> dict:
  """Inverse of `augment`: ``{path/kernel: ..., path/bias: ...}`` by path."""
  kernel_part = matrix[: layer.fan_in].reshape(kernel_like.shape)
  out = {
    layer.path + (layer_tree.KERNEL,): kernel_part.astype(kernel_like.dtype)
  }
  if bias_like is not None:
    out[layer.path + (layer_tree.BIAS,)] = (
      matrix[layer.fan_in].reshape(bias_like.shape).astype(bias_like.dtype)
    )
  return out


def matrix_dtype(layer: layer_tree.Layer, preconditioner_dtype: Any) -> Any:
  """The dtype of a layer's ``P``: `preconditioner_dtype`, by default the
  kernel's promoted to at least float32 (``P`` of bfloat16 params is
  float32). Raises ValueError for params that are not floating point."""
  kernel_dtype = getattr(layer.kernel, "dtype", None)
  if kernel_dtype is not None and not jnp.issubdtype(
    kernel_dtype, jnp.floating
  ):
    raise ValueError(
      f"params of layer {layer_tree.format_path(layer.path)!r} have dtype "
      f"{kernel_dtype}; RLS needs floating-point params (float32, float64, "
      "bfloat16, ...)."
    )
  if preconditioner_dtype is not None:
    return jnp.dtype(preconditioner_dtype)
  if kernel_dtype is None:
    return jnp.dtype(jnp.float32)
  return jnp.promote_types(kernel_dtype, jnp.float32)


def scaled_identity(layer: layer_tree.Layer, scale, dtype) -> jax.Array:
  """``scale · I`` of the size of the layer's ``P`` (``fan_in [+ 1]``)."""
  return jnp.asarray(scale, dtype) * jnp.eye(layer.augmented_size, dtype=dtype)


def layerwise_transform(
  state_type: type,
  init_layer: InitLayer,
  update_layer: UpdateLayer,
  *,
  is_entry: Callable[[Any], bool],
  gradient_scale: hyperparameters.ScalarOrTree,
  passthrough: bool,
) -> optax.GradientTransformationExtraArgs:
  """An RLS transform from one layer's ``init`` and ``update``.

  Args:
    state_type: a NamedTuple with one field, built from the nested dict of
      per-layer matrices.
    init_layer: ``init_layer(layer) -> matrix``.
    update_layer: ``update_layer(matrix, layer, entry, grad, eta) ->
      (direction, matrix)``: ``grad`` is the layer's augmented gradient
      ``∇_Θ`` in the matrix's dtype, ``entry`` its ``layer_inputs`` entry,
      ``eta`` its ``η``.
    is_entry: whether a node of ``layer_inputs`` is one layer's entry.
    gradient_scale: ``η``, one number or a dict mirroring the params.
    passthrough: let parameters without a layer input through unchanged
      instead of raising a ValueError naming them.

  Returns:
    An `optax.GradientTransformationExtraArgs` whose ``update(updates, state,
    params=None, *, layer_inputs, **extra_args)`` returns every layer's
    direction split back into kernel and bias (other leaves unchanged with
    ``passthrough``; masked-out leaves skipped).
  """

  def init_fn(params):
    layers, masked = layer_tree.layers_to_precondition(params, passthrough)
    hyperparameters.check_gradient_scale_names_layers(
      gradient_scale, [layer.path for layer in layers] + masked
    )
    matrices: Any = {}
    for layer in layers:
      matrices = layer_tree.nested_set(matrices, layer.path, init_layer(layer))
    return state_type(matrices)

  def update_fn(
    updates, state, params=None, *, layer_inputs=None, **extra_args
  ):
    del params, extra_args  # The update uses gradients and inputs only.
    layers, entries = layer_tree.match_layer_inputs(
      updates, layer_inputs, is_entry, passthrough
    )
    directions: dict = {}
    new_matrices: Any = {}
    for layer in layers:
      matrix = matrix_of(state, layer)
      if layer.path in entries:  # Else passthrough: keep the gradient and P.
        grad = augment(layer, layer.kernel, layer.bias, matrix.dtype)
        eta = hyperparameters.gradient_scale_for(gradient_scale, layer.path)
        direction, matrix = update_layer(
          matrix, layer, entries[layer.path], grad, eta
        )
        directions.update(
          split_augmented(layer, direction, layer.kernel, layer.bias)
        )
      new_matrices = layer_tree.nested_set(new_matrices, layer.path, matrix)
    return (
      layer_tree.replace_leaves(updates, directions, lambda g: g),
      state_type(new_matrices),
    )

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def matrix_of(state: Any, layer: layer_tree.Layer) -> jax.Array:
  """The matrix a `layerwise_transform` state keeps for `layer`."""
  try:
    matrix = layer_tree.nested_get(state[0], layer.path)
  except (KeyError, TypeError):
    raise ValueError(
      f"The RLS state has no P for layer "
      f"{layer_tree.format_path(layer.path)!r}; call init with params of the "
      "same structure as the updates."
    ) from None
  # A layer's matrix (P or S, n x n; the damped form keeps a NamedTuple).
  if hasattr(matrix, "shape") and matrix.shape[:1] != (layer.augmented_size,):
    raise ValueError(
      f"state: the RLS P of layer {layer_tree.format_path(layer.path)!r} "
      f"has shape {tuple(jnp.shape(matrix))}, but this layer (kernel "
      f"{tuple(layer.kernel.shape)}) needs {layer.augmented_size} rows: the "
      "state was made by init for another model; call init with these "
      "params."
    )
  return matrix


def precondition_by(state: Any, tree: Any) -> Any:
  """Left-multiplies each layer's augmented matrix in `tree` by its ``P``.

  Used for the L1 term ``γ P_s sgn(Θ_{s-1})`` of eq. (98).

  Args:
    state: the state of any RLS form (a NamedTuple with a
      ``times_inverse_correlation(path, matrix)`` method:
      `rls.ScaleByRLSState`, `rls.ScaleByRLSSquareRootState`, which applies
      ``P = S Sᵀ`` as ``S (Sᵀ M)``, `rls.ScaleByRLSSecondMomentState`), or a
      nested dict of ``P`` matrices (``ScaleByRLSState.inverse_correlation``).
    tree: a params-shaped tree (masked leaves allowed).

  Returns:
    A tree like `tree`: ``P [kernel; bias]`` split back for layers that have a
    ``P``, zeros for every other leaf.
  """
  if hasattr(state, "times_inverse_correlation"):
    times_p = state.times_inverse_correlation
  else:

    def times_p(path, matrix):
      p = layer_tree.nested_get(state, path)
      return p @ matrix.astype(p.dtype)

  layers, _, _ = layer_tree.scan_layers(tree)
  new_leaves = {}
  for layer in layers:
    matrix = augment(
      layer,
      layer.kernel,
      layer.bias,
      jnp.promote_types(layer.kernel.dtype, jnp.float32),
    )
    try:
      product = times_p(layer.path, matrix)
    except (KeyError, TypeError):
      continue
    new_leaves.update(split_augmented(layer, product, layer.kernel, layer.bias))
  return layer_tree.replace_leaves(tree, new_leaves, jnp.zeros_like)


def inverse_correlation(state: Any) -> Any:
  """Every layer's ``P`` from the state of any RLS form, as a nested dict
  mirroring the params down to the layer."""
  return state.inverse_correlation
