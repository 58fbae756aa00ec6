"""The built-in cells, each a Lemma-1 `Cell`: its gates and its unit map.

References:
  Zilly et al., "Recurrent Highway Networks", ICML 2017.
  Hochreiter & Schmidhuber, "Long short-term memory", 1997.
  Cho et al., "Learning phrase representations using RNN encoder-decoder
  for statistical machine translation", EMNLP 2014 (GRU).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.cells.lemma1 import Cell


def _scaled_sigmoid(x):
  # The paper's tanh stand-in: 2*sigmoid(x) - 1 (footnote 6).
  return 2.0 * jax.nn.sigmoid(x) - 1.0


class RNN(Cell):
  """Elman RNN: `h' = tanh(concat(x, h, 1) @ W)`. One gate, one state row.

  Its unit map ignores the old state (no direct path), so RFLO is
  memoryless on it: use `LeakyRNN` for RFLO.
  """

  num_gates = 1
  num_state_rows = 1
  has_direct_path = False

  def _unit_map(self, z_unit, state_unit):
    return jnp.tanh(z_unit)


def _check_leak(leak: Any) -> float:
  if (
    isinstance(leak, bool)
    or not isinstance(leak, (int, float, np.integer, np.floating))
    or not 0.0 < float(leak) <= 1.0
  ):
    raise ValueError(
      f"leak must be a number in (0, 1] (1: the plain tanh RNN), got {leak!r}"
    )
  return float(leak)


class LeakyRNN(Cell):
  """Leaky (continuous-time, Euler-discretised) RNN, Murray's RFLO setting:
  `h' = (1 - leak) h + leak tanh(concat(x, h, 1) @ W)`.

  `leak = dt / tau` in (0, 1]; 1 is the plain `RNN`. The leak is the direct
  state path `dfds = 1 - leak` that RFLO's eligibility trace follows.
  `sparsity`: `recurrent_mask` / `recurrent_density` / `mask_seed` (`Cell`).

  Raises:
    ValueError: `leak` not a number in (0, 1].

  References:
    Murray, "Local online learning in recurrent networks with random
    feedback", eLife 2019.
  """

  num_gates = 1
  num_state_rows = 1

  def __init__(self, hidden_size: int, leak: float = 0.1, **sparsity: Any):
    super().__init__(hidden_size, **sparsity)
    self.leak = _check_leak(leak)
    self.has_direct_path = self.leak < 1.0

  def _repr_args(self) -> str:
    return f"{super()._repr_args()}, leak={self.leak}"

  def _unit_map(self, z_unit, state_unit):
    leak = self.leak
    return (1.0 - leak) * state_unit + leak * jnp.tanh(z_unit)


class RHN(Cell):
  """Single-layer Recurrent Highway Network with coupled gates.

  Gates (in this column order of `W`): candidate `c = 2σ(z_0) − 1` and
  transform `t = σ(z_1)`; `h' = t * c + (1 − t) * h` (carry gate `1 − t`).
  The transform bias starts at `transform_bias` (default −1) so that an
  untrained cell mostly carries its state, which helps memory tasks.
  `sparsity`: `recurrent_mask` / `recurrent_density` / `mask_seed` (`Cell`).
  """

  num_gates = 2
  num_state_rows = 1

  def __init__(
    self, hidden_size: int, transform_bias: float = -1.0, **sparsity: Any
  ):
    super().__init__(hidden_size, **sparsity)
    self.transform_bias = float(transform_bias)

  def _gate_bias_init(self):
    return [0.0, self.transform_bias]

  def _unit_map(self, z_unit, state_unit):
    candidate = _scaled_sigmoid(z_unit[0])
    transform = jax.nn.sigmoid(z_unit[1])
    return (transform * candidate + (1.0 - transform) * state_unit[0])[None]


class LSTM(Cell):
  """LSTM with state `(c, h)` and gates `i, f, g, o` (this column order).

  `c' = σ(f) c + σ(i) tanh(g)`, `h' = σ(o) tanh(c')`. The forget bias starts
  at `forget_bias` (default 1). `sparsity`: `recurrent_mask` /
  `recurrent_density` / `mask_seed` (`Cell`).
  """

  num_gates = 4
  num_state_rows = 2
  hidden_row = 1

  def __init__(
    self, hidden_size: int, forget_bias: float = 1.0, **sparsity: Any
  ):
    super().__init__(hidden_size, **sparsity)
    self.forget_bias = float(forget_bias)

  def _gate_bias_init(self):
    return [0.0, self.forget_bias, 0.0, 0.0]

  def _unit_map(self, z_unit, state_unit):
    i, f, g, o = z_unit[0], z_unit[1], z_unit[2], z_unit[3]
    c = jax.nn.sigmoid(f) * state_unit[0] + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return jnp.stack([c, h])


class GRU(Cell):
  """GRU with the reset gate applied after the recurrent product (the
  convention of PyTorch, cuDNN and Flax's `GRUCell`):

      r = σ(x W_xr + h W_hr + b_r),    u = σ(x W_xu + h W_hu + b_u),
      c = tanh(x W_xc + b_xc + r ⊙ (h W_hc + b_hc)),
      h' = (1 − u) ⊙ c + u ⊙ h.

  Written so, the GRU is a Lemma-1 cell with four gate blocks (in this column
  order of `W`): `r`, `u`, `a = x W_xc + b_xc` and `b = h W_hc + b_hc`, with
  the unit map `h' = (1 − σ(z_u)) tanh(z_a + σ(z_r) z_b) + σ(z_u) h`.
  `structural_mask` fixes the `h` rows of block `a` and the `x` rows of block `b`
  at zero, so the parameters are exactly the standard GRU's (both candidate
  biases included) and every estimator, the Kronecker-sum family too, serves
  it. The original GRU (Cho et al. 2014) resets `h` before the product,
  `tanh(x W_xc + (r ⊙ h) W_hc)`; that form is not Lemma-1 (the gate acts
  before the matrix) and is left to a user cell.
  """

  num_gates = 4
  num_state_rows = 1

  def structural_mask(self, input_size: int):
    n = self.hidden_size
    mask = np.ones((input_size + n + 1, 4 * n), np.float32)
    mask[input_size : input_size + n, 2 * n : 3 * n] = 0.0  # a reads no h
    mask[:input_size, 3 * n :] = 0.0  # b reads no x
    return mask

  def _unit_map(self, z_unit, state_unit):
    reset = jax.nn.sigmoid(z_unit[0])
    update = jax.nn.sigmoid(z_unit[1])
    candidate = jnp.tanh(z_unit[2] + reset * z_unit[3])
    return ((1.0 - update) * candidate + update * state_unit[0])[None]
