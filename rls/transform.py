"""Recursive-least-squares preconditioning as an optax gradient transformation.

Implements the average-approximation RLS of Zhang et al., "Revisiting Recursive
Least Squares for Training Deep Neural Networks" (2021): every layer keeps the
inverse ``P`` of its (exponentially weighted) input autocorrelation matrix,
updated by Sherman-Morrison with the layer's minibatch-mean input ``x̄``, and
the loss gradient of the layer's augmented matrix ``Θ = [kernel; bias]`` is
preconditioned by ``(η/h) P``.

Conventions (fixed here, relied on by `rls.capture` and `rls.alias`):

* ``layer_inputs`` mirrors the params tree down to the layer (the mapping that
  holds ``'kernel'`` / ``'bias'``): ``params['Dense_0'] = {'kernel', 'bias'}``
  pairs with ``layer_inputs['Dense_0']``, ``params['LSTM_0']['recurrent']``
  with ``layer_inputs['LSTM_0']['recurrent']``.
* An entry is a `LayerInput` ``(mean, steps)`` or a bare array (``steps = 1``).
  ``mean`` is ``x̄`` *without* the bias 1, shape ``(fan_in,)`` with
  ``fan_in = prod(kernel.shape[:-1])`` in the kernel's row order (for a conv
  kernel ``(kh, kw, cin, cout)``: ``(kh, kw, cin)`` flattened). This
  transformation appends the 1 when the layer has a bias.
* ``steps`` is the paper's ``T`` (eqs. 82, 94): 1 for dense and conv layers,
  the number of time steps averaged into ``x̄`` for recurrent ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rls import _tree
from rls.square_root import rls_square_root_layer_step

ScalarOrTree = float | jax.Array | Mapping[str, Any]


class LayerInput(NamedTuple):
  """The minibatch-mean input of one layer.

  Attributes:
    mean: ``x̄``, shape ``(fan_in,)``, without the bias 1 (eqs. 51, 72, 92).
    steps: ``T``, the number of time steps averaged into ``mean`` (an int32
      scalar array; 1 for dense and conv layers).
  """

  mean: jax.Array
  steps: jax.Array


class ScaleByRLSState(NamedTuple):
  """State of `scale_by_rls`.

  Attributes:
    inverse_correlation: ``P`` of every layer this transformation
      preconditions, a nested dict mirroring the params tree down to the layer
      (``{'Dense_0': P}``), each ``P`` of shape ``(fan_in + 1, fan_in + 1)``
      (``fan_in`` when the layer has no bias); the array itself when the
      params are a single layer at the root (a bare ``nn.Dense``). Its
      structure depends only on the params given to ``init``.
  """

  inverse_correlation: Any


class ScaleByRLSSquareRootState(NamedTuple):
  """State of `scale_by_rls(square_root=True)`.

  Attributes:
    inverse_correlation_factor: ``S`` with ``P = S Sᵀ`` for every layer, in
      the layout of `ScaleByRLSState.inverse_correlation` (same shapes).
      ``P`` is positive semi-definite by construction, whatever the rounding;
      `inverse_correlation` forms it.
  """

  inverse_correlation_factor: Any


def inverse_correlation(state: Any) -> Any:
  """Every layer's ``P`` from a `scale_by_rls` state (either form)."""
  if isinstance(state, ScaleByRLSSquareRootState):
    return jax.tree.map(lambda s: s @ s.T, state.inverse_correlation_factor)
  return state.inverse_correlation


def is_layer_input_entry(node: Any) -> bool:
  """Whether `node` is one layer's entry of `layer_inputs` (not a sub-tree)."""
  return isinstance(node, LayerInput) or (
    not isinstance(node, Mapping) and hasattr(node, "shape")
  )


def _entry_mean_and_steps(entry: Any) -> tuple[jax.Array, Any]:
  if isinstance(entry, LayerInput):
    return entry.mean, entry.steps
  return entry, 1


def _is_tracer(value: Any) -> bool:
  return isinstance(value, jax.core.Tracer)


