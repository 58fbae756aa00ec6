"""A built-in Flax cell in its exact Lemma-1 form (`flax_forms.py`).

`exact_form` maps a Flax `SimpleCell`, `LSTMCell`, `OptimizedLSTMCell` or
`GRUCell` instance whose `gate_fn` and `activation_fn` act element-wise to
its Lemma-1 cell (or says why it has none); `named_cell('nnx.GRUCell', n)`
builds one by name, with Flax's own initialisation packed into `W`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.cells import flax_forms
from rtrl.cells.flax_kind import BUILTIN_CELLS
from rtrl.cells.flax_weights import fused_weights
from rtrl.cells.lemma1 import Cell


def _is_elementwise(fn: Callable) -> bool:
  """Whether `fn` acts on each entry alone: same values entry by entry and a
  diagonal Jacobian on a random vector."""
  v = jnp.asarray([-1.7, -0.4, 0.3, 1.1, 2.6])
  try:
    out = jnp.asarray(fn(v))
    single = jnp.stack([jnp.asarray(fn(v[i])) for i in range(v.shape[0])])
    jac = jax.jacfwd(fn)(v)
  except Exception:  # pylint: disable=broad-except
    return False
  if out.shape != v.shape or jac.shape != (5, 5) or single.shape != (5,):
    return False
  off_diagonal = jnp.asarray(jac) * (1.0 - jnp.eye(5))
  return bool(jnp.allclose(out, single) and not jnp.any(off_diagonal != 0))


def lemma1_form(
  api: str,
  module: Any,
  kind: str,
  init_fn: Callable | None = None,
  **sparsity: Any,
) -> Cell | str:
  """The Lemma-1 cell for a built-in Flax cell, or why it has none."""
  gate_fn = jax.nn.sigmoid if kind == "SimpleCell" else module.gate_fn
  activation_fn = module.activation_fn
  for arg, fn in (("gate_fn", gate_fn), ("activation_fn", activation_fn)):
    if not _is_elementwise(fn):
      return (
        f"{arg}={getattr(fn, '__name__', fn)!r} is not element-wise; use an "
        f"element-wise {arg} for the exact Lemma-1 form"
      )
  n = module.hidden_features if api == "nnx" else module.features
  if kind == "SimpleCell":
    return flax_forms.FlaxSimpleCell(
      n, activation_fn, module.residual, init_fn=init_fn, **sparsity
    )
  if kind == "GRUCell":
    return flax_forms.FlaxGRUCell(
      n, gate_fn, activation_fn, api == "linen", init_fn=init_fn, **sparsity
    )
  return flax_forms.FlaxLSTMCell(
    n, gate_fn, activation_fn, init_fn=init_fn, **sparsity
  )


def named_cell(name: str, hidden_size: int, **sparsity: Any) -> Cell:
  """Flax's built-in cell by name, in its exact Lemma-1 form.

  What `rtrl.cells.make('flax:nnx.GRUCell', n)` (and the experiments'
  `--config.cell=flax:nnx.GRUCell`) build: the cell with Flax's default
  settings, whose `init(key, input_size)` is Flax's own initialisation of
  that module, packed into `W`.

  Args:
    name: `'nnx.'` or `'linen.'` followed by one of `BUILTIN_CELLS`
      (case-insensitive), e.g. `'nnx.GRUCell'`, `'linen.LSTMCell'`.
    hidden_size: the number of hidden units.
    **sparsity: `recurrent_mask` / `recurrent_density` / `mask_seed`
      (`rtrl.cells.Cell`): a sparse recurrence, Flax's initialisation
      zeroed off it.

  Returns:
    A `rtrl.cells.flax_forms` cell.

  Raises:
    ValueError: naming `name` when it is not such a cell; a bad sparsity
      (`rtrl.cells.Cell`).
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  hidden_size = validation.positive_int("hidden_size", hidden_size)
  known = {
    f"{api}.{kind}".lower(): (api, kind)
    for api in ("nnx", "linen")
    for kind in BUILTIN_CELLS
  }
  if str(name).lower() not in known:
    spellings = [f"flax:{api}.{kind}" for api, kind in known.values()]
    raise ValueError(f"cell must be one of {spellings}, got 'flax:{name}'")
  api, kind = known[str(name).lower()]

  def build(key, input_size):
    dtype = jnp.asarray(0.0).dtype  # float64 under jax.enable_x64
    if api == "nnx":
      cls = getattr(nnx, kind)
      return cls(input_size, hidden_size, param_dtype=dtype, rngs=nnx.Rngs(key))
    module = getattr(nn, kind)(features=hidden_size, param_dtype=dtype)
    carry = module.initialize_carry(key, (input_size,))
    x = jnp.zeros((input_size,), dtype)
    return module, module.init(key, carry, x)["params"]

  def init(key, input_size):
    built = build(key, validation.positive_int("input_size", input_size))
    module, params = built if api == "linen" else (built, None)
    return {"W": fused_weights(api, module, kind, params, input_size)}

  built = build(jax.random.PRNGKey(0), 1)
  form = lemma1_form(
    api, built[0] if api == "linen" else built, kind, init_fn=init, **sparsity
  )
  assert isinstance(form, Cell)  # Flax's defaults are element-wise
  return form


__all__ = ["lemma1_form", "named_cell"]
