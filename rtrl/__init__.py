"""Online training of recurrent networks by (approximate) Real-Time Recurrent
Learning, in JAX, optax style: pure functions, explicit state.

    import optax, rtrl
    cell = rtrl.cells.make("rhn", hidden_size=32)
    estimator = rtrl.estimators.ok(cell, rank=8)  # or make("ok", cell, rank=8)
    trainer = rtrl.make_online_trainer(cell, estimator, optax.adam(1e-3))
    state = trainer.init(params, key, batch_size)
    state, metrics = trainer.run(state, chunk)   # chunk: a time-major StepBatch

A short map; every name is documented in its module and in the
documentation's API reference.

Modules: `cells` (Lemma-1 cells, `CustomCell`, `LRU`), `estimators` (one
factory per algorithm: `exact_rtrl`, `autodiff_rtrl`, `diagonal_rtrl`,
`uoro`, `kf`, `kf_avg`, `kf_approx`, `ok`, `ok_biased`, `ktp`, `snap1`,
`rflo`, ...; and `make(name, cell, **hparams)`), `routing` (`Routing`, the
estimators' speed choices), `kronecker` (the optimal low-rank and
Kronecker-sum approximations), `readout` (`Readout`, `linear()`,
`feedback_alignment()`), `losses`, `online`, `stack`, `heads`, `optim`
(TF1's Adam), `bptt`, `rl` (online recurrent reinforcement learning:
RTRRL's agent with any estimator, recurrent PPO, gymnax and POPGym
environments), `tasks` (import it).

Training, one `Trainer` contract (`init`, `step`, jitted `run`):
`make_online_trainer` (an update at every step) and `make_tbptt_trainer`
(one per window), with `StepBatch`, `StepMetrics`, `OnlineState` and
`TBPTTState`. Reference gradients with the parameters fixed:
`frozen_gradients` (an estimator's per-step gradients), `bptt_gradient`
(full BPTT, the exact reference) and `tbptt_gradients`.
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
from rtrl import rl
from rtrl import routing
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
  "rl",
  "routing",
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
