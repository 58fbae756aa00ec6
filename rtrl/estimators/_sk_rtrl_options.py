"""SK-RTRL's hyper-parameters, checked: `Sketch`, the settings one
`rtrl.estimators.sk_rtrl` runs with (its rank `r`, the pre-projection's
width `c` and method), each from an argument that is a ValueError naming
it when out of range."""

from __future__ import annotations

import math
from typing import NamedTuple

from rtrl.cells import Cell

PREPROJECTIONS = ("subspace_iteration", "svd")


class Sketch(NamedTuple):
  """SK-RTRL's checked hyper-parameters for one cell: `rank` `r`,
  `append` `c`, the pre-projection (`'subspace_iteration'` with
  `iterations` steps, or `'svd'`), and whether one runs at all
  (`preprojects`: `0 < r < S n` and `c < S n`)."""

  rank: int
  append: int
  preprojection: str
  iterations: int
  preprojects: bool
  state_size: int


def check_sketch_rank(cell: Cell, rank) -> int:
  """`rank` if it is an int in `[0, S n]` (`S n` the cell's state size),
  else a ValueError naming `rank`."""
  state_size = cell.num_state_rows * cell.hidden_size
  if (
    isinstance(rank, bool)
    or not isinstance(rank, int)
    or not 0 <= rank <= state_size
  ):
    raise ValueError(
      f"rank of estimator 'sk_rtrl' must be an int in [0, {state_size}] "
      f"(0: SnAp-1; {state_size} = the state size S n of {cell!r}: exact "
      f"RTRL), got {rank!r}"
    )
  return rank


def append_width(cell: Cell, rank: int, preprojection_rank) -> int:
  """`c`, the columns of each step's new residual the pre-projection keeps:
  all `S n` at full rank (exact); else `preprojection_rank`, or where None
  the paper's `max(4, ⌈r / 4⌉)` (at most `S n`).

  Raises:
    ValueError: `preprojection_rank` not None or an int in `[1, S n]`.
  """
  state_size = cell.num_state_rows * cell.hidden_size
  if preprojection_rank is not None and (
    isinstance(preprojection_rank, bool)
    or not isinstance(preprojection_rank, int)
    or not 1 <= preprojection_rank <= state_size
  ):
    raise ValueError(
      f"preprojection_rank of estimator 'sk_rtrl' must be None or an int "
      f"in [1, {state_size}] (the state size S n of {cell!r}), got "
      f"{preprojection_rank!r}"
    )
  if rank == state_size:
    return state_size
  if preprojection_rank is None:
    return min(state_size, max(4, math.ceil(rank / 4)))
  return preprojection_rank


def check_subspace_iterations(iterations) -> int:
  """`iterations` if it is an int `>= 0`, else a ValueError naming
  `subspace_iterations`."""
  if (
    isinstance(iterations, bool)
    or not isinstance(iterations, int)
    or iterations < 0
  ):
    raise ValueError(
      f"subspace_iterations of estimator 'sk_rtrl' must be an int >= 0, "
      f"got {iterations!r}"
    )
  return iterations


def check_sketch(
  cell: Cell, rank, preprojection_rank, preprojection, subspace_iterations
) -> Sketch:
  """The `Sketch` of `sk_rtrl`'s arguments, each checked (a ValueError
  naming the argument and what it should be)."""
  rank = check_sketch_rank(cell, rank)
  iterations = check_subspace_iterations(subspace_iterations)
  if preprojection not in PREPROJECTIONS:
    raise ValueError(
      f"preprojection of estimator 'sk_rtrl' must be one of "
      f"{PREPROJECTIONS}, got {preprojection!r}"
    )
  state_size = cell.num_state_rows * cell.hidden_size
  append = append_width(cell, rank, preprojection_rank)
  preprojects = 0 < rank < state_size and append < state_size
  return Sketch(
    rank, append, preprojection, iterations, preprojects, state_size
  )


__all__ = [
  "PREPROJECTIONS",
  "Sketch",
  "append_width",
  "check_sketch",
  "check_sketch_rank",
  "check_subspace_iterations",
]
