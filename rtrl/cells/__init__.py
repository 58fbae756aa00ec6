"""Recurrent cells: `make(name, hidden_size)` with names 'rnn', 'leaky_rnn',
'ctrnn', 'rhn', 'lstm' and 'gru', or the classes `RNN`, `LeakyRNN`, `CTRNN`
(a continuous-time RNN with a time constant per unit, `ctrnn.py`), `RHN`,
`LSTM`, `GRU`. Each takes a sparse recurrence: `recurrent_mask` (an `(n, n)` bool
pattern) or `recurrent_density` with `mask_seed` (`recurrent_mask.py`).

Each is a Lemma-1 `Cell` (`lemma1.py`): `z = concat(x, h, 1) @ W`, then a map
acting on each hidden unit separately; every estimator serves such a cell. To
add one, subclass `Cell` with `num_gates`, `num_state_rows` and `_unit_map`
(the per-unit map; no derivative to write) and add it to `CELLS`.

Any other cell, written as a pure one-step function, is a `CustomCell`
(`custom.py`): exact RTRL, UORO, SnAp-1 and BPTT serve it by autodiff.
`from_flax(module)` (`flax_cells.py`) takes a Flax recurrent cell: Flax's
built-in cells map exactly to Lemma-1 cells (`flax_forms.py`), any other
becomes a `CustomCell`; `to_flax` gives trained params back.
`LRU(state_size)` (`lru.py`) is the Linear Recurrent Unit's complex
diagonal recurrence, whose exact RTRL is element-wise.
"""

from __future__ import annotations

from rtrl.cells.builtin import GRU
from rtrl.cells.builtin import LSTM
from rtrl.cells.builtin import RHN
from rtrl.cells.builtin import RNN
from rtrl.cells.builtin import LeakyRNN
from rtrl.cells.ctrnn import CTRNN
from rtrl.cells.custom import CustomCell
from rtrl.cells.custom import as_custom
from rtrl.cells.flax_cells import from_flax
from rtrl.cells.flax_cells import named_cell
from rtrl.cells.flax_cells import to_flax
from rtrl.cells.lemma1 import Cell
from rtrl.cells.lemma1 import Params
from rtrl.cells.lemma1 import StepJacobians
from rtrl.cells.lru import LRU

CELLS = {
  "rnn": RNN,
  "ctrnn": CTRNN,
  "leaky_rnn": LeakyRNN,
  "rhn": RHN,
  "lstm": LSTM,
  "gru": GRU,
}


def make(name: str, hidden_size: int, **kwargs) -> Cell | LRU:
  """Builds a cell by name: one of `CELLS` ('rnn', 'leaky_rnn', 'ctrnn', 'rhn',
  'lstm', 'gru'), 'lru' with `hidden_size` complex units
  (`LRU(state_size=hidden_size)`, whose readout sees the `2 hidden_size`
  vector `[Re h, Im h]`), or a Flax built-in cell as 'flax:nnx.GRUCell',
  'flax:linen.LSTMCell', ... (`named_cell`: its exact Lemma-1 form, Flax's
  initialisation).

  `kwargs` go to the cell's constructor: `recurrent_mask=M` or
  `recurrent_density=d, mask_seed=s` for a sparse recurrence (every cell
  but 'lru'), `leak=` for 'leaky_rnn', ...

  Raises:
    ValueError: an unknown name; a bad sparsity or cell argument (named).
  """
  key = str(name).lower()
  if key.startswith("flax:"):
    return named_cell(str(name)[len("flax:") :], hidden_size, **kwargs)
  if key == "lru":
    return LRU(state_size=hidden_size, **kwargs)
  if key not in CELLS:
    raise ValueError(
      f"cell must be one of {sorted(CELLS) + ['lru']}, got {name!r}"
    )
  return CELLS[key](hidden_size=hidden_size, **kwargs)


__all__ = [
  "CELLS",
  "CTRNN",
  "Cell",
  "CustomCell",
  "GRU",
  "LRU",
  "LSTM",
  "LeakyRNN",
  "Params",
  "RHN",
  "RNN",
  "StepJacobians",
  "as_custom",
  "from_flax",
  "make",
  "named_cell",
  "to_flax",
]