def _check_range(
  name: str, value: Any, *, upper: float | None = None, hint: str = ""
) -> None:
  """Raises ValueError unless ``0 < value (<= upper)``; skips traced values.

  Under `optax.inject_hyperparams` the factory is re-run inside `update` with
  traced hyper-parameters; those were checked when ``init`` built them.
  """
  if _is_tracer(value):
    return
  try:
    number = float(value)
  except (TypeError, ValueError):
    raise ValueError(
      f"{name} must be a positive number, got {value!r}."
    ) from None
  if not number > 0 or (upper is not None and number > upper):
    interval = f"(0, {upper:g}]" if upper is not None else "(0, inf)"
    raise ValueError(f"{name} must be in {interval}, got {number!r}.{hint}")


def check_gradient_scale(gradient_scale: ScalarOrTree, path=()) -> None:
  """Checks that every number in `gradient_scale` (η, eq. 63) is positive."""
  if isinstance(gradient_scale, Mapping):
    for key, child in gradient_scale.items():
      check_gradient_scale(child, path + (key,))
  else:
    where = f"[{_tree.format_path(path)!r}]" if path else ""
    _check_range(f"gradient_scale{where}", gradient_scale)


def _gradient_scale_for(gradient_scale: ScalarOrTree, path: _tree.Path):
  """η of the layer at `path`: a number applies to its whole sub-tree."""
  node = gradient_scale
  for depth, key in enumerate(path):
    if not isinstance(node, Mapping):
      break
    if key not in node:
      raise ValueError(
        f"gradient_scale has no entry for layer {_tree.format_path(path)!r} "
        f"(no key {key!r} under {_tree.format_path(path[:depth])!r}). Give "
        "one number, or a dict mirroring the params with a number for every "
        "layer or sub-tree, e.g. {'Dense_0': 1.0, 'LSTM_0': 0.5}."
      )
    node = node[key]
  if isinstance(node, Mapping):
    raise ValueError(
      f"gradient_scale[{_tree.format_path(path)!r}] is a dict; "
      "expected the number η for that layer."
    )
  return node


def _check_gradient_scale_names_layers(
  gradient_scale: ScalarOrTree,
  layer_paths: list[_tree.Path],
  path: _tree.Path = (),
) -> None:
  """Every key of a per-layer η dict leads to a layer of the params (a typo
  would otherwise be ignored silently)."""
  if not isinstance(gradient_scale, Mapping):
    return
  for key, child in gradient_scale.items():
    child_path = path + (key,)
    if not any(p[: len(child_path)] == child_path for p in layer_paths):
      raise ValueError(
        f"gradient_scale names {_tree.format_path(child_path)!r}, which is "
        "not a layer (or a sub-tree holding layers) of the params; the "
        f"layers are {sorted(_tree.format_path(p) for p in layer_paths)}."
      )
    _check_gradient_scale_names_layers(child, layer_paths, child_path)


def _augmented_input(layer: _tree.Layer, entry: Any, dtype) -> tuple:
  """``(x̄ with the bias 1 appended if the layer has a bias, T)``."""
  mean, steps = _entry_mean_and_steps(entry)
  where = _tree.format_path(layer.path)
  if tuple(jnp.shape(mean)) != (layer.fan_in,):
    raise ValueError(
      f"layer_inputs[{where!r}] has shape {tuple(jnp.shape(mean))}; expected "
      f"({layer.fan_in},): the mean input of the layer without the bias 1, "
      f"fan_in = prod(kernel.shape[:-1]) for kernel shape "
      f"{tuple(layer.kernel.shape)}."
    )
  if jnp.ndim(steps) != 0:
    raise ValueError(
      f"layer_inputs[{where!r}].steps must be a scalar (the "
      f"number of time steps T), got shape {jnp.shape(steps)}."
    )
  x = jnp.asarray(mean, dtype)
  if layer.bias is not None:
    x = jnp.concatenate([x, jnp.ones((1,), dtype)])
  return x, jnp.asarray(steps, dtype)


