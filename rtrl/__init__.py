"""Online training of recurrent networks by (approximate) Real-Time Recurrent
Learning, in JAX, optax style: pure functions, explicit state.

    import optax, rtrl
    cell = rtrl.cells.make("rhn", hidden_size=32)
    estimator = rtrl.estimators.make("ok", cell, rank=8)
    trainer = rtrl.make_online_trainer(cell, estimator, optax.adam(1e-3))
    state = trainer.init(params, key, batch_size)
    state, metrics = trainer.run(state, chunk)   # chunk: a time-major StepBatch

The public names (this list is the one place they are documented):

Modules
  cells       `make(name, hidden_size)` ('rnn', 'rhn', 'lstm'), `RNN`, `RHN`,
              `LSTM`, `Cell`: cells in the Lemma-1 form `z = [x, h, 1] @ W`.
              `CustomCell(step, init, initial_state, output)`: any cell as a
              pure one-step function ('rtrl', 'uoro', 'snap1', BPTT).
  estimators  `make(name, cell, **hparams)`, `names()`,
              `hyperparameters(name)`, `register`, `Estimator`: exact RTRL and
              its approximations (UORO, KF, KF-AVG, KF-APPROX, OK, B-OK, KTP).
  kronecker   `unbiased_low_rank`, `biased_low_rank`, `kronecker_sum_reduce`,
              the sign trick: the optimal low-rank and Kronecker-sum
              approximations.
  readout     `init`, `logits`, `step_loss`: the linear softmax readout.
  online      the online trainer and its types (below).
  optim       `tf1_adam`, `scale_by_tf1_adam`: TF1's Adam (epsilon added to
              the uncorrected sqrt(v)), as the official OK code steps.
  bptt        full-BPTT and TBPTT references (below).
  tasks       `copy_task`, `ptb`, `ptb_eval`: what runs inside jit for the
              Copy task and char-PTB (streams, curricula, BPC); import it.

Training (one `Trainer` contract: `init(params, key, batch_size) -> state`,
`step(state, batch)` and jitted `run(state, chunk)` -> `(state, metrics)`)
  make_online_trainer  `(cell, estimator, optimizer, accumulate_steps=1)`:
                       updates the parameters at every step.
  make_tbptt_trainer   `(cell, optimizer, truncation)`: one update per window.
  Trainer              the three functions above, a NamedTuple.
  StepBatch            one step's `inputs (B, I)`, `targets (B,)`,
                       `weights (B,)`, `resets (B,)`; a chunk adds a leading
                       time axis.
  StepMetrics          `loss_sum`, `weight_sum` of a step (nats).
  OnlineState          the online trainer's state (params, opt_state,
                       cell_state, tstate, step).
  TBPTTState           the TBPTT trainer's state.

Reference gradients (parameters fixed)
  frozen_gradients  `(cell, estimator, params, chunk, key)`: an estimator's
                    per-step gradients `(T,) + W.shape`.
  bptt_gradient     `(cell, params, cell_state, chunk)`: full BPTT of
                    `Σ_t L_t`, the exact reference.
  tbptt_gradients   `(cell, params, cell_state, chunk, truncation)`: one
                    gradient per window.
"""

from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import kronecker
from rtrl import online
from rtrl import optim
from rtrl import readout
from rtrl.bptt import TBPTTState
from rtrl.bptt import bptt_gradient
from rtrl.bptt import make_tbptt_trainer
from rtrl.bptt import tbptt_gradients
from rtrl.online import OnlineState
from rtrl.online import StepBatch
from rtrl.online import StepMetrics
from rtrl.online import Trainer
from rtrl.online import frozen_gradients
from rtrl.online import make_online_trainer

__all__ = [
    "bptt", "cells", "estimators", "kronecker", "online", "optim", "readout",
    "make_online_trainer", "make_tbptt_trainer", "Trainer", "StepBatch",
    "StepMetrics", "OnlineState", "TBPTTState", "frozen_gradients",
    "bptt_gradient", "tbptt_gradients",
]
