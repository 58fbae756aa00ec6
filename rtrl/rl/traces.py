"""Accumulating eligibility traces, one decay per part of the parameters.

TD(λ) keeps, beside each parameter, the trace `e ← γ λ e + ∇` of the
gradients of the quantity it learns (the value for the critic, the log
policy for the actor, both through the core for the core), and moves the
parameter along `δ e` with the TD error `δ` (Sutton & Barto 2018, 12.2 and
13.6). At an episode's start the trace starts again from the step's
gradient.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class TraceDecay(NamedTuple):
  """The trace decays `λ` of the actor, the critic and the core, each in
  [0, 1] (RTRRL: 0.99 for all three)."""

  actor: float = 0.99
  critic: float = 0.99
  core: float = 0.99


PART_OF = {"actor": "actor", "critic": "critic", "cell": "core"}


def check_decay(decay: TraceDecay) -> TraceDecay:
  """`decay` if each λ is a number in [0, 1], else a ValueError naming it."""
  for part, value in decay._asdict().items():
    if (
      isinstance(value, bool)
      or not isinstance(value, (int, float))
      or not 0.0 <= value <= 1.0
    ):
      raise ValueError(
        f"lambda_{part} must be a number in [0, 1], got {value!r}"
      )
  return decay


def accumulate(
  traces: dict, grads: dict, gamma: float, decay: TraceDecay, restart: Any
) -> dict:
  """`restart ? grads : γ λ_part traces + grads`, per top-level part of
  the params (`'actor'`, `'critic'`, `'cell'`)."""
  new = {}
  for name, trace in traces.items():
    lam = getattr(decay, PART_OF[name])
    new[name] = jax.tree_util.tree_map(
      lambda e, g, lam=lam: jnp.where(restart, 0.0, gamma * lam) * e + g,
      trace,
      grads[name],
    )
  return new


def td_update(traces: dict, td_error: jax.Array, extra: dict) -> dict:
  """The ascent direction `δ e + extra` (extra: the entropy bonus's
  gradient), per parameter."""
  return jax.tree_util.tree_map(lambda e, g: td_error * e + g, traces, extra)


__all__ = ["PART_OF", "TraceDecay", "accumulate", "check_decay", "td_update"]
