"""A built-in Flax cell's params <-> the fused `W` of its Lemma-1 form.

`gate_blocks(api, kind)` says where each gate block's `x` rows, `h` rows
and bias live in Flax's params; `fused_weights` packs them into one
`(input_size + n + 1, K n)` matrix `W`, `unpack_weights` gives `W` back in
Flax's layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

# A weight reference: (path in the params dict, column chunk or None).
WeightRef = tuple[tuple[str, ...], Any]


def gate_blocks(api: str, kind: str) -> list[tuple[WeightRef | None, ...]]:
  """Per gate block of `W`: where its `x` rows, `h` rows and bias live in
  Flax's params (None: fixed at zero)."""

  def ref(name, leaf, chunk=None):
    return ((name, leaf), chunk)

  if kind == "SimpleCell":
    x, h = ("dense_i", "dense_h") if api == "nnx" else ("i", "h")
    return [(ref(x, "kernel"), ref(h, "kernel"), ref(x, "bias"))]
  if kind == "OptimizedLSTMCell" and api == "nnx":
    return [
      (ref("dense_i", "kernel", k), ref("dense_h", "kernel", k))
      + (ref("dense_h", "bias", k),)
      for k in range(4)
    ]
  if kind in ("LSTMCell", "OptimizedLSTMCell"):
    forget = "if_" if api == "nnx" else "if"
    names = [("ii", "hi"), (forget, "hf"), ("ig", "hg"), ("io", "ho")]
    return [
      (ref(i, "kernel"), ref(h, "kernel"), ref(h, "bias")) for i, h in names
    ]
  if api == "nnx":  # GRUCell: fused dense_i (with bias) and dense_h (without)
    gate = [
      (ref("dense_i", "kernel", k), ref("dense_h", "kernel", k))
      + (ref("dense_i", "bias", k),)
      for k in range(2)
    ]
    return gate + [
      (ref("dense_i", "kernel", 2), None, ref("dense_i", "bias", 2)),
      (None, ref("dense_h", "kernel", 2), None),
    ]
  return [
    (ref("ir", "kernel"), ref("hr", "kernel"), ref("ir", "bias")),
    (ref("iz", "kernel"), ref("hz", "kernel"), ref("iz", "bias")),
    (ref("in", "kernel"), None, ref("in", "bias")),
    (None, ref("hn", "kernel"), ref("hn", "bias")),
  ]


def _lookup(tree: Mapping, path: tuple[str, ...]) -> Any:
  for key in path:
    tree = tree[key]
  return tree


def _pack(tree, blocks, input_size: int, n: int) -> jax.Array:
  """Flax's params -> the fused `(input_size + n + 1, K n)` matrix `W`."""
  dtype = jnp.result_type(*jax.tree_util.tree_leaves(tree))

  def part(ref, shape):
    if ref is None:
      return jnp.zeros(shape, dtype)
    path, chunk = ref
    leaf = jnp.asarray(_lookup(tree, path), dtype)
    return leaf if chunk is None else leaf[..., chunk * n : (chunk + 1) * n]

  columns = [
    jnp.concatenate(
      [part(x, (input_size, n)), part(h, (n, n)), part(b, (n,))[None]]
    )
    for x, h, b in blocks
  ]
  return jnp.concatenate(columns, axis=1)


def unpack_weights(weights: jax.Array, blocks, n: int) -> dict:
  """The fused `W` -> a nested dict in Flax's params layout."""
  input_size = weights.shape[0] - n - 1
  pieces: dict[tuple[str, ...], dict] = {}
  for k, refs in enumerate(blocks):
    column = weights[:, k * n : (k + 1) * n]
    parts = (column[:input_size], column[input_size:-1], column[-1])
    for ref, value in zip(refs, parts):
      if ref is not None:
        pieces.setdefault(ref[0], {})[ref[1]] = value
  out: dict = {}
  for path, chunks in pieces.items():
    leaf = chunks.get(None)
    if leaf is None:
      leaf = jnp.concatenate([chunks[c] for c in sorted(chunks)], axis=-1)
    out.setdefault(path[0], {})[path[1]] = leaf
  return out


def input_kernel_rows(api: str, kind: str, params: Mapping) -> int:
  """The input size a built-in cell's params were built for."""
  x_ref = gate_blocks(api, kind)[0][0]
  assert x_ref is not None  # every cell's first gate reads x
  return _lookup(params, x_ref[0]).shape[0]


def fused_weights(api, module, kind, params, input_size) -> jax.Array:
  if api == "nnx":
    from flax import nnx  # pylint: disable=g-import-not-at-top

    params = nnx.state(module, nnx.Param).to_pure_dict()
    n = module.hidden_features
  else:
    n = module.features
  blocks = gate_blocks(api, kind)
  found = input_kernel_rows(api, kind, params)
  if input_size is not None and input_size != found:
    raise ValueError(
      f"input_size ({input_size}) does not match the params of "
      f"{api}.{kind}, built for inputs of size {found}"
    )
  return _pack(params, blocks, found, n)


__all__ = [
  "WeightRef",
  "fused_weights",
  "gate_blocks",
  "input_kernel_rows",
  "unpack_weights",
]
