"""Finding the layers of a params tree and matching them with `layer_inputs`.

A *layer* is a mapping (a Flax module's params) with a ``'kernel'`` array of
two or more dimensions and optionally a ``'bias'``: ``nn.Dense``, ``nn.Conv``
and the input / recurrent halves of `rls.layers.RNN` and `rls.layers.LSTM`.
Its augmented parameter matrix ``Θ = [kernel.reshape(fan_in, out); bias]`` is
what one inverse autocorrelation matrix ``P`` preconditions.

Everything here runs on static structure (paths, shapes) at trace time, so a
mismatch raises a `ValueError` before any JAX operation is staged.
"""

from __future__ import annotations

from collections.abc import Mapping
import math
import sys
from typing import Any, NamedTuple

import jax
import optax

Path = tuple[Any, ...]

KERNEL = "kernel"
BIAS = "bias"


class Layer(NamedTuple):
  """One layer found in a params (or updates) tree.

  Attributes:
    path: keys from the root to the layer's mapping, e.g. ``('Dense_0',)``.
    kernel: the kernel leaf (an array, or anything with ``.shape``/``.dtype``).
    bias: the bias leaf, or ``None`` when the layer has no bias.
  """

  path: Path
  kernel: Any
  bias: Any

  @property
  def fan_in(self) -> int:
    """Rows of the kernel once flattened to ``(fan_in, out)``."""
    return math.prod(self.kernel.shape[:-1])

  @property
  def num_outputs(self) -> int:
    return self.kernel.shape[-1]

  @property
  def augmented_size(self) -> int:
    """Size of ``P``: the fan-in plus one row for the bias (the appended 1)."""
    return self.fan_in + (self.bias is not None)


def format_path(path: Path) -> str:
  return "/".join(str(key) for key in path) if path else "<root>"


def is_masked(node: Any) -> bool:
  """An `optax.MaskedNode`, bare or in the ``nnx.Variable`` it replaced the
  value of (``nnx.Optimizer`` gives ``tx.init`` its params as Variables)."""
  if _is_variable(node):
    node = node.get_raw_value()
  return isinstance(node, optax.MaskedNode)


def _key_name(key: Any) -> Any:
  """The plain key of a `jax.tree_util` path entry (dict key, index, attr)."""
  for attribute in ("key", "idx", "name"):
    if hasattr(key, attribute):
      return getattr(key, attribute)
  return str(key)


def _is_variable(node: Any) -> bool:
  """An ``nnx.Variable``, as in the params ``nnx.Optimizer`` gives to
  ``tx.init`` (flax.nnx is imported if one exists)."""
  nnx = sys.modules.get("flax.nnx")
  return nnx is not None and isinstance(node, nnx.Variable)


def leaf_paths(tree: Any, prefix: Path = ()) -> list[Path]:
  """Paths of all (non-masked) array leaves of `tree` (an ``nnx.Variable``
  counts as one leaf)."""
  with_paths, _ = jax.tree_util.tree_flatten_with_path(
    tree, is_leaf=lambda node: is_masked(node) or _is_variable(node)
  )
  return [
    prefix + tuple(_key_name(k) for k in key_path)
    for key_path, leaf in with_paths
    if not is_masked(leaf)
  ]


def _is_layer(node: Mapping) -> bool:
  kernel = node.get(KERNEL, None)
  if kernel is None or isinstance(kernel, Mapping):
    return False
  return is_masked(kernel) or len(getattr(kernel, "shape", ())) >= 2


def scan_layers(tree: Any) -> tuple[list[Layer], list[Path], list[Path]]:
  """Splits a params-shaped tree into layers and other parameters.

  Args:
    tree: params, updates or a masked version of them (`optax.MaskedNode`
      leaves are what `optax.masked` / `optax.multi_transform` hand to an
      inner transformation for parameters that belong to another one).

  Returns:
    ``(layers, masked_paths, other_leaf_paths)``: the layers this
    transformation must precondition, the paths of masked-out layers and
    sub-trees, and the paths of parameters that are not the kernel or bias of
    any layer (embeddings, normalisation scales, ...).

  Raises:
    ValueError: a layer whose kernel and bias are split between two
      optimisers (one masked, one not); one ``P`` covers both.
  """
  layers: list[Layer] = []
  masked: list[Path] = []
  others: list[Path] = []

  def visit(node: Any, path: Path) -> None:
    if isinstance(node, Mapping):
      if _is_layer(node):
        kernel, bias = node[KERNEL], node.get(BIAS, None)
        for key in node:
          if key not in (KERNEL, BIAS):
            others.extend(leaf_paths(node[key], path + (key,)))
        if bias is not None and is_masked(kernel) != is_masked(bias):
          raise ValueError(
            f"Layer {format_path(path)!r}: its kernel and bias are given to "
            "different optimisers (one of them is masked out). RLS keeps one "
            "P for the augmented matrix [kernel; bias], so label both with "
            "the same transformation in optax.multi_transform."
          )
        if is_masked(kernel):
          masked.append(path)
        else:
          layers.append(Layer(path, kernel, bias))
        return
      for key, child in node.items():
        visit(child, path + (key,))
    elif is_masked(node):
      # A whole masked sub-tree (optax.masked with a prefix mask).
      masked.append(path)
    elif node is not None:
      others.extend(leaf_paths(node, path))

  visit(tree, ())
  return layers, masked, others


