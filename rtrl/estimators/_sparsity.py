"""SnAp-1's sparsity layout for a generic cell, built once in NumPy.

SnAp-1 keeps the influence entries `J[i, q]` for which parameter `q` reaches
state entry `i` within one step: the pattern `M` of the immediate Jacobian
`F = d state' / d θ`. This module finds `M` (`one_step_pattern`) and turns it
into the static index arrays the estimator gathers with (`layout`):

* Groups. Parameters with the same column of `M` (the same set of reached
  state entries) form a group; a group of `r` rows and `m` parameters stores
  an `(r, m)` block, and `(H J + F) ⊙ M` restricted to it is
  `H[rows, rows] J_g + F[rows, cols]` (`H J` needs only `H`'s diagonal block:
  `J_g` is zero outside the group's rows). Groups of equal `(r, m)` are
  stacked into one `(G, r, m)` array. Memory is `nnz(M)`, not `d p`.
* Colours. `F`'s entries on `M` come from one VJP per colour: rows that share
  no parameter get one colour (greedy colouring of the row conflict graph),
  and the VJP of the sum of their unit covectors reads each row's entries on
  its own columns, since no other row of the colour has an entry there.

References:
  Menick, Elsen, Evci, Osindero, Simonyan & Graves, "Practical Real Time
  Recurrent Learning with a Sparse Approximation", ICLR 2021 (SnAp-n).
  Curtis, Powell & Reid, "On the estimation of sparse Jacobian matrices",
  1974 (column grouping), here applied to rows of `F` for reverse mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

PATTERN_DRAWS = 8


class Bucket(NamedTuple):
  """`G` groups of equal size: `rows (G, r)` state entries, `cols (G, m)`
  parameters (flat indices) and `colours (G, r)` each row's colour."""

  rows: np.ndarray
  cols: np.ndarray
  colours: np.ndarray


class Layout(NamedTuple):
  """The static layout of SnAp-1's compressed influence.

  Attributes:
    buckets: one `Bucket` per distinct group size; the influence is one
      `(G, r, m)` array per bucket, in this order.
    cotangents: `(C, d)` 0/1, row `c` the sum of the unit covectors of the
      state entries of colour `c` (one VJP each).
    gather: `(p,)` indices that put the concatenation of the buckets'
      per-parameter values (`cols` raveled, bucket by bucket), followed by
      one zero for the parameters that reach no state entry, in flat
      parameter order.
    nnz: the number of stored influence entries, `nnz(M)`.
  """

  buckets: tuple
  cotangents: np.ndarray
  gather: np.ndarray
  nnz: int


def one_step_pattern(
  jacobian: Callable,
  num_params: int,
  num_states: int,
  input_size: int,
  dtype,
  draws: int = PATTERN_DRAWS,
  seed: int = 0,
) -> np.ndarray:
  """The `(d, p)` bool pattern of `F`, the union of its non-zeros at `draws`
  random points.

  An entry that is exactly zero at every draw is taken as structural. That is
  right for smooth cells (a non-structural zero of a derivative has measure
  zero) but not for cells whose derivatives vanish on open sets (ReLU, hard
  gates): pass the pattern explicitly for those. Parameters are drawn with
  scale `1 / sqrt(p)` so that no gate saturates to an exactly zero slope in
  float32; states and inputs are standard normal.

  Args:
    jacobian: `(theta (p,), s (d,), x (input_size,)) -> F (d, p)`, concrete.
    num_params, num_states, input_size: `p`, `d` and the input size.
    dtype: the float dtype of the draws.
    draws: the number of random points.
    seed: NumPy seed (the draws are a fixed part of the layout).
  """
  rng = np.random.default_rng(seed)
  pattern = np.zeros((num_states, num_params), bool)
  for _ in range(draws):
    theta = rng.standard_normal(num_params) / np.sqrt(num_params)
    state = rng.standard_normal(num_states)
    x = rng.standard_normal(input_size)
    value = np.asarray(jacobian(*(a.astype(dtype) for a in (theta, state, x))))
    pattern |= value != 0  # NaN counts as reached
  return pattern


def colour_rows(conflicts: np.ndarray) -> np.ndarray:
  """Greedy colouring, in row order: `(d,)` colours such that rows `i`, `j`
  with `conflicts[i, j]` differ."""
  num_rows = conflicts.shape[0]
  colours = np.zeros(num_rows, np.int64)
  for i in range(num_rows):
    taken = set(colours[:i][conflicts[i, :i]].tolist())
    colours[i] = next(c for c in range(num_rows) if c not in taken)
  return colours


def layout(pattern: np.ndarray) -> Layout:
  """The groups, buckets, colours and gather indices of pattern `M (d, p)`."""
  pattern = np.asarray(pattern, bool)
  num_states, num_params = pattern.shape
  # Group parameters by their column of M (packed to bytes: fast unique).
  packed = np.packbits(pattern.T, axis=1)
  _, first, group_of = np.unique(
    packed, axis=0, return_index=True, return_inverse=True
  )
  group_of = group_of.reshape(-1)
  group_rows = pattern[:, first].T  # (U, d)
  # Rows conflict when one group (hence one parameter) reaches both.
  reach = group_rows.astype(np.int64)
  colours = colour_rows((reach.T @ reach) > 0)
  sizes: dict = {}
  for g, rows in enumerate(group_rows):
    if rows.any():
      cols = np.flatnonzero(group_of == g)
      sizes.setdefault((int(rows.sum()), cols.size), []).append(
        (np.flatnonzero(rows), cols)
      )
  buckets = []
  for key in sorted(sizes):
    rows = np.stack([r for r, _ in sizes[key]])
    cols = np.stack([c for _, c in sizes[key]])
    buckets.append(Bucket(rows=rows, cols=cols, colours=colours[rows]))
  reached = np.concatenate(
    [b.cols.reshape(-1) for b in buckets] + [np.zeros(0, np.int64)]
  )
  gather = np.full(num_params, reached.size, np.int64)  # the appended zero
  gather[reached] = np.arange(reached.size)
  num_colours = int(colours.max()) + 1
  cotangents = colours[None, :] == np.arange(num_colours)[:, None]
  return Layout(
    buckets=tuple(buckets),
    cotangents=cotangents.astype(np.int8),
    gather=gather,
    nnz=int(pattern.sum()),
  )
