"""Bring your own Flax model: `from_flax` and `to_flax`.

`from_flax(module)` turns a Flax recurrent cell, `flax.nnx` or `flax.linen`,
called as `module(carry, x) -> (carry, y)`, into an rtrl cell and its
params:

- Flax's built-in `SimpleCell`, `LSTMCell`, `OptimizedLSTMCell` and
  `GRUCell` (with element-wise `gate_fn` / `activation_fn`) become the
  Lemma-1 cells of `flax_forms.py`, their weights packed into one fused
  `W` (`{'W': (input_size + n + 1, K n)}`): every estimator serves them,
  the Kronecker-factored ones (OK, KF, KTP, ...) included.
- Any other cell becomes a `CustomCell` through its call (the autodiff path:
  exact RTRL, UORO, SnAp-1, BPTT and TBPTT; nothing to derive), with Flax's
  own parameter pytree as params.

`to_flax(module, params)` gives trained params back in Flax's form.
Flax is imported inside these functions only, so `import rtrl` does not
import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import validation
from rtrl.cells import flax_forms
from rtrl.cells.custom import CustomCell
from rtrl.cells.lemma1 import Cell

BUILTIN_CELLS = ("SimpleCell", "LSTMCell", "OptimizedLSTMCell", "GRUCell")
# A weight reference: (path in the params dict, column chunk or None).
_Ref = tuple[tuple[str, ...], Any]


def _api(module: Any) -> str:
  """'nnx' or 'linen', else a ValueError naming `module`."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  if isinstance(module, nnx.Module):
    return "nnx"
  if isinstance(module, nn.Module):
    return "linen"
  raise ValueError(
    f"module must be a flax.nnx.Module or flax.linen.Module recurrent cell, "
    f"called as module(carry, x) -> (carry, y); got {type(module).__name__}"
  )


