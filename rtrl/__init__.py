"""Online training of recurrent networks by (approximate) Real-Time Recurrent
Learning, in JAX.

Modules: `cells` (RNN, RHN, LSTM in Lemma-1 form), `estimators` (exact RTRL
and its approximations behind one contract), `kronecker` (optimal unbiased
low-rank and Kronecker-sum approximations), `bptt` (BPTT/TBPTT references),
`online` (the per-step online trainer), `readout`, `tasks` (Copy task).
"""

from rtrl import cells
from rtrl import estimators

__all__ = ["cells", "estimators"]
