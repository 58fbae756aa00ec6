"""The continuous-time RNN of RTRRL (Lemmel & Grosu 2025) and RFLO (Murray
2019), Euler-discretised, as a Lemma-1 cell.

    tau dh/dt = -h + tanh(W [x, h, 1])
    h' = h + (dt / tau) (tanh(z) - h),   z = [x, h, 1] @ W,

with one time constant `tau_j` per unit. Written so, the step is a Lemma-1
cell (`lemma1.py`) whose unit map has a per-unit constant, the leak
`dt / tau_j`: every estimator of `rtrl.estimators` serves it, the
Kronecker-sum family included, and RFLO's trace follows the leak
`1 - dt / tau_j` (its direct state path).

The time constants are fixed when the cell is built (drawn uniformly from
`[tau_min, tau_max]` by `tau_seed`, RTRRL's initialisation `U(1, 5)`, or
given). RTRRL also trains `tau` (clipped at 1): a parameter outside `W`,
which no Lemma-1 estimator can carry; a learned `tau` is a `CustomCell`
(autodiff RTRL, UORO and SnAp-1 serve it). With every `tau_j = 1 / leak`
the cell is `LeakyRNN(leak)`.

References:
  Lemmel & Grosu, "Real-Time Recurrent Reinforcement Learning", AAAI 2025.
  Murray, "Local online learning in recurrent networks with random
  feedback", eLife 2019.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from rtrl.cells.lemma1 import Cell


def _check_number(name: str, value: Any, lower: float) -> float:
  if (
    isinstance(value, bool)
    or not isinstance(value, (int, float, np.integer, np.floating))
    or not np.isfinite(value)
    or not float(value) > lower
  ):
    raise ValueError(f"{name} must be a finite number > {lower}, got {value!r}")
  return float(value)


def _time_constants(hidden_size, time_constants, tau_min, tau_max, tau_seed):
  """`(n,)` float64 time constants, given or drawn from U(tau_min, tau_max)."""
  if time_constants is not None:
    taus = np.asarray(time_constants, np.float64)
    if taus.shape != (hidden_size,):
      raise ValueError(
        f"time_constants must have shape ({hidden_size},), got {taus.shape}"
      )
    return taus
  if not tau_max >= tau_min:
    raise ValueError(
      f"tau_max must be >= tau_min, got tau_min={tau_min}, tau_max={tau_max}"
    )
  return np.random.RandomState(tau_seed).uniform(tau_min, tau_max, hidden_size)


class CTRNN(Cell):
  """Continuous-time RNN, one Euler step of size `dt` per input:
  `h' = h + (dt / tau) (tanh([x, h, 1] @ W) - h)`, `tau` per unit.

  Args:
    hidden_size: `n`.
    tau_min, tau_max: the time constants are drawn uniformly from this
      range (RTRRL: 1 and 5), unless `time_constants` is given.
    dt: the Euler step; every `tau_j` must be `>= dt` (a leak `dt / tau`
      in (0, 1]).
    tau_seed: the NumPy seed of the drawn time constants.
    time_constants: optional `(n,)` time constants instead of drawing them.
    sparsity: `recurrent_mask` / `recurrent_density` / `mask_seed` (`Cell`).

  Attributes:
    time_constants: `(n,)` NumPy float64, fixed.
    leak: `(n,)` NumPy float64, `dt / time_constants`.

  Raises:
    ValueError: a non-positive `dt` or `tau_min`, `tau_max < tau_min`,
      `time_constants` of the wrong shape, or any `tau_j < dt`.
  """

  num_gates = 1
  num_state_rows = 1

  def __init__(
    self,
    hidden_size: int,
    *,
    tau_min: float = 1.0,
    tau_max: float = 5.0,
    dt: float = 1.0,
    tau_seed: int = 0,
    time_constants: Any = None,
    **sparsity: Any,
  ):
    super().__init__(hidden_size, **sparsity)
    self.dt = _check_number("dt", dt, 0.0)
    tau_min = _check_number("tau_min", tau_min, 0.0)
    tau_max = _check_number("tau_max", tau_max, 0.0)
    taus = _time_constants(
      self.hidden_size, time_constants, tau_min, tau_max, tau_seed
    )
    if not (np.all(np.isfinite(taus)) and np.all(taus >= self.dt)):
      raise ValueError(
        f"every time constant must be a finite number >= dt = {self.dt} "
        f"(a leak dt / tau in (0, 1]), got min {np.min(taus)}"
      )
    self.time_constants = taus
    self.leak = self.dt / taus
    self.tau_seed = tau_seed
    self.has_direct_path = bool(np.any(self.leak < 1.0))

  def _repr_args(self) -> str:
    taus = self.time_constants
    return (
      f"{super()._repr_args()}, tau in [{taus.min():.3g}, {taus.max():.3g}]"
      f", dt={self.dt}"
    )

  def unit_constants(self) -> tuple:
    return (jnp.asarray(self.leak),)

  def _unit_map(self, z_unit, state_unit, leak):
    leak = leak.astype(state_unit.dtype)
    return (1.0 - leak) * state_unit + leak * jnp.tanh(z_unit)


__all__ = ["CTRNN"]
