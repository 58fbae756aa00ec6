"""Recurrent cells: `make(name, hidden_size)` with names 'rnn', 'rhn', 'lstm'
and 'gru', or the classes `RNN`, `RHN`, `LSTM`, `GRU`.

Each is a Lemma-1 `Cell` (`lemma1.py`): `z = concat(x, h, 1) @ W`, then a map
acting on each hidden unit separately; every estimator serves such a cell. To
add one, subclass `Cell` with `num_gates`, `num_state_rows` and `_unit_map`
(the per-unit map; no derivative to write) and add it to `CELLS`.

Any other cell, written as a pure one-step function, is a `CustomCell`
(`custom.py`): exact RTRL, UORO, SnAp-1 and BPTT serve it by autodiff.
"""

from __future__ import annotations

from rtrl.cells.builtin import GRU, LSTM, RHN, RNN
from rtrl.cells.custom import CustomCell, as_custom
from rtrl.cells.lemma1 import Cell, Params, StepJacobians

CELLS = {"rnn": RNN, "rhn": RHN, "lstm": LSTM, "gru": GRU}


def make(name: str, hidden_size: int, **kwargs) -> Cell:
  """Builds a cell by name: one of `CELLS` ('rnn', 'rhn', 'lstm', 'gru')."""
  key = str(name).lower()
  if key not in CELLS:
    raise ValueError(f"cell must be one of {sorted(CELLS)}, got {name!r}")
  return CELLS[key](hidden_size=hidden_size, **kwargs)


__all__ = ["CELLS", "Cell", "CustomCell", "GRU", "LSTM", "Params", "RHN",
           "RNN", "StepJacobians", "as_custom", "make"]
