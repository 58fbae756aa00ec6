"""The Linear Recurrent Unit's recurrence (Orvieto et al. 2023), a diagonal
complex linear recurrence whose exact RTRL is element-wise.

    h_t = λ ⊙ h_{t-1} + γ ⊙ (B x_t),   λ = exp(-exp(ν) + i exp(θ)),

with `h` complex `(m,)` (`m = state_size`), `γ = exp(γ_log)` real, `B`
complex `(m, input_size)`. Parameters are stored real (`nu_log`,
`theta_log`, `gamma_log`, `B_re`, `B_im`), so optax, checkpoints and every
trainer see real arrays; the state is the real pair `(Re h, Im h)`, and the
vector fed to the readout is `[Re h, Im h]` (`hidden_size = 2 m`): a linear
readout of it is the LRU's `Re(C h)` with `C = w_re - i w_im`.

Because `λ` acts element-wise, `h_t[j]` depends on `ν_j, θ_j, γ_j` and row
`j` of `B` only, and its sensitivities obey one-term recursions
(`rtrl.estimators.diagonal_rtrl`): exact RTRL in memory of the order of these
parameters, `m (input_size + 2)` complex numbers per example, not `m^3`.

The ring initialisation draws `|λ|` uniformly on the ring `r_min <= |λ| <=
r_max` of the complex plane (by area) and the phase uniformly in
`[0, max_phase]`; `γ = sqrt(1 - |λ|^2)` normalises each unit's response to
white input; `B` is complex normal with variance `1 / input_size`.

References:
  Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu, De, "Resurrecting
  Recurrent Neural Networks for Long Sequences", ICML 2023 (the LRU).
  Zucchet, Meier, Schug, Mujika, Sacramento, "Online learning of long-range
  dependencies", NeurIPS 2023 (its exact online learning).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from rtrl import validation

PARAM_NAMES = ("nu_log", "theta_log", "gamma_log", "B_re", "B_im")
# The parameters of λ and γ, which the LRU papers train at a reduced learning
# rate and without weight decay (the input weights B are not among them).
RECURRENCE_PARAMS = ("nu_log", "theta_log", "gamma_log")


def _default_float():
  return jnp.zeros(()).dtype  # float64 under jax_enable_x64


class LRU:
  """The LRU recurrence as a cell of the online trainers.

  Args:
    state_size: `m`, the number of complex units.
    r_min, r_max: the ring of initial `|λ|`, `0 <= r_min < r_max < 1`.
    max_phase: initial phases are uniform in `[0, max_phase]`, `> 0`.

  Raises:
    ValueError: naming the argument that is out of range.
  """

  name = "lru"

  def __init__(
    self,
    state_size: int,
    r_min: float = 0.0,
    r_max: float = 0.99,
    max_phase: float = 2 * math.pi,
  ):
    self.state_size = validation.positive_int("state_size", state_size)
    if not 0.0 <= r_min < r_max < 1.0:
      raise ValueError(
        f"r_min and r_max must satisfy 0 <= r_min < r_max < 1 "
        f"(a stable ring of |λ|), got r_min={r_min!r}, "
        f"r_max={r_max!r}"
      )
    if not max_phase > 0:
      raise ValueError(f"max_phase must be positive, got {max_phase!r}")
    self.r_min, self.r_max = float(r_min), float(r_max)
    self.max_phase = float(max_phase)
    self.hidden_size = 2 * self.state_size  # [Re h, Im h], the readout's input

  def __repr__(self):
    return (
      f"LRU(state_size={self.state_size}, r_min={self.r_min}, "
      f"r_max={self.r_max}, max_phase={self.max_phase:.4g})"
    )

  # -- parameters -------------------------------------------------------------

  def init(self, key: jax.Array, input_size: int) -> dict:
    """The ring initialisation: `{'nu_log', 'theta_log', 'gamma_log' (m,),
    'B_re', 'B_im' (m, input_size)}`, all real."""
    input_size = validation.positive_int("input_size", input_size)
    m, dtype = self.state_size, _default_float()
    k_radius, k_phase, k_re, k_im = jax.random.split(key, 4)
    u_radius = jax.random.uniform(k_radius, (m,), dtype)
    u_phase = jax.random.uniform(k_phase, (m,), dtype)
    # |λ|^2 uniform on [r_min^2, r_max^2]: uniform by area on the ring.
    radius_sq = self.r_min**2 + u_radius * (self.r_max**2 - self.r_min**2)
    nu_log = jnp.log(-0.5 * jnp.log(radius_sq))
    # A phase of exactly 0 would make theta_log = -inf.
    theta_log = jnp.log(self.max_phase * jnp.maximum(u_phase, 1e-6))
    gamma_log = 0.5 * jnp.log1p(-radius_sq)
    scale = 1.0 / math.sqrt(2 * input_size)
    return {
      "nu_log": nu_log,
      "theta_log": theta_log,
      "gamma_log": gamma_log,
      "B_re": scale * jax.random.normal(k_re, (m, input_size), dtype),
      "B_im": scale * jax.random.normal(k_im, (m, input_size), dtype),
    }

  def check_params(self, params) -> None:
    """A ValueError naming `params` unless it holds the five real arrays of
    `init` with consistent shapes (from shapes and dtypes alone)."""
    if not isinstance(params, dict) or set(params) != set(PARAM_NAMES):
      got = sorted(params) if isinstance(params, dict) else type(params)
      raise ValueError(
        f"params must be a dict with keys {list(PARAM_NAMES)} "
        f"as returned by {self!r}.init, got {got}"
      )
    for name, value in params.items():
      dtype = jnp.result_type(value)
      if jnp.issubdtype(dtype, jnp.complexfloating):
        raise ValueError(
          f"params[{name!r}] must be real: the LRU stores complex B as "
          f"'B_re' and 'B_im' and λ, γ through the real logs 'nu_log', "
          f"'theta_log', 'gamma_log'; got {dtype}"
        )
      if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"params[{name!r}] must be a float array, got {dtype}")
    m = self.state_size
    for name in ("nu_log", "theta_log", "gamma_log"):
      if jnp.shape(params[name]) != (m,):
        raise ValueError(
          f"params[{name!r}] must have shape ({m},), got "
          f"{jnp.shape(params[name])}"
        )
    shape = jnp.shape(params["B_re"])
    if len(shape) != 2 or shape[0] != m or jnp.shape(params["B_im"]) != shape:
      raise ValueError(
        f"params['B_re'] and params['B_im'] must both have "
        f"shape ({m}, input_size), got {shape} and "
        f"{jnp.shape(params['B_im'])}"
      )

  def check_stable(self, params) -> None:
    """A ValueError unless every `|λ| < 1` (finite `nu_log`), for concrete
    params (a traced call checks nothing: values are unknown there)."""
    try:
      nu_log = np.asarray(params["nu_log"])
    except jax.errors.TracerArrayConversionError:
      return
    modulus = np.exp(-np.exp(nu_log.astype(np.float64)))
    bad = ~np.isfinite(nu_log) | (modulus >= 1.0)
    if bad.any():
      j = int(np.flatnonzero(bad)[0])
      raise ValueError(
        f"params['nu_log'] gives an unstable or undefined recurrence: "
        f"|λ| = exp(-exp(nu_log)) must be < 1, but unit {j} has nu_log = "
        f"{nu_log[j]!r} (|λ| = {modulus[j]!r}); {int(bad.sum())} unit(s) "
        f"in all"
      )

  def input_size(self, params) -> int:
    return jnp.shape(params["B_re"])[1]

  # -- the recurrence ---------------------------------------------------------

  def initial_state(self):
    zeros = jnp.zeros((self.state_size,), _default_float())
    return (zeros, zeros)

  def check_state(self, state) -> None:
    shapes = [jnp.shape(a) for a in jax.tree_util.tree_leaves(state)]
    if not isinstance(state, tuple) or shapes != [(self.state_size,)] * 2:
      raise ValueError(
        f"state must be the pair (Re h, Im h) of shape "
        f"({self.state_size},) each, got {shapes}"
      )

  def coefficients(self, params):
    """`(λ (m,) complex, γ (m,) real)`."""
    lam = jnp.exp(
      -jnp.exp(params["nu_log"]) + 1j * jnp.exp(params["theta_log"])
    )
    return lam, jnp.exp(params["gamma_log"])

  def drive(self, params, x: jax.Array) -> jax.Array:
    """`B x`, `(m,)` complex."""
    x = x.astype(params["B_re"].dtype)
    return params["B_re"] @ x + 1j * (params["B_im"] @ x)

  def step(self, params, state, x: jax.Array):
    """One example, one step: `h' = λ h + γ (B x)` on the pair `(Re, Im)`."""
    self.check_params(params)
    if x.shape != (self.input_size(params),):
      raise ValueError(
        f"x must have shape ({self.input_size(params)},) to "
        f"match params['B_re'] (one example; vmap over the "
        f"batch), got {x.shape}"
      )
    lam, gamma = self.coefficients(params)
    h = state[0] + 1j * state[1]
    new = lam * h + gamma * self.drive(params, x)
    return (new.real.astype(state[0].dtype), new.imag.astype(state[1].dtype))

  def output(self, state) -> jax.Array:
    """`[Re h, Im h]`, `(2 m,)`: the vector fed to the readout."""
    return jnp.concatenate(state)