def augment(
  layer: _tree.Layer, kernel: jax.Array, bias: jax.Array | None, dtype
) -> jax.Array:
  """``[kernel.reshape(fan_in, out); bias]`` in `dtype` (eq. 2)."""
  matrix = jnp.reshape(kernel, (layer.fan_in, layer.num_outputs)).astype(dtype)
  if bias is None:
    return matrix
  if tuple(jnp.shape(bias)) != (layer.num_outputs,):
    raise ValueError(
      f"Layer {_tree.format_path(layer.path)!r} has bias shape "
      f"{tuple(jnp.shape(bias))}; RLS expects ({layer.num_outputs},), one "
      "bias per output (kernel shape "
      f"{tuple(layer.kernel.shape)})."
    )
  return jnp.concatenate([matrix, jnp.reshape(bias, (1, -1)).astype(dtype)])


def split_augmented(
  layer: _tree.Layer, matrix: jax.Array, kernel_like, bias_like
) -> dict:
  """Inverse of `augment`: ``{path/kernel: ..., path/bias: ...}`` by path."""
  kernel_part = matrix[: layer.fan_in].reshape(kernel_like.shape)
  out = {layer.path + (_tree.KERNEL,): kernel_part.astype(kernel_like.dtype)}
  if bias_like is not None:
    out[layer.path + (_tree.BIAS,)] = (
      matrix[layer.fan_in].reshape(bias_like.shape).astype(bias_like.dtype)
    )
  return out


def precondition_by(inverse_correlation: Any, tree: Any) -> Any:
  """Left-multiplies each layer's augmented matrix in `tree` by its ``P``.

  Used for the L1 term ``γ P_s sgn(Θ_{s-1})`` of eq. (98).

  Args:
    inverse_correlation: a `scale_by_rls` state (`ScaleByRLSState` or
      `ScaleByRLSSquareRootState`, whose ``P = S Sᵀ`` is applied as
      ``S (Sᵀ M)``), or ``ScaleByRLSState.inverse_correlation`` itself.
    tree: a params-shaped tree (masked leaves allowed).

  Returns:
    A tree like `tree`: ``P [kernel; bias]`` split back for layers that have a
    ``P``, zeros for every other leaf.
  """
  square_root = isinstance(inverse_correlation, ScaleByRLSSquareRootState)
  if square_root:
    matrices = inverse_correlation.inverse_correlation_factor
  elif hasattr(inverse_correlation, "inverse_correlation"):
    # `ScaleByRLSState`, or the second-moment form's state (same layout).
    matrices = inverse_correlation.inverse_correlation
  else:
    matrices = inverse_correlation
  layers, _, _ = _tree.scan_layers(tree)
  new_leaves = {}
  for layer in layers:
    try:
      p = _tree.nested_get(matrices, layer.path)
    except (KeyError, TypeError):
      continue
    matrix = augment(layer, layer.kernel, layer.bias, p.dtype)
    product = p @ (p.T @ matrix) if square_root else p @ matrix
    new_leaves.update(split_augmented(layer, product, layer.kernel, layer.bias))
  return _tree.replace_leaves(tree, new_leaves, jnp.zeros_like)


def rls_layer_step(
  p: jax.Array,
  x: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  forgetting_factor,
  ratio,
  gradient_scale,
) -> tuple[jax.Array, jax.Array]:
  r"""One layer's RLS update: ``(direction, P_s)`` from ``P = P_{s-1}``.

  With ``x = [x̄; 1]`` (the 1 only if the layer has a bias), ``T = steps``
  and ``∇_Θ = grad`` (the loss gradient of the augmented matrix):

  .. math::
    u = P x,\quad h = λ + k T\, x^T u,\quad
    \text{direction} = \frac{η}{h} P \nabla_Θ,\quad
    P_s = \frac{1}{λ}\Big(P - \frac{k T}{h} u u^T\Big)

  which are eqs. (54), (55), (63) and (53) (``T = 1``) and (95), (96), (97),
  (94) (recurrent layers, ``T`` time steps). ``λ`` divides the whole bracket,
  ``k T`` multiplies both the rank-one correction and ``x^T u`` in ``h``, and
  the direction uses the *old* ``P_{s-1}`` scaled by ``1/h`` (eq. 63);
  Sherman-Morrison gives ``P_s x = u / h``, so for a single example this is
  the textbook RLS gain. Everything is computed in ``P``'s dtype.
  """
  dtype = p.dtype
  lam = jnp.asarray(forgetting_factor, dtype)
  k_t = jnp.asarray(ratio, dtype) * steps
  eta = jnp.asarray(gradient_scale, dtype)
  # u feeds the recursion for P, so keep it at full precision on GPU/TPU.
  u = jnp.matmul(p, x, precision=jax.lax.Precision.HIGHEST)
  h = lam + k_t * jnp.dot(x, u, precision=jax.lax.Precision.HIGHEST)
  direction = (eta / h) * (p @ grad)  # eq. (63) with P_{s-1}.
  new_p = (p - (k_t / h) * jnp.outer(u, u)) / lam  # eqs. (53), (94).
  return direction, new_p


