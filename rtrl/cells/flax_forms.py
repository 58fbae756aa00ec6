"""Flax's built-in recurrent cells written as Lemma-1 `Cell`s.

Each class computes exactly what the Flax cell of the same name computes
(`flax.nnx` and `flax.linen` share the equations), with the fused
`W = [W_x; W_h; b]` of `lemma1.Cell` and a per-unit map, so that every
estimator, the Kronecker-factored ones included, serves a Flax model.
`rtrl.cells.from_flax` builds them from a Flax module and packs its
parameters into `W`; the entries of `W` that Flax does not have are fixed
at zero by `weight_mask` (and so by `mask_gradient`).

The gate and activation functions are any element-wise callables (Flax's
`gate_fn` and `activation_fn`); `from_flax` checks that they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.cells.lemma1 import Cell
from rtrl.cells.lemma1 import Params


def _name(fn: Callable) -> str:
  return getattr(fn, "__name__", repr(fn))


class FlaxForm(Cell):
  """A Lemma-1 cell standing for a Flax cell; `init_fn(key, input_size)`,
  when given, replaces `Cell.init` (Flax's own initialisation, packed into
  `W`: see `rtrl.cells.flax_cells.named_cell`)."""

  init_fn: Callable | None = None

  def init(self, key: jax.Array, input_size: int) -> Params:
    """`init_fn(key, input_size)` if given (its `W` zeroed off the
    `weight_mask`, as `Cell.init`'s is), else `Cell.init`."""
    if self.init_fn is None:
      return super().init(key, input_size)
    params = self.init_fn(key, input_size)
    mask = self.weight_mask(input_size)
    if mask is None:
      return params
    return {"W": params["W"] * mask.astype(params["W"].dtype)}

  def _sparsity_repr(self) -> str:
    """`', recurrent_...'` for a sparse cell, else `''`."""
    dense = f"hidden_size={self.hidden_size}"
    return Cell._repr_args(self)[len(dense) :]


class FlaxSimpleCell(FlaxForm):
  """Flax's `SimpleCell`: `h' = act(x W_i + b_i + h W_h [+ h])`.

  One gate block; the `+ h` is Flax's `residual=True` (a direct path
  through the per-unit map, so still Lemma-1).

  Args:
    hidden_size: `n`.
    activation_fn: Flax's `activation_fn`, element-wise (default tanh).
    residual: Flax's `residual`.
    init_fn: replaces `Cell.init` when given (`FlaxForm`).
    **sparsity: `recurrent_mask` / `recurrent_density` / `mask_seed`
      (`Cell`): a sparse recurrence.
  """

  num_gates = 1
  num_state_rows = 1

  def __init__(
    self,
    hidden_size: int,
    activation_fn: Callable = jnp.tanh,
    residual: bool = False,
    init_fn: Callable | None = None,
    **sparsity: Any,
  ):
    super().__init__(hidden_size, **sparsity)
    self.activation_fn, self.residual = activation_fn, bool(residual)
    self.has_direct_path = self.residual  # without it, RFLO is memoryless
    self.init_fn = init_fn

  def __repr__(self):
    return (
      f"FlaxSimpleCell(hidden_size={self.hidden_size}, activation_fn="
      f"{_name(self.activation_fn)}, residual={self.residual}"
      f"{self._sparsity_repr()})"
    )

  def _unit_map(self, z_unit, state_unit):
    pre = z_unit[0] + state_unit[0] if self.residual else z_unit[0]
    return self.activation_fn(pre)[None]


class FlaxLSTMCell(FlaxForm):
  """Flax's `LSTMCell` and `OptimizedLSTMCell`, carry `(c, h)`:

      i = g(z_i), f = g(z_f), o = g(z_o), c' = f c + i act(z_g),
      h' = o act(c'),

  with `z_k = x W_ik + h W_hk + b_hk` (gate blocks `i, f, g, o` in this
  column order of `W`; Flax's bias sits on the recurrent side, one per gate).

  Args:
    hidden_size: `n`.
    gate_fn: Flax's `gate_fn`, element-wise (default sigmoid).
    activation_fn: Flax's `activation_fn`, element-wise (default tanh).
    init_fn: replaces `Cell.init` when given (`FlaxForm`).
    **sparsity: `recurrent_mask` / `recurrent_density` / `mask_seed`
      (`Cell`): a sparse recurrence.
  """

  num_gates = 4
  num_state_rows = 2
  hidden_row = 1

  def __init__(
    self,
    hidden_size: int,
    gate_fn: Callable = jax.nn.sigmoid,
    activation_fn: Callable = jnp.tanh,
    init_fn: Callable | None = None,
    **sparsity: Any,
  ):
    super().__init__(hidden_size, **sparsity)
    self.gate_fn, self.activation_fn = gate_fn, activation_fn
    self.init_fn = init_fn

  def __repr__(self):
    return (
      f"FlaxLSTMCell(hidden_size={self.hidden_size}, gate_fn="
      f"{_name(self.gate_fn)}, activation_fn={_name(self.activation_fn)}"
      f"{self._sparsity_repr()})"
    )

  def _unit_map(self, z_unit, state_unit):
    gate, act = self.gate_fn, self.activation_fn
    i, f, g, o = z_unit[0], z_unit[1], z_unit[2], z_unit[3]
    c = gate(f) * state_unit[0] + gate(i) * act(g)
    return jnp.stack([c, gate(o) * act(c)])


class FlaxGRUCell(FlaxForm):
  """Flax's `GRUCell`:

      r = g(x W_ir + b_ir + h W_hr),   z = g(x W_iz + b_iz + h W_hz),
      n = act(x W_in + b_in + r (h W_hn [+ b_hn])),
      h' = (1 - z) n + z h.

  Four gate blocks (this column order of `W`): `r`, `z`, `a = x W_in + b_in`
  and `b = h W_hn + b_hn`, with the per-unit map
  `h' = (1 - g(z_z)) act(z_a + g(z_r) z_b) + g(z_z) h`. `structural_mask` fixes
  the `h` rows of `a`, the `x` rows of `b` and, without `recurrent_bias`
  (`flax.nnx.GRUCell` has no `b_hn`; `flax.linen.GRUCell` has), the bias of
  `b` at zero.

  Args:
    hidden_size: `n`.
    gate_fn: Flax's `gate_fn`, element-wise (default sigmoid).
    activation_fn: Flax's `activation_fn`, element-wise (default tanh).
    recurrent_bias: whether the candidate's recurrent product has a bias.
    init_fn: replaces `Cell.init` when given (`FlaxForm`).
    **sparsity: `recurrent_mask` / `recurrent_density` / `mask_seed`
      (`Cell`): a sparse recurrence.
  """

  num_gates = 4
  num_state_rows = 1

  def __init__(
    self,
    hidden_size: int,
    gate_fn: Callable = jax.nn.sigmoid,
    activation_fn: Callable = jnp.tanh,
    recurrent_bias: bool = True,
    init_fn: Callable | None = None,
    **sparsity: Any,
  ):
    super().__init__(hidden_size, **sparsity)
    self.gate_fn, self.activation_fn = gate_fn, activation_fn
    self.recurrent_bias = bool(recurrent_bias)
    self.init_fn = init_fn

  def __repr__(self):
    return (
      f"FlaxGRUCell(hidden_size={self.hidden_size}, gate_fn="
      f"{_name(self.gate_fn)}, activation_fn={_name(self.activation_fn)}, "
      f"recurrent_bias={self.recurrent_bias}{self._sparsity_repr()})"
    )

  def structural_mask(self, input_size: int):
    n = self.hidden_size
    mask = np.ones((input_size + n + 1, 4 * n), np.float32)
    mask[input_size : input_size + n, 2 * n : 3 * n] = 0.0  # a reads no h
    mask[:input_size, 3 * n :] = 0.0  # b reads no x
    if not self.recurrent_bias:
      mask[-1, 3 * n :] = 0.0
    return mask

  def _unit_map(self, z_unit, state_unit):
    reset = self.gate_fn(z_unit[0])
    update = self.gate_fn(z_unit[1])
    candidate = self.activation_fn(z_unit[2] + reset * z_unit[3])
    return ((1.0 - update) * candidate + update * state_unit[0])[None]