def is_under(path: Path, prefixes: list[Path]) -> bool:
  """Whether `path` equals or lies below one of `prefixes`."""
  return any(path[: len(prefix)] == prefix for prefix in prefixes)


def scan_entries(layer_inputs: Any, is_entry) -> dict[Path, Any]:
  """Maps path -> entry for every entry of a nested-mapping `layer_inputs`."""
  entries: dict[Path, Any] = {}

  def visit(node: Any, path: Path) -> None:
    if is_entry(node):
      entries[path] = node
    elif isinstance(node, Mapping):
      for key, child in node.items():
        visit(child, path + (key,))
    else:
      raise ValueError(
        f"layer_inputs[{format_path(path)!r}] is a {type(node).__name__}; "
        "expected a nested dict whose entries are rls.LayerInput or arrays "
        "(the mean input of one layer), mirroring the params tree down to "
        "the layer."
      )

  visit(layer_inputs, ())
  return entries


NOT_A_LAYER = (
  "they are not the kernel or bias of a dense, conv or "
  "recurrent layer, so they have no layer input x̄."
)


def no_layer_input_error(paths: list[Path], why: str) -> ValueError:
  names = ", ".join(repr(format_path(p)) for p in paths)
  return ValueError(
    f"RLS cannot precondition parameter(s) {names}: {why} Either route "
    "them to another optimiser with optax.multi_transform (e.g. Adam for "
    "embeddings and normalisation scales), or pass passthrough=True to let "
    "their gradients through unchanged. rls.layer_inputs records inputs for "
    "flax.linen.Dense, flax.linen.Conv (feature_group_count=1), "
    "rls.layers.RNN and rls.layers.LSTM, and in an nnx.Module for "
    "nnx.Linear, nnx.Conv (feature_group_count=1) and the nnx.Linear "
    "layers of recurrent cells, stepped directly or by nnx.RNN."
  )


def layers_to_precondition(
  tree: Any, passthrough: bool
) -> tuple[list[Layer], list[Path]]:
  """`scan_layers`'s layers and masked paths; parameters that belong to no
  layer raise a ValueError naming them unless `passthrough`."""
  layers, masked, others = scan_layers(tree)
  if others and not passthrough:
    raise no_layer_input_error(others, NOT_A_LAYER)
  return layers, masked


def _check_entries_have_layers(
  entries: Mapping[Path, Any], layers: list[Layer], masked: list[Path]
) -> None:
  """Every entry of `layer_inputs` names a layer (masked ones are ignored)."""
  known = {layer.path for layer in layers}
  unknown = [
    path for path in entries if path not in known and not is_under(path, masked)
  ]
  if unknown:
    raise ValueError(
      "layer_inputs does not match the params: entries "
      f"{[format_path(p) for p in unknown]} have no layer (a dict "
      "with 'kernel') at that path; the layers are "
      f"{sorted(format_path(p) for p in known)} (masked out: "
      f"{sorted(format_path(p) for p in masked)}). Pass the tree from "
      "rls.layer_inputs for the same params this optimiser updates."
    )


def match_layer_inputs(
  updates: Any, layer_inputs: Any, is_entry, passthrough: bool
) -> tuple[list[Layer], dict[Path, Any]]:
  """The layers of `updates` and the entries of `layer_inputs` by path.

  Raises:
    ValueError: no `layer_inputs`; an entry with no layer; a layer with no
      entry, or a parameter of no layer (both allowed with `passthrough`).
  """
  if layer_inputs is None:
    raise ValueError(
      "scale_by_rls.update needs the keyword argument layer_inputs=..., "
      "the mean input of every layer (see rls.layer_inputs)."
    )
  layers, masked = layers_to_precondition(updates, passthrough)
  entries = scan_entries(layer_inputs, is_entry)
  _check_entries_have_layers(entries, layers, masked)
  missing = [layer.path for layer in layers if layer.path not in entries]
  if missing and not passthrough:
    raise no_layer_input_error(
      missing, "layer_inputs has no entry for these layers."
    )
  return layers, entries


def nested_get(tree: Mapping, path: Path) -> Any:
  for key in path:
    tree = tree[key]
  return tree


def nested_set(tree: dict, path: Path, value: Any) -> Any:
  """Sets `value` at `path` in nested dicts; returns the (new) root.

  The empty path (a lone layer such as a bare ``nn.Dense``, whose params are
  ``{'kernel', 'bias'}`` at the root) makes `value` itself the root.
  """
  if not path:
    return value
  node = tree
  for key in path[:-1]:
    node = node.setdefault(key, {})
  node[path[-1]] = value
  return tree


def replace_leaves(tree: Any, new_leaves: Mapping[Path, Any], default) -> Any:
  """Rebuilds `tree` (same containers) with leaves looked up by path.

  Args:
    tree: a params-shaped tree, possibly with `optax.MaskedNode` leaves (kept).
    new_leaves: replacement leaves by path.
    default: ``default(leaf)`` for leaves not in `new_leaves`.

  Returns:
    A tree with the structure of `tree`.
  """

  def replace(key_path, leaf):
    if is_masked(leaf):
      return leaf
    path = tuple(_key_name(k) for k in key_path)
    return new_leaves[path] if path in new_leaves else default(leaf)

  return jax.tree_util.tree_map_with_path(replace, tree, is_leaf=is_masked)
