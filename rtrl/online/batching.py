"""The online trainers' batch bookkeeping of pytree states (a leading batch
axis `B` on every leaf): per-example resets and broadcasting one example's
state to a batch."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from rtrl.cells import Cell


def where_reset(resets: jax.Array, fresh: Any, current: Any) -> Any:
  """Per-example select: `fresh` where `resets[b]`, else `current`."""

  def select(a, b):
    mask = resets.reshape(resets.shape + (1,) * (a.ndim - resets.ndim))
    return jnp.where(mask, a, b)

  return jax.tree_util.tree_map(select, fresh, current)


def broadcast_state(state: Any, batch_size: int) -> Any:
  """One example's state (a pytree) repeated along a new leading batch
  axis of size `batch_size`, e.g. `cell.initial_state()` for a batch."""
  return jax.tree_util.tree_map(
    lambda a: jnp.broadcast_to(a, (batch_size,) + a.shape), state
  )


def reset_cell_states(cell: Cell, cell_state: Any, resets: jax.Array) -> Any:
  """The batch's cell states with `cell.initial_state()` where `resets`."""
  fresh = broadcast_state(cell.initial_state(), resets.shape[0])
  return where_reset(resets, fresh, cell_state)