def _check_hyperparameters(
  forgetting_factor, ratio, gradient_scale, init_scale
) -> None:
  _check_range(
    "forgetting_factor",
    forgetting_factor,
    upper=1.0,
    hint=" It is λ of eq. (19); 1 means no forgetting.",
  )
  _check_range("ratio", ratio, hint=" It is k of eq. (33); the paper uses 0.1.")
  _check_range("init_scale", init_scale, hint=" P_0 = init_scale * I.")
  check_gradient_scale(gradient_scale)


def _initial_inverse_correlation(
  layer: _tree.Layer,
  init_scale,
  preconditioner_dtype,
  square_root: bool = False,
) -> jax.Array:
  """``P_0 = init_scale · I`` (or its square root ``√init_scale · I``), by
  default in the kernel's dtype promoted to at least float32."""
  dtype = preconditioner_dtype or jnp.promote_types(
    layer.kernel.dtype, jnp.float32
  )
  scale = jnp.asarray(init_scale, dtype)
  if square_root:
    scale = jnp.sqrt(scale)
  return scale * jnp.eye(layer.augmented_size, dtype=dtype)


def _matrices_of(state: Any) -> Any:
  if isinstance(state, ScaleByRLSSquareRootState):
    return state.inverse_correlation_factor
  return state.inverse_correlation


def _inverse_correlation_of(state: Any, layer: _tree.Layer) -> jax.Array:
  try:
    return _tree.nested_get(_matrices_of(state), layer.path)
  except (KeyError, TypeError):
    raise ValueError(
      f"The RLS state has no P for layer "
      f"{_tree.format_path(layer.path)!r}; call init with params of the "
      "same structure as the updates."
    ) from None


