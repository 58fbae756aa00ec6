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
  cells       `make(name, hidden_size)` ('rnn', 'rhn', 'lstm', 'gru'), `RNN`,
              `RHN`, `LSTM`, `GRU`, `Cell`: cells in the Lemma-1 form
              `z = [x, h, 1] @ W`, then a per-unit map.
              `CustomCell(step, init, initial_state, output)`: any cell as a
              pure one-step function ('rtrl', 'uoro', 'snap1', BPTT);
              `as_custom(cell)`: any cell seen through its step only.
              `LRU(state_size, r_min, r_max, max_phase)`: the Linear
              Recurrent Unit's complex diagonal recurrence ('rtrl' is its
              exact element-wise RTRL; also `make('lru', m)`).
  estimators  `make(name, cell, **hparams)`, `names()`,
              `hyperparameters(name)`, `register`, `Estimator`: exact RTRL and
              its approximations (UORO, KF, KF-AVG, KF-APPROX, OK, B-OK, KTP,
              SnAp-1 'snap1', RFLO 'rflo').
  kronecker   `unbiased_low_rank`, `biased_low_rank`, `kronecker_sum_reduce`,
              the sign trick: the optimal low-rank and Kronecker-sum
              approximations.
  readout     `Readout` (`init(key, hidden_size, num_outputs) -> params`,
              `apply(params, hidden (n,)) -> prediction`), `linear()` (the
              default), `feedback_alignment(scale=1.0)` (a linear readout
              whose error reaches the state through a fixed random matrix);
              `init`, `logits`, `step_loss`: the linear softmax readout.
  losses      per-example `loss(prediction, target) -> scalar`:
              `softmax_cross_entropy` (integer labels, the default),
              `squared_error` (½‖·‖², regression),
              `sigmoid_binary_cross_entropy`; `Loss`, `check`.
  online      the online trainer and its types (below).
  stack       `Layer(cell, estimator, head)`, `make_stacked_online_trainer`,
              `init_params`, `stacked_frozen_gradients`,
              `stacked_bptt_gradient`: stacks of recurrent layers trained
              online, each by its own estimator, the error passed down
              through the step's spatial Jacobians (Zucchet et al. 2023).
  heads       `Head`, `identity()`, `lru_block(model_size)`: a layer's
              position-wise map to the next layer's input.
  optim       `tf1_adam`, `scale_by_tf1_adam`: TF1's Adam (epsilon added to
              the uncorrected sqrt(v)), as the official OK code steps.
  bptt        full-BPTT and TBPTT references (below).
  tasks       `copy_task`, `ptb`, `ptb_eval`, `series`: what runs inside jit
              for the Copy task, char-PTB (streams, curricula, BPC) and
              Mackey-Glass next-value regression; import it.

Training (one `Trainer` contract: `init(params, key, batch_size) -> state`,
`step(state, batch)` and jitted `run(state, chunk)` -> `(state, metrics)`)
  make_online_trainer  `(cell, estimator, optimizer, accumulate_steps=1, *,
                       readout=None, loss=None)`: updates the parameters at
                       every step.
  make_tbptt_trainer   `(cell, optimizer, truncation, *, readout=None,
                       loss=None)`: one update per window.
  Trainer              the three functions above, a NamedTuple.
  StepBatch            one step's `inputs (B, I)`, `targets` (`(B,)` int
                       labels, or `(B, ...)` float for regression),
                       `weights (B,)`, `resets (B,)`; a chunk adds a leading
                       time axis.
  StepMetrics          `loss_sum`, `weight_sum` of a step (nats for
                       classification).
  OnlineState          the online trainer's state (params, opt_state,
                       cell_state, tstate, step).
  TBPTTState           the TBPTT trainer's state.

Reference gradients (parameters fixed)
  frozen_gradients  `(cell, estimator, params, chunk, key, *, readout=None,
                    loss=None)`: an estimator's per-step gradients
                    `(T,) + W.shape`.
  bptt_gradient     `(cell, params, cell_state, chunk, *, readout=None,
                    loss=None)`: full BPTT of `Σ_t L_t`, the exact reference.
  tbptt_gradients   `(cell, params, cell_state, chunk, truncation, *,
                    readout=None, loss=None)`: one gradient per window.

Every trainer and reference gradient takes `readout` (a `readout.Readout`
matching `params['readout']`) and `loss` (a `losses` function); None means
`readout.linear()` and `losses.softmax_cross_entropy`, today's computation.
"""

from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import heads
from rtrl import kronecker
from rtrl import losses
from rtrl import online
from rtrl import optim
from rtrl import readout
from rtrl import stack
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
  "bptt",
  "cells",
  "estimators",
  "kronecker",
  "losses",
  "online",
  "optim",
  "readout",
  "heads",
  "stack",
  "make_online_trainer",
  "make_tbptt_trainer",
  "Trainer",
  "StepBatch",
  "StepMetrics",
  "OnlineState",
  "TBPTTState",
  "frozen_gradients",
  "bptt_gradient",
  "tbptt_gradients",
]
