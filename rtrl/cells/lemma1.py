"""Recurrent cells in the form of the RTRL paper's appendix Lemma 1.

Every cell computes `z = concat(x, h, 1) @ W` with all gates fused in one
matrix `W` of shape `(input_size + hidden_size + 1, K * hidden_size)`, then a
pointwise map `state' = f(z, state)` that acts on each hidden unit separately.
That form is what makes `F_t = dh_t/dW = hhat ⊗ D_t` (with `hhat =
concat(x, h, 1)` and `D_t` block-diagonal, one `(S, K)` block per unit), the
structure every Kronecker-factored RTRL approximation relies on.

Internally a state is an `(S, hidden_size)` array of "state rows" (`S = 1` for
`RNN` and `RHN`, `S = 2` for `LSTM`: rows `c` and `h`); the public state of
`LSTM` is the tuple `(c, h)`. Gate pre-activations are laid out gate-major:
column `k * hidden_size + j` of `W` feeds gate `k` of unit `j`.

A cell may fix some entries of `W` at zero (`weight_mask`): the GRU's
candidate gate reads `x` and `h` through separate blocks (`structural_mask`),
and any cell may be given a sparse recurrence (`recurrent_mask (n, n)`, or
`recurrent_density` with a seeded pattern; `rtrl.cells.recurrent_mask`),
applied to every gate block of `W_h`. The step then uses
`W ⊙ mask`, every Jacobian below is that of `W ⊙ mask`, and an estimator's
gradient for `W` is masked the same way (`mask_gradient`), which keeps it an
unbiased estimate of the masked model's gradient.

References:
  Benzing et al., "Optimal Kronecker-Sum Approximation of Real Time Recurrent
  Learning", ICML 2019, appendix 5.1 (Lemma 1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.cells import recurrent_mask as recurrent_mask_lib

Params = dict  # {'W': (input_size + hidden_size + 1, K * hidden_size)}


class StepJacobians(NamedTuple):
  """Everything the tangent recursions need from one step.

  Attributes:
    hhat: (P,) the step's `concat(x, h_prev, 1)`, `P = input_size + n + 1`;
      the left Kronecker factor of `F_t = hhat ⊗ D`.
    D: (n, S, K) per-unit derivative of the new state rows w.r.t. the gate
      pre-activations, `D[j, s, k] = d state'[s, j] / d z[k, j]`.
    dfds: (n, S, S) per-unit derivative of the pointwise map w.r.t. the old
      state rows, `dfds[j, s, t] = d state'[s, j] / d state[t, j]` (direct
      path only; the path through `z` goes via `W_h`).
    recurrent_weights: (n, K * n) the rows of `W` that multiply `h_prev`.
    history: () the factor on the previous state's influence, 1; 0 at an
      example's sequence start (the estimators' reset folded into the step:
      every application of `H` is then zero, so no pass over the tangent
      is needed to drop its history; `rtrl/estimators/_base.py`, `build`).
  """

  hhat: jax.Array
  D: jax.Array
  dfds: jax.Array
  recurrent_weights: jax.Array
  history: Any = 1.0


def _default_float():
  return jnp.asarray(0.0).dtype  # float32, or float64 when x64 is on


def _check_positive_int(name: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  return value


class Cell:
  """Base class; subclasses define `num_gates`, `num_state_rows` and
  `_unit_map(z_unit (K,), state_unit (S,)) -> (S,)` (and, for a map with
  per-unit constants, `unit_constants()`, whose entries for the unit follow
  `state_unit`).

  Args:
    hidden_size: `n`, the number of hidden units.
    recurrent_mask: optional `(n, n)` bool array, `M[j, i]` True when unit
      `j`'s state feeds unit `i` (the orientation of `h @ W_h`), applied to
      every gate block: a sparse recurrence kept through training.
    recurrent_density: optional number in (0, 1], instead of a mask: that
      fraction of the recurrent weights kept, at random positions drawn
      from `mask_seed`.
    mask_seed: the NumPy seed of `recurrent_density`'s pattern.

  Attributes:
    recurrent_mask: the `(n, n)` bool pattern, None for a dense recurrence.
    has_direct_path: whether the unit map reads the old state (False for
      the tanh `RNN`, on which RFLO is memoryless and warns).
  """

  num_gates: int = 1
  num_state_rows: int = 1
  hidden_row: int = 0  # which state row is `h` (fed back and read out)
  recurrent_mask: np.ndarray | None = None  # (n, n) bool; None: dense
  # False where the unit map ignores the old state (`dfds == 0`, the tanh
  # RNN): RFLO, which follows that path only, is then memoryless.
  has_direct_path: bool = True

  def __init__(
    self,
    hidden_size: int,
    *,
    recurrent_mask: Any = None,
    recurrent_density: Any = None,
    mask_seed: Any = 0,
  ):
    self.hidden_size = _check_positive_int("hidden_size", hidden_size)
    self.recurrent_mask = recurrent_mask_lib.resolve(
      self.hidden_size, recurrent_mask, recurrent_density, mask_seed
    )
    self.recurrent_density = recurrent_density
    self.mask_seed = mask_seed

  def __repr__(self):
    return f"{type(self).__name__}({self._repr_args()})"

  def _repr_args(self) -> str:
    args = f"hidden_size={self.hidden_size}"
    if self.recurrent_mask is None:
      return args
    if self.recurrent_density is not None:
      return (
        f"{args}, recurrent_density={self.recurrent_density}, "
        f"mask_seed={self.mask_seed}"
      )
    return f"{args}, recurrent_mask=<{int(self.recurrent_mask.sum())} kept>"

  def num_recurrent_kept(self) -> int:
    """The kept entries of the `(n, n)` recurrence (`n^2` when dense)."""
    if self.recurrent_mask is None:
      return self.hidden_size * self.hidden_size
    return int(self.recurrent_mask.sum())

  def num_parameters(self, input_size: int) -> int:
    """The entries of `W` the cell uses for inputs of size `input_size`:
    the kept recurrent entries and none of the structural zeros (what
    docs and benchmarks count as the cell's parameters)."""
    input_size = _check_positive_int("input_size", input_size)
    mask = self.weight_mask(input_size)
    if mask is None:
      n = self.hidden_size
      return (input_size + n + 1) * self.num_gates * n
    return int(np.count_nonzero(mask))

  # -- public API -----------------------------------------------------------

  def init(self, key: jax.Array, input_size: int) -> Params:
    """Returns `{'W': (input_size + n + 1, K n)}`, scaled by 1/sqrt(fan_in)."""
    input_size = _check_positive_int("input_size", input_size)
    n, num_gates = self.hidden_size, self.num_gates
    fan_in = input_size + n
    dtype = _default_float()
    weights = jax.random.normal(key, (fan_in, num_gates * n), dtype)
    weights = weights / jnp.sqrt(jnp.asarray(fan_in, dtype))
    bias = jnp.repeat(jnp.asarray(self._gate_bias_init(), dtype), n)
    full = jnp.concatenate([weights, bias[None, :]], axis=0)
    mask = self.weight_mask(input_size)
    return {"W": full if mask is None else full * mask.astype(dtype)}

  def initial_state(self):
    return self.rows_to_state(
      jnp.zeros((self.num_state_rows, self.hidden_size), _default_float())
    )

  def step(self, params: Params, state, x: jax.Array):
    """One example, one time step: returns the next state."""
    rows = self.state_to_rows(state)
    z = self._preactivations(params, rows, x)
    return self.rows_to_state(self.pointwise(z, rows))

  def output(self, state) -> jax.Array:
    """The `(n,)` vector fed to the readout (the hidden state `h`)."""
    return self.state_to_rows(state)[self.hidden_row]

  # -- Lemma-1 structure ----------------------------------------------------

  def input_size(self, params: Params) -> int:
    return params["W"].shape[0] - self.hidden_size - 1

  def state_to_rows(self, state) -> jax.Array:
    return state[None, :] if self.num_state_rows == 1 else jnp.stack(state)

  def rows_to_state(self, rows: jax.Array):
    return rows[0] if self.num_state_rows == 1 else tuple(rows)

  def hhat(self, params: Params, rows: jax.Array, x: jax.Array) -> jax.Array:
    self.check_params(params)
    input_size = self.input_size(params)
    if x.shape != (input_size,):
      raise ValueError(
        f"x must have shape ({input_size},) to match params['W'] (one "
        f"example; vmap over the batch), got {x.shape}"
      )
    h = rows[self.hidden_row]
    return jnp.concatenate([x.astype(h.dtype), h, jnp.ones((1,), h.dtype)])

  def check_params(self, params: Params) -> None:
    n, num_gates = self.hidden_size, self.num_gates
    if not isinstance(params, dict) or "W" not in params:
      raise ValueError(
        "params must be a dict {'W': array}, as returned by "
        f"{type(self).__name__}.init"
      )
    shape = params["W"].shape
    if len(shape) != 2 or shape[1] != num_gates * n or shape[0] < n + 2:
      raise ValueError(
        f"params['W'] must have shape (input_size + {n} + 1, {num_gates * n})"
        f" for {self!r}, got {shape}"
      )

  def structural_mask(self, input_size: int):
    """`(input_size + n + 1, K n)` 0/1 array of the entries of `W` the
    cell's equations use, or None when they use them all (every cell but
    the GRU)."""
    del input_size
    return None

  def weight_mask(self, input_size: int):
    """`(input_size + n + 1, K n)` 0/1 array of the entries of `W` the cell
    uses (`structural_mask` and the recurrent mask), or None when it uses
    them all."""
    mask = self.structural_mask(input_size)
    if self.recurrent_mask is None:
      return mask
    n = self.hidden_size
    if mask is None:
      mask = np.ones((input_size + n + 1, self.num_gates * n), np.float32)
    mask = np.array(mask, np.float32)
    mask[input_size : input_size + n] *= recurrent_mask_lib.weight_rows(
      self.recurrent_mask, self.num_gates
    )
    return mask

  def params_mask(self, params: Params) -> dict | None:
    """`{'W': weight_mask}` for params of this cell (any pytree with `W`'s
    shape, e.g. its updates): the mask tree of
    `rtrl.optim.masked_updates`, which the online trainers chain after the
    optimiser; None for a dense recurrence (runs left as they were)."""
    if self.recurrent_mask is None:
      return None
    return {"W": self.weight_mask(self.input_size(params))}

  def effective_weights(self, params: Params) -> jax.Array:
    """`W ⊙ weight_mask`: the matrix the step multiplies by."""
    mask = self.weight_mask(self.input_size(params))
    weights = params["W"]
    return weights if mask is None else weights * mask.astype(weights.dtype)

  def mask_gradient(self, grad_w: jax.Array) -> jax.Array:
    """An estimate of `dL/d(W ⊙ mask)` turned into one of `dL/dW`."""
    mask = self.weight_mask(grad_w.shape[0] - self.hidden_size - 1)
    return grad_w if mask is None else grad_w * mask.astype(grad_w.dtype)

  def _preactivations(self, params, rows, x):
    z = self.hhat(params, rows, x) @ self.effective_weights(params)
    return z.reshape(self.num_gates, self.hidden_size)

  def pointwise(self, z: jax.Array, rows: jax.Array) -> jax.Array:
    """`state' = f(z, state)` on `(K, n)` gates and `(S, n)` rows."""
    constants = self.unit_constants()
    return jax.vmap(
      self._unit_map, in_axes=(1, 1) + (0,) * len(constants), out_axes=1
    )(z, rows, *constants)

  def unit_constants(self) -> tuple:
    """Fixed per-unit numbers of the unit map, each an `(n,)` array passed
    to `_unit_map` after the state (a CT-RNN's time constants); `()` for
    the cells whose map is the same for every unit."""
    return ()

  def linearized_step(self, params: Params, state, x: jax.Array):
    """The next state and the `StepJacobians` of this step."""
    rows = self.state_to_rows(state)
    hhat = self.hhat(params, rows, x)
    weights = self.effective_weights(params)
    z = (hhat @ weights).reshape(self.num_gates, self.hidden_size)

    constants = self.unit_constants()

    def jacobians(z_unit, state_unit, *unit_constants):
      def unit(zu, su):
        new = self._unit_map(zu, su, *unit_constants)
        return new, new

      return _jacobians_and_value(unit, z_unit, state_unit)

    jac_z, jac_s, new_rows = jax.vmap(
      jacobians,
      in_axes=(1, 1) + (0,) * len(constants),
      out_axes=(0, 0, 1),
    )(z, rows, *constants)
    n, input_size = self.hidden_size, x.shape[0]
    recurrent = weights[input_size : input_size + n]
    jac = StepJacobians(
      hhat=hhat, D=jac_z, dfds=jac_s, recurrent_weights=recurrent
    )
    return self.rows_to_state(new_rows), jac

  def _gate_bias_init(self):
    return [0.0] * self.num_gates

  def _unit_map(self, z_unit, state_unit):
    raise NotImplementedError


def _jacobians_and_value(unit, z_unit, state_unit):
  (jac_z, jac_s), value = jax.jacfwd(unit, argnums=(0, 1), has_aux=True)(
    z_unit, state_unit
  )
  return jac_z, jac_s, value
