"""Checking RLS hyper-parameters and looking up the per-layer ``η``.

Shared by every form of the RLS transform (`rls.conventional`,
`rls.square_root`, `rls.second_moment`). A bad value raises a ValueError
naming the argument and the range it should be in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from rls import layer_tree

ScalarOrTree = float | jax.Array | Mapping[str, Any]


def is_traced(value: Any) -> bool:
  """Whether `value` is a tracer (`optax.inject_hyperparams` traces them)."""
  return isinstance(value, jax.core.Tracer)


def check_range(
  name: str, value: Any, *, upper: float | None = None, hint: str = ""
) -> None:
  """Raises ValueError unless ``0 < value (<= upper)``; skips traced values.

  Under `optax.inject_hyperparams` the factory is re-run inside `update` with
  traced hyper-parameters; those were checked when ``init`` built them.
  """
  if is_traced(value):
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
    where = f"[{layer_tree.format_path(path)!r}]" if path else ""
    check_range(f"gradient_scale{where}", gradient_scale)


def check_hyperparameters(
  forgetting_factor, ratio, gradient_scale, init_scale
) -> None:
  """Checks ``λ`` in (0, 1], ``k > 0``, ``η > 0`` and ``init_scale > 0``."""
  check_range(
    "forgetting_factor",
    forgetting_factor,
    upper=1.0,
    hint=" It is λ of eq. (19); 1 means no forgetting.",
  )
  check_range("ratio", ratio, hint=" It is k of eq. (33); the paper uses 0.1.")
  check_range("init_scale", init_scale, hint=" P_0 = init_scale * I.")
  check_gradient_scale(gradient_scale)


def check_preconditioner_dtype(preconditioner_dtype: Any) -> None:
  """Checks that an explicit dtype for ``P`` is a floating-point one."""
  if preconditioner_dtype is None:
    return
  try:
    floating = jnp.issubdtype(preconditioner_dtype, jnp.floating)
  except TypeError:
    floating = False
  if not floating:
    raise ValueError(
      f"preconditioner_dtype must be a floating-point dtype such as "
      f"jnp.float32 or jnp.float64 (or None), got {preconditioner_dtype!r}."
    )


def gradient_scale_for(gradient_scale: ScalarOrTree, path: layer_tree.Path):
  """η of the layer at `path`: a number applies to its whole sub-tree."""
  node = gradient_scale
  for depth, key in enumerate(path):
    if not isinstance(node, Mapping):
      break
    if key not in node:
      raise ValueError(
        f"gradient_scale has no entry for layer "
        f"{layer_tree.format_path(path)!r} (no key {key!r} under "
        f"{layer_tree.format_path(path[:depth])!r}). Give one number, or a "
        "dict mirroring the params with a number for every layer or "
        "sub-tree, e.g. {'Dense_0': 1.0, 'LSTM_0': 0.5}."
      )
    node = node[key]
  if isinstance(node, Mapping):
    raise ValueError(
      f"gradient_scale[{layer_tree.format_path(path)!r}] is a dict; "
      "expected the number η for that layer."
    )
  return node


def check_gradient_scale_names_layers(
  gradient_scale: ScalarOrTree,
  layer_paths: list[layer_tree.Path],
  path: layer_tree.Path = (),
) -> None:
  """Every key of a per-layer η dict leads to a layer of the params (a typo
  would otherwise be ignored silently)."""
  if not isinstance(gradient_scale, Mapping):
    return
  for key, child in gradient_scale.items():
    child_path = path + (key,)
    if not any(p[: len(child_path)] == child_path for p in layer_paths):
      raise ValueError(
        f"gradient_scale names {layer_tree.format_path(child_path)!r}, which "
        "is not a layer (or a sub-tree holding layers) of the params; the "
        f"layers are {sorted(layer_tree.format_path(p) for p in layer_paths)}."
      )
    check_gradient_scale_names_layers(child, layer_paths, child_path)
