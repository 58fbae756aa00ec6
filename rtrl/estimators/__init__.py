"""RTRL gradient estimators: one named factory per algorithm, and `make`.

Each factory returns an `Estimator` (pure functions, optax style: see
`base.Estimator`) and documents its paper, its cost per example and step
and its hyper-parameters:

  exact_rtrl      exact RTRL, Lemma-1 cells (`exact.py`)
  autodiff_rtrl   exact RTRL for any cell, by autodiff (`autodiff.py`)
  diagonal_rtrl   the LRU's exact element-wise RTRL (`lru_exact.py`)
  uoro            UORO, Lemma-1 cells (`uoro.py`)
  autodiff_uoro   UORO for any cell, by autodiff
  kf, kf_avg, kf_approx, ok, ok_biased
                  the Kronecker-sum family (`kronecker_sum.py`; KF-APPROX's
                  low-rank `D'` in `low_rank_d.py`)
  ktp             the Kronecker triple product (`ktp.py`)
  snap1, rflo     SnAp-1 and RFLO, Lemma-1 cells (`snap1_rflo.py`)
  snap            SnAp-n for any order n >= 1, Lemma-1 cells, dense or
                  sparse (`snap_n.py`)
  sk_rtrl         SK-RTRL: SnAp-1 plus a certified rank-r sketch of the
                  rest, Lemma-1 cells (`sk_rtrl.py`; its sketch algebra in
                  `sk_rtrl_sketch.py`)
  autodiff_snap1  SnAp-1 for any cell, by autodiff
  truncated_bptt  online TBPTT-T: each step's gradient backpropagated
                  through the last T steps, any cell (`truncated_bptt.py`)

The Lemma-1 factories take `routing=` (an `rtrl.routing.Routing`: the
speed choices, resolved when the estimator is built). `make(name, cell,
**hparams)` is the same by registry name, for configs: names
(`names()`) 'rtrl', 'uoro', 'kf', 'kf_avg', 'kf_approx', 'ok',
'ok_biased', 'ktp', 'snap1', 'rflo', 'snap', 'sk_rtrl';
`hyperparameters(name)` says which keyword arguments each takes, as
declared in `registry.py`.
"""

from __future__ import annotations

from rtrl.estimators.autodiff import autodiff_rtrl
from rtrl.estimators.autodiff import autodiff_snap1
from rtrl.estimators.autodiff import autodiff_uoro
from rtrl.estimators.base import Estimator
from rtrl.estimators.base import TangentState
from rtrl.estimators.exact import exact_rtrl
from rtrl.estimators.kronecker_sum import kf
from rtrl.estimators.kronecker_sum import kf_approx
from rtrl.estimators.kronecker_sum import kf_avg
from rtrl.estimators.kronecker_sum import ok
from rtrl.estimators.kronecker_sum import ok_biased
from rtrl.estimators.ktp import ktp
from rtrl.estimators.lru_exact import diagonal_rtrl
from rtrl.estimators.registry import EstimatorSpec
from rtrl.estimators.registry import Hyperparameter
from rtrl.estimators.registry import hyperparameters
from rtrl.estimators.registry import make
from rtrl.estimators.registry import names
from rtrl.estimators.registry import spec
from rtrl.estimators.sk_rtrl import sk_rtrl
from rtrl.estimators.snap1_rflo import rflo
from rtrl.estimators.snap1_rflo import snap1
from rtrl.estimators.snap_n import snap
from rtrl.estimators.truncated_bptt import truncated_bptt
from rtrl.estimators.uoro import uoro

# The factories, in the order of the docstring above.
FACTORIES = (
  "exact_rtrl",
  "autodiff_rtrl",
  "diagonal_rtrl",
  "uoro",
  "autodiff_uoro",
  "kf",
  "kf_avg",
  "kf_approx",
  "ok",
  "ok_biased",
  "ktp",
  "snap1",
  "rflo",
  "snap",
  "sk_rtrl",
  "autodiff_snap1",
  "truncated_bptt",
)

__all__ = [
  "exact_rtrl",
  "autodiff_rtrl",
  "diagonal_rtrl",
  "uoro",
  "autodiff_uoro",
  "kf",
  "kf_avg",
  "kf_approx",
  "ok",
  "ok_biased",
  "ktp",
  "snap1",
  "rflo",
  "snap",
  "sk_rtrl",
  "autodiff_snap1",
  "truncated_bptt",
  "Estimator",
  "EstimatorSpec",
  "FACTORIES",
  "Hyperparameter",
  "TangentState",
  "hyperparameters",
  "make",
  "names",
  "spec",
]
