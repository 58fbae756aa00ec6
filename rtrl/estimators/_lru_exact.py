"""Exact RTRL for the LRU's diagonal recurrence, element-wise (Zucchet et
al. 2023): memory of the order of the recurrence's parameters, not `m^3`.

With `h' = λ ⊙ h + γ ⊙ (B x)` (`rtrl.cells.lru`), unit `j`'s state depends
only on `λ_j`, `γ_j` and row `j` of `B`, so its influence has one entry per
such parameter and each obeys a one-term recursion (complex, per example):

    e_λ' = λ e_λ + h            (d h' / d λ, holomorphic in λ; h before the step)
    e_γ' = λ e_γ + B x          (d h' / d γ)
    e_B' = λ e_B + γ xᵀ         (d h'_j / d B_re[j, k]; d h' / d B_im = i e_B)

A real parameter `p` with complex sensitivity `s = dh/dp` gets `dL/dp =
Re(conj(g) s)`, `g = dL/dRe h + i dL/dIm h` (the readout's error on the
state pair); the logs chain through `dλ/dν_log = -exp(ν_log) λ`, `dλ/dθ_log
= i exp(θ_log) λ` and `dγ/dγ_log = γ`. Nothing is approximated: the gradient
equals BPTT's (`tests/rtrl/cells/test_lru.py`, float64). SnAp-1 is this same
estimator here (a diagonal recurrence drops nothing), so 'snap1' builds it
too; UORO comes from the autodiff path (`autodiff_uoro`).

Per example and step: `m (input_size + 2)` complex multiply-adds, as many as
the step's own `B x`, so an online step costs a small multiple of the
forward step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rtrl import linalg
from rtrl.cells.lru import LRU
from rtrl.estimators._base import Estimator
from rtrl.estimators._base import assemble


class LRUInfluence(NamedTuple):
  """Per example: `lam (m,)`, `gamma (m,)`, `B (m, input_size)`, complex."""

  lam: jax.Array
  gamma: jax.Array
  B: jax.Array


def _complex_dtype(dtype):
  return jnp.result_type(dtype, jnp.complex64)


def diagonal_rtrl(cell: LRU) -> Estimator:
  """Exact RTRL of the LRU's diagonal recurrence, element-wise (Zucchet,
  Meier, Schug, Mujika & Sacramento, "Online learning of long-range
  dependencies", NeurIPS 2023; LRU of Orvieto et al., ICML 2023).

  Unit `j` depends only on `λ_j`, `γ_j` and row `j` of `B`, so the
  influence has one complex entry per such parameter, each a one-term
  recursion: nothing is approximated (the gradient equals BPTT's).
  `make('rtrl', lru)` and `make('snap1', lru)` build it (SnAp-1 of a
  diagonal recurrence drops nothing).

  Cost per example and step: memory `m (input_size + 2)` complex numbers
  (the recurrence's parameters), time as many multiply-adds (a small
  multiple of the forward step). No hyper-parameters.

  Args:
    cell: an `rtrl.cells.LRU`. Other cells: `exact_rtrl` (Lemma-1) or
      `autodiff_rtrl`.

  Returns:
    The `Estimator` (`name='rtrl'`, `implementation='diagonal_rtrl'`).

  Raises:
    ValueError: `cell` is not an LRU.
  """
  if not isinstance(cell, LRU):
    raise ValueError(
      f"diagonal_rtrl needs an rtrl.cells.LRU, got {cell!r}: use exact_rtrl "
      f"for a Lemma-1 cell or autodiff_rtrl for any other"
    )

  def zeros(params, state):
    cell.check_params(params)
    cell.check_state(state)
    cell.check_stable(params)
    dtype = _complex_dtype(params["B_re"].dtype)
    m, input_size = params["B_re"].shape
    empty = jnp.zeros((m,), dtype)
    return LRUInfluence(empty, empty, jnp.zeros((m, input_size), dtype))

  def advance(params):
    lam, gamma = cell.coefficients(params)

    def advance_fn(influence: LRUInfluence, state, x, key):
      del key  # exact: no randomness
      h = state[0] + 1j * state[1]
      dtype = influence.lam.dtype
      x_real = x.astype(params["B_re"].dtype)
      new_influence = LRUInfluence(
        lam=(lam * influence.lam + h).astype(dtype),
        gamma=(lam * influence.gamma + cell.drive(params, x)).astype(dtype),
        B=(
          lam[:, None] * influence.B + gamma[:, None] * x_real[None, :]
        ).astype(dtype),
      )
      return new_influence, cell.step(params, state, x)

    return advance_fn

  def gradient(params, influence: LRUInfluence, dloss_dstate):
    g_conj = dloss_dstate[0] - 1j * dloss_dstate[1]
    return _from_contractions(
      cell,
      params,
      g_conj * influence.lam,
      g_conj * influence.gamma,
      g_conj[:, None] * influence.B,
    )

  def batch_gradient(params, influence: LRUInfluence, dloss_dstates):
    """`gradient` summed over the batch: `Σ_b conj(g_b) e_B,b` is summed
    before the real and imaginary parts are taken, so one complex array of
    products is formed where the per-example path forms two real ones."""
    g_conj = dloss_dstates[0] - 1j * dloss_dstates[1]  # (batch, m)
    g_conj = g_conj.astype(influence.lam.dtype)
    return _from_contractions(
      cell,
      params,
      jnp.sum(g_conj * influence.lam, axis=0),
      jnp.sum(g_conj * influence.gamma, axis=0),
      linalg.sum_over_batch(g_conj[:, :, None] * influence.B),
    )

  return assemble(
    "rtrl",
    "diagonal_rtrl",
    zeros=zeros,
    advance=advance,
    readout=gradient,
    batch_readout=batch_gradient,
    splits_key=False,
  )


def _from_contractions(
  cell: LRU, params, through_lam, through_gamma, through_B
):
  """The real parameters' gradients from `conj(g) e` of λ, γ and B (one
  example's, or their sums over a batch: everything here is linear in
  them)."""
  lam, gamma = cell.coefficients(params)
  through_lam = through_lam * lam
  real = params["B_re"].dtype
  return {
    "nu_log": (-jnp.exp(params["nu_log"]) * through_lam.real).astype(real),
    "theta_log": (
      jnp.exp(params["theta_log"]) * (1j * through_lam).real
    ).astype(real),
    "gamma_log": (gamma * through_gamma.real).astype(real),
    # Re(i z) = -Im(z).
    "B_re": through_B.real.astype(real),
    "B_im": (-through_B.imag).astype(real),
  }


__all__ = ["LRUInfluence", "diagonal_rtrl"]