def _builtin_kind(api: str, module: Any) -> str | None:
  """The Flax class name if `module` is exactly one of Flax's cells."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  namespace = nnx if api == "nnx" else nn
  for kind in BUILTIN_CELLS:
    if type(module) is getattr(namespace, kind):
      return kind
  return None


def _gate_blocks(api: str, kind: str) -> list[tuple[_Ref | None, ...]]:
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


def _unpack(weights: jax.Array, blocks, n: int) -> dict:
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


def _exact_form(
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


class _FlaxAutodiffCell(CustomCell):
  """A `CustomCell` over a Flax module's call, for the params it came with
  (so its input size is known rather than searched for)."""

  def __init__(self, *args, input_size: int, **kwargs):
    self._known_input_size = input_size
    super().__init__(*args, **kwargs)

  def input_size(self, params) -> int:
    del params
    return self._known_input_size


def _initial_carry(api: str, module: Any, input_size: int, initial_carry):
  if initial_carry is not None:
    return jax.tree_util.tree_map(jnp.asarray, initial_carry)
  if not hasattr(module, "initialize_carry"):
    raise ValueError(
      f"initial_carry is required for {type(module).__name__}, which has no "
      f"initialize_carry: pass initial_carry=, the carry at a sequence start "
      f"for one example (no batch axis)"
    )
  if api == "linen":
    return module.initialize_carry(jax.random.PRNGKey(0), (input_size,))
  from flax import nnx  # pylint: disable=g-import-not-at-top

  return module.initialize_carry((input_size,), rngs=nnx.Rngs(0))


# Linen's errors for a call that needs more than `{'params': ...}`.
_LINEN_STATE_ERRORS = {
  "InvalidRngError": "an RNG stream",
  "ScopeCollectionNotFound": "a variable collection (batch statistics?)",
  "ModifyScopeVariableError": "to change a variable collection",
}


def _check_call(call, params, carry, x, where: str):
  """The abstract `(carry', y)` of one call, or a ValueError naming
  `module` when the call is not `(carry, x) -> (carry, y)`."""
  try:
    out = jax.eval_shape(call, params, carry, x)
  except Exception as error:  # pylint: disable=broad-except
    what = _LINEN_STATE_ERRORS.get(type(error).__name__)
    if what is not None:
      raise ValueError(
        f"module ({where}) needs {what} besides params ({error}); the online "
        f"trainers need the step to be a pure function of (params, carry, x)"
        f": make that layer deterministic (e.g. nn.Dropout(deterministic="
        f"True), nn.BatchNorm(use_running_average=True) with its statistics "
        f"as constants), or write the step as an rtrl.cells.CustomCell that "
        f"carries that state"
      ) from error
    raise _not_a_cell(where, carry, x, error) from error
  if not (isinstance(out, (tuple, list)) and len(out) == 2):
    raise ValueError(
      f"module ({where}) must return (carry, y) from module(carry, x); it "
      f"returned {_shapes(out)}"
    )
  y = out[1]
  if not (isinstance(y, jax.ShapeDtypeStruct) and y.ndim == 1):
    raise ValueError(
      f"module ({where})'s output y (of (carry, y) = module(carry, x)) must "
      f"be one 1-D array per example, the vector fed to the readout; got "
      f"{_shapes(y)}"
    )
  return out


def _not_a_cell(where: str, carry, x, error: Exception) -> ValueError:
  return ValueError(
    f"module ({where}) must be a recurrent cell called as module(carry, x)"
    f" -> (carry, y); calling it on a carry {_shapes(carry)} and x of "
    f"shape {x.shape} failed: {type(error).__name__}: {error}"
  )


def _shapes(tree) -> str:
  return str(jax.tree_util.tree_map(lambda a: tuple(jnp.shape(a)), tree))


def _output_is_carry_leaf(call, params, carry, x) -> int | None:
  """Index of the carry leaf that `y` is (Flax's cells return `h` twice),
  read off the traced program; None when `y` is computed apart."""
  jaxpr = jax.make_jaxpr(call)(params, carry, x).jaxpr
  num_carry = len(jax.tree_util.tree_leaves(carry))
  y_var = jaxpr.outvars[num_carry]
  for index, var in enumerate(jaxpr.outvars[:num_carry]):
    if var is y_var:
      return index
  return None


def _check_pure_step(graphdef, params, rest, carry, x, where: str) -> None:
  """A ValueError naming the variable when one call of the NNX module
  changes its non-parameter state (an RNG stream, batch statistics)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top

  # Copied first: the merged module may share its variables with `rest`.
  before = {path: _values(var) for path, var in nnx.to_flat_state(rest)}
  module = nnx.merge(graphdef, params, rest)
  try:
    module(carry, x)
  except Exception as error:  # pylint: disable=broad-except
    raise _not_a_cell(where, carry, x, error) from error
  after = nnx.to_flat_state(nnx.state(module, nnx.Not(nnx.Param)))
  for path, var in after:
    old = before.get(path)
    if old is not None and np.array_equal(old, _values(var)):
      continue
    if isinstance(var, nnx.BatchStat):
      what = "batch statistics"
    elif isinstance(var, nnx.RngState):
      what = "an RNG stream"
    else:
      what = f"a {type(var).__name__} variable"
    raise ValueError(
      f"module ({where}) changes its non-parameter state "
      f"{'.'.join(map(str, path))} ({what}) when called; the online "
      f"trainers need the step to be a pure function of (params, carry, x): "
      f"make the layer deterministic (e.g. module.eval(), or "
      f"nnx.BatchNorm(use_running_average=True), nnx.Dropout(rate=0)), or "
      f"write the step as an rtrl.cells.CustomCell that carries that state"
    )


def _values(var) -> np.ndarray:
  """A NumPy copy of a variable's value (an RNG key's raw data)."""
  value = getattr(var, "value", var)
  if jax.dtypes.issubdtype(jnp.result_type(value), jax.dtypes.prng_key):
    value = jax.random.key_data(value)
  return np.array(value)


def _autodiff_cell(api, module, params, input_size, initial_carry, why):
  """`(CustomCell, Flax params)` over the module's call."""
  where = f"{api}.{type(module).__name__}"
  if api == "nnx":
    from flax import nnx  # pylint: disable=g-import-not-at-top

    graphdef, params, rest = nnx.split(module, nnx.Param, ...)

    def call(p, carry, x):
      return nnx.merge(graphdef, p, rest)(carry, x)

    if input_size is None:
      input_size = getattr(module, "in_features", None)
  else:
    rest = None

    def call(p, carry, x):
      return module.apply({"params": p}, carry, x)

  if input_size is None:
    raise ValueError(
      f"input_size is required for {where} (it has no in_features): pass "
      f"from_flax(module, input_size=I), the size of one step's x"
    )
  input_size = validation.positive_int("input_size", input_size)
  carry0 = _initial_carry(api, module, input_size, initial_carry)
  leaves = jax.tree_util.tree_leaves(params)
  dtype = jnp.result_type(*leaves) if leaves else jnp.float32
  x0 = jnp.zeros((input_size,), dtype)
  if api == "nnx":  # first, concretely: a changing state fails under trace
    probe = jnp.linspace(0.5, 1.5, input_size, dtype=dtype)  # moves stats
    _check_pure_step(graphdef, params, rest, carry0, probe, where)
  _, y = _check_call(call, params, carry0, x0, where)
  carry_leaf = _output_is_carry_leaf(call, params, carry0, x0)
  if carry_leaf is not None:
    initial_state = carry0

    def step(p, carry, x):
      return call(p, carry, x)[0]

    def output(carry):
      return jax.tree_util.tree_leaves(carry)[carry_leaf]
  else:
    initial_state = (carry0, jnp.zeros(y.shape, y.dtype))

    def step(p, state, x):
      new_carry, new_y = call(p, state[0], x)
      return (new_carry, new_y)

    def output(state):
      return state[1]

  def init(key, size):
    del key
    if size != input_size:
      raise ValueError(
        f"input_size must be {input_size}, the size {where}'s params were "
        f"built for, got {size}"
      )
    return params

  name = f"flax {where}" + (f" (autodiff path: {why})" if why else "")
  cell = _FlaxAutodiffCell(
    step, init, initial_state, output, name=name, input_size=input_size
  )
  return cell, params


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
  api = _api(module)
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
  kind = _builtin_kind(api, module)
  if kind is not None and api == "linen" and input_size is None:
    input_size = _input_kernel_rows(api, kind, params)
  why = None if exact_form else "exact_form=False"
  if kind is not None and exact_form:
    form = _exact_form(api, module, kind, **sparsity)
    if isinstance(form, Cell):
      weights = _fused_weights(api, module, kind, params, input_size)
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
  return _autodiff_cell(api, module, params, input_size, initial_carry, why)


def _input_kernel_rows(api: str, kind: str, params: Mapping) -> int:
  """The input size a built-in cell's params were built for."""
  x_ref = _gate_blocks(api, kind)[0][0]
  assert x_ref is not None  # every cell's first gate reads x
  return _lookup(params, x_ref[0]).shape[0]


def _fused_weights(api, module, kind, params, input_size) -> jax.Array:
  if api == "nnx":
    from flax import nnx  # pylint: disable=g-import-not-at-top

    params = nnx.state(module, nnx.Param).to_pure_dict()
    n = module.hidden_features
  else:
    n = module.features
  blocks = _gate_blocks(api, kind)
  found = _input_kernel_rows(api, kind, params)
  if input_size is not None and input_size != found:
    raise ValueError(
      f"input_size ({input_size}) does not match the params of "
      f"{api}.{kind}, built for inputs of size {found}"
    )
  return _pack(params, blocks, found, n)


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
  api = _api(module)
  kind = _builtin_kind(api, module)
  fused = isinstance(params, Mapping) and set(params) == {"W"}
  if fused and kind is not None:
    n = module.hidden_features if api == "nnx" else module.features
    params = _unpack(jnp.asarray(params["W"]), _gate_blocks(api, kind), n)
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
    return {"W": _fused_weights(api, module, kind, params, input_size)}

  built = build(jax.random.PRNGKey(0), 1)
  form = _exact_form(
    api, built[0] if api == "linen" else built, kind, init_fn=init, **sparsity
  )
  assert isinstance(form, Cell)  # Flax's defaults are element-wise
  return form


__all__ = ["BUILTIN_CELLS", "from_flax", "named_cell", "to_flax"]