def scale_by_rls(
  forgetting_factor: float = 1.0,
  ratio: float = 0.1,
  gradient_scale: ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  passthrough: bool = False,
  preconditioner_dtype: Any | None = None,
  square_root: bool = False,
  input_statistics: str = "mean",
  second_moment_direction: str = "eq63",
) -> optax.GradientTransformationExtraArgs:
  r"""Preconditions each layer's gradient by its RLS inverse autocorrelation.

  Every layer ``l`` (a params mapping with a ``'kernel'``, optionally a
  ``'bias'``) with an entry ``x̄, T`` in ``layer_inputs`` gets
  `rls_layer_step`: the direction ``(η/h) P_{s-1} ∇_Θ`` and the update of its
  ``P``. ``∇_Θ`` is the loss gradient of ``Θ = [kernel.reshape(fan_in, out);
  bias]`` and the direction is split back into the kernel and bias shapes.
  Follow with a negative scaling (as `rls.rls` does) to descend.

  Parameters that are not the kernel or bias of a layer (embeddings,
  normalisation scales, extra leaves in a layer) and layers with no entry in
  ``layer_inputs`` raise a ValueError naming them, unless ``passthrough`` is
  set, in which case their gradients pass through unchanged (their ``P``, if
  any, is kept as is). Masked-out leaves (`optax.MaskedNode`, from
  `optax.multi_transform` / `optax.masked`) are skipped, and their
  ``layer_inputs`` entries ignored.

  Args:
    forgetting_factor: ``λ`` in (0, 1] (eq. 19).
    ratio: ``k > 0``, the average-approximation ratio (eq. 33).
    gradient_scale: ``η > 0`` (eq. 47): one number, or a dict mirroring the
      params whose numbers apply to the layer / sub-tree at their path.
    init_scale: ``P_0 = init_scale · I`` (the paper uses ``I``).
    passthrough: let parameters without a layer input through unchanged
      instead of raising.
    preconditioner_dtype: dtype of ``P``; by default the kernel's dtype
      promoted to at least float32 (``P`` of bfloat16 params is float32).
    square_root: keep a square root ``S`` of ``P = S Sᵀ`` instead of ``P``
      (`rls_square_root_layer_step`): the same recursion, equal in exact
      arithmetic, and ``P`` positive semi-definite by construction in any
      precision. The state is then a `ScaleByRLSSquareRootState`. Costs one
      more ``(fan_in + 1)² · out`` product per layer and step
      (`scripts/bench_rls.py`).
    input_statistics: ``'mean'`` (the paper: ``P`` accumulates ``k x̄ x̄ᵀ``
      of the minibatch mean, eq. 33) or ``'second_moment'``: ``P``
      accumulates ``(k T / S) Xᵀ X`` of ``S`` sampled input rows by a rank-S
      Woodbury update (`rls.second_moment.scale_by_rls_second_moment`; dense
      and conv layers; capture with ``rls.layer_inputs(..., samples=S)``).
      Not combined with ``square_root``.
    second_moment_direction: with ``'second_moment'``, ``'eq63'`` (``(η/h)
      P_{s-1} ∇``) or ``'updated'`` (``η P_s ∇``); see `rls.second_moment`.

  Returns:
    An `optax.GradientTransformationExtraArgs` whose ``update(updates, state,
    params=None, *, layer_inputs, **extra_args)`` needs ``layer_inputs`` (from
    `rls.layer_inputs`). Updates keep the dtype of the gradients.

  References:
    Zhang et al., 2021, eqs. (51)-(55), (63), (72)-(75), (92)-(97).
  """
  if input_statistics == "second_moment":
    if square_root:
      raise ValueError(
        "input_statistics='second_moment' keeps the full P; "
        "it has no square_root form."
      )
    from rls import second_moment  # pylint: disable=g-import-not-at-top

    return second_moment.scale_by_rls_second_moment(
      forgetting_factor=forgetting_factor,
      ratio=ratio,
      gradient_scale=gradient_scale,
      init_scale=init_scale,
      passthrough=passthrough,
      preconditioner_dtype=preconditioner_dtype,
      direction=second_moment_direction,
    )
  if input_statistics != "mean":
    raise ValueError(
      f'input_statistics must be "mean" or "second_moment", '
      f"got {input_statistics!r}."
    )
  _check_hyperparameters(forgetting_factor, ratio, gradient_scale, init_scale)
  state_type = ScaleByRLSSquareRootState if square_root else ScaleByRLSState
  layer_step = rls_square_root_layer_step if square_root else rls_layer_step

  def init_fn(params):
    layers, masked = _tree.layers_to_precondition(params, passthrough)
    _check_gradient_scale_names_layers(
      gradient_scale, [layer.path for layer in layers] + masked
    )
    inverse_correlation: Any = {}
    for layer in layers:
      inverse_correlation = _tree.nested_set(
        inverse_correlation,
        layer.path,
        _initial_inverse_correlation(
          layer, init_scale, preconditioner_dtype, square_root
        ),
      )
    return state_type(inverse_correlation)

  def update_fn(
    updates, state, params=None, *, layer_inputs=None, **extra_args
  ):
    del params, extra_args  # The update uses gradients and inputs only.
    layers, entries = _tree.match_layer_inputs(
      updates, layer_inputs, is_layer_input_entry, passthrough
    )
    directions: dict = {}
    new_inverse_correlation: Any = {}
    for layer in layers:
      p = _inverse_correlation_of(state, layer)
      if layer.path in entries:  # Else passthrough: keep the gradient and P.
        x, steps = _augmented_input(layer, entries[layer.path], p.dtype)
        grad = augment(layer, layer.kernel, layer.bias, p.dtype)
        direction, p = layer_step(
          p,
          x,
          steps,
          grad,
          forgetting_factor,
          ratio,
          _gradient_scale_for(gradient_scale, layer.path),
        )
        directions.update(
          split_augmented(layer, direction, layer.kernel, layer.bias)
        )
      new_inverse_correlation = _tree.nested_set(
        new_inverse_correlation, layer.path, p
      )
    return (
      _tree.replace_leaves(updates, directions, lambda g: g),
      state_type(new_inverse_correlation),
    )

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
