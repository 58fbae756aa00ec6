"""A fixed sparsity pattern on a cell's recurrent weights.

`M (n, n)` bool, `M[j, i]` True when unit `j`'s state feeds unit `i` (the
orientation of `h @ W_h`), applied to every gate block of `W_h`: entry
`W[input_size + j, k n + i]` is kept when `M[j, i]`. Given as an array, or as
a density `d` in (0, 1] drawn once from a seed (exactly `round(d n^2)` kept
entries, at least one, uniformly at random).

References:
  Menick, Elsen, Evci, Osindero, Simonyan & Graves, "Practical Real Time
  Recurrent Learning with a Sparse Approximation", ICLR 2021 (sparse
  recurrent networks, 75-99% sparsity).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def random_pattern(hidden_size: int, density: float, seed: int) -> np.ndarray:
  """`(n, n)` bool with exactly `max(1, round(density n^2))` True entries,
  placed uniformly at random by NumPy seed `seed`."""
  size = hidden_size * hidden_size
  kept = max(1, int(round(density * size)))
  rng = np.random.default_rng(seed)
  pattern = np.zeros(size, bool)
  pattern[rng.choice(size, size=kept, replace=False)] = True
  return pattern.reshape(hidden_size, hidden_size)


def resolve(
  hidden_size: int,
  recurrent_mask: Any = None,
  recurrent_density: Any = None,
  mask_seed: Any = 0,
) -> np.ndarray | None:
  """The `(n, n)` bool pattern, or None for a dense recurrence.

  Args:
    hidden_size: `n`.
    recurrent_mask: None, or a boolean array of shape `(n, n)`.
    recurrent_density: None, or a number in (0, 1] (1: dense).
    mask_seed: the NumPy seed of the density's pattern, an int >= 0.

  Raises:
    ValueError: a mask that is not a boolean `(n, n)` array, a density
      outside (0, 1], a bad seed, or both a mask and a density.
  """
  if (
    isinstance(mask_seed, bool)
    or not isinstance(mask_seed, (int, np.integer))
    or mask_seed < 0
  ):
    raise ValueError(f"mask_seed must be an integer >= 0, got {mask_seed!r}")
  if recurrent_mask is not None and recurrent_density is not None:
    raise ValueError(
      "pass recurrent_mask or recurrent_density, not both "
      f"(got a mask and recurrent_density={recurrent_density!r})"
    )
  if recurrent_mask is not None:
    mask = np.asarray(recurrent_mask)
    if mask.dtype != np.bool_ or mask.shape != (hidden_size, hidden_size):
      raise ValueError(
        f"recurrent_mask must be a boolean array of shape ({hidden_size}, "
        f"{hidden_size}) (M[j, i] True when unit j feeds unit i), got "
        f"dtype {mask.dtype} and shape {mask.shape}"
      )
    return mask.copy()
  if recurrent_density is None:
    return None
  if (
    isinstance(recurrent_density, bool)
    or not isinstance(recurrent_density, (int, float, np.floating))
    or not 0.0 < float(recurrent_density) <= 1.0
  ):
    raise ValueError(
      "recurrent_density must be a number in (0, 1] (the fraction of "
      f"recurrent weights kept), got {recurrent_density!r}"
    )
  if float(recurrent_density) == 1.0:
    return None
  return random_pattern(hidden_size, float(recurrent_density), int(mask_seed))


def weight_rows(mask: np.ndarray, num_gates: int) -> np.ndarray:
  """`(n, K n)` float32 0/1: `mask` repeated over the `K` gate blocks, the
  layout of `W`'s recurrent rows."""
  return np.tile(mask, (1, num_gates)).astype(np.float32)


def reachability(mask: np.ndarray | None, hidden_size: int, steps: int):
  """`(n, n)` bool, `[j, i]` True when unit `j` reaches unit `i` within
  `steps` steps of the recurrence (`steps = 0`: the identity)."""
  edges = (
    np.ones((hidden_size, hidden_size), bool) if mask is None else mask
  ).astype(np.int64)
  reach = np.eye(hidden_size, dtype=bool)
  for _ in range(steps):
    reach = reach | ((reach.astype(np.int64) @ edges) > 0)
  return reach


__all__ = ["random_pattern", "reachability", "resolve", "weight_rows"]
