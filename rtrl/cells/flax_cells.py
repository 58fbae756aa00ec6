"""Bring your own Flax model: `from_flax` and `to_flax`.

`from_flax(module)` turns a Flax recurrent cell, `flax.nnx` or `flax.linen`,
called as `module(carry, x) -> (carry, y)`, into an rtrl cell and its
params:

- Flax's built-in `SimpleCell`, `LSTMCell`, `OptimizedLSTMCell` and
  `GRUCell` (with element-wise `gate_fn` / `activation_fn`) become the
  Lemma-1 cells of `flax_forms.py` (`flax_exact.py`), their weights packed
  into one fused `W` (`{'W': (input_size + n + 1, K n)}`, `flax_weights.py`):
  every estimator serves them, the Kronecker-factored ones (OK, KF, KTP,
  ...) included.
- Any other cell becomes a `CustomCell` through its call (the autodiff path,
  `flax_autodiff.py`: exact RTRL, UORO, SnAp-1, BPTT and TBPTT; nothing to
  derive), with Flax's own parameter pytree as params; its call is checked
  to be a pure step (`flax_call_checks.py`).

`to_flax(module, params)` gives trained params back in Flax's form;
`named_cell` builds a built-in cell's exact form by name. Which API and
which built-in cell a module is: `flax_kind.py`. Flax is imported inside
these functions only, so `import rtrl` does not import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from rtrl.cells.flax_autodiff import autodiff_cell
from rtrl.cells.flax_exact import lemma1_form
from rtrl.cells.flax_exact import named_cell
from rtrl.cells.flax_kind import BUILTIN_CELLS
from rtrl.cells.flax_kind import builtin_kind
from rtrl.cells.flax_kind import flax_api
from rtrl.cells.flax_weights import fused_weights
from rtrl.cells.flax_weights import gate_blocks
from rtrl.cells.flax_weights import input_kernel_rows
from rtrl.cells.flax_weights import unpack_weights
from rtrl.cells.lemma1 import Cell


def from_flax(
  module: Any,
  *,
  params: Any = None,
  input_size: int | None = None,
  initial_carry: Any = None,
  exact_form: bool = True,
  recurrent_mask: Any = None,
  recurrent_density: Any = None,
  mask_seed: Any = 0,
):
  """An rtrl cell and its params from a Flax recurrent cell.

  Flax's built-in `SimpleCell`, `LSTMCell`, `OptimizedLSTMCell` and
  `GRUCell` (`flax.nnx` and `flax.linen`) with element-wise `gate_fn` and
  `activation_fn` map exactly to Lemma-1 cells (`rtrl.cells.flax_forms`),
  which every estimator serves; params are then `{'W': fused matrix}`. Any
  other cell called as `module(carry, x) -> (carry, y)` (one example, `y`
  the 1-D vector fed to the readout) becomes a `CustomCell` (exact RTRL,
  UORO, SnAp-1, BPTT, TBPTT) whose params are Flax's own (an `nnx.State`
  of the `nnx.Param`s, or the Linen `params` dict).

  Args:
    module: an `nnx.Module` instance (its parameters are taken from it) or
      a `flax.linen.Module`.
    params: Linen only: `variables['params']` from `module.init`.
    input_size: the size of one step's input; read from the module or the
      params when it can be (built-in cells, NNX cells with `in_features`).
    initial_carry: the carry at a sequence start for one example; by
      default from the module's `initialize_carry`.
    exact_form: False forces the autodiff path even for a built-in cell
      (a cell outside the Lemma-1 form takes it anyway).
    recurrent_mask: optional `(n, n)` bool sparsity pattern of the
      recurrent weights (`rtrl.cells.Cell`), for a built-in cell on the
      exact path; the packed `W` is zeroed off it.
    recurrent_density: optional number in (0, 1] instead of a mask: a
      random pattern drawn from `mask_seed` (`rtrl.cells.Cell`).
    mask_seed: the NumPy seed of `recurrent_density`'s pattern.

  Returns:
    `(cell, params)`, ready for `rtrl.estimators.make(name, cell)` and the
    trainers.

  Raises:
    ValueError: naming the argument: `module` not a Flax module or not
      called as `(carry, x) -> (carry, y)`; a Linen cell without `params`
      or (not built in) without `input_size`; `params` given for an NNX
      module; an NNX module whose call changes its non-parameter state (an
      RNG stream, batch statistics), naming the variable's path; a Linen
      cell whose call needs an RNG or a collection besides params; a
      sparsity (`recurrent_mask`, `recurrent_density`) for a cell that
      takes the autodiff path, or a bad one (`rtrl.cells.Cell`).
  """
  sparsity = {
    "recurrent_mask": recurrent_mask,
    "recurrent_density": recurrent_density,
    "mask_seed": mask_seed,
  }
  sparse = recurrent_mask is not None or recurrent_density is not None
  api = flax_api(module)
  _check_params(api, module, params)
  kind = builtin_kind(api, module)
  if kind is not None and api == "linen" and input_size is None:
    input_size = input_kernel_rows(api, kind, params)
  why = None if exact_form else "exact_form=False"
  if kind is not None and exact_form:
    form = lemma1_form(api, module, kind, **sparsity)
    if isinstance(form, Cell):
      weights = fused_weights(api, module, kind, params, input_size)
      mask = form.weight_mask(form.input_size({"W": weights}))
      if sparse and mask is not None:
        weights = weights * mask.astype(weights.dtype)
      return form, {"W": weights}
    why = form
  if sparse:
    raise ValueError(
      f"recurrent_mask / recurrent_density need the exact Lemma-1 form of "
      f"one of Flax's {BUILTIN_CELLS}; {type(module).__name__} takes the "
      f"autodiff path ({why or 'not a built-in cell'}), whose params are "
      f"Flax's own: leave both None"
    )
  return autodiff_cell(api, module, params, input_size, initial_carry, why)


def _check_params(api: str, module: Any, params: Any) -> None:
  """A ValueError naming `params` unless it is the `'params'` collection
  for a Linen module, or None for an NNX one."""
  if api == "linen":
    if params is None:
      raise ValueError(
        f"params is required for the flax.linen cell {type(module).__name__}"
        f": pass from_flax(module, params=variables['params'], input_size=I) "
        f"with variables = module.init(key, carry, x)"
      )
    if isinstance(params, Mapping) and set(params) == {"params"}:
      raise ValueError(
        "params must be the 'params' collection, variables['params'], not "
        "the whole variables dict"
      )
  elif params is not None:
    raise ValueError(
      "params must be None for a flax.nnx module: its parameters are taken "
      "from the module itself"
    )


def to_flax(module: Any, params: Any):
  """Trained params back in Flax's form.

  Args:
    module: the module given to `from_flax` (NNX: the instance to update).
    params: the cell params from training (`{'W': ...}` for a built-in cell
      on the exact path, else Flax's own pytree).

  Returns:
    NNX: `module`, its `nnx.Param`s updated in place (`nnx.update`). Linen:
    the `params` dict that `module.apply({'params': ...}, carry, x)` takes.
  """
  api = flax_api(module)
  kind = builtin_kind(api, module)
  fused = isinstance(params, Mapping) and set(params) == {"W"}
  if fused and kind is not None:
    n = module.hidden_features if api == "nnx" else module.features
    params = unpack_weights(jnp.asarray(params["W"]), gate_blocks(api, kind), n)
  if api == "linen":
    return params
  from flax import nnx  # pylint: disable=g-import-not-at-top

  state = nnx.state(module, nnx.Param)
  if fused and kind is not None:
    template = state.to_pure_dict()
    params = jax.tree_util.tree_map(
      lambda t, p: jnp.asarray(p, jnp.result_type(t)), template, params
    )
    nnx.replace_by_pure_dict(state, params)
    params = state
  nnx.update(module, params)
  return module


__all__ = ["BUILTIN_CELLS", "from_flax", "named_cell", "to_flax"]
