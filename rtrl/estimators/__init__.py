"""RTRL gradient estimators: one named factory per algorithm, and `make`.

Each factory returns an `Estimator` (pure functions, optax style) and
documents its paper, its cost per example and step and its
hyper-parameters. `FACTORIES` lists them: exact RTRL for Lemma-1 cells
(`exact_rtrl`), for an LRU (`diagonal_rtrl`, element-wise) and for any
cell by autodiff (`autodiff_rtrl`); UORO (`uoro`, `autodiff_uoro`); the
Kronecker-sum family of Benzing et al. (`kf`, `kf_avg`, `kf_approx`, `ok`,
`ok_biased`) and KTP (`ktp`); SnAp-1 (`snap1`, `autodiff_snap1`), RFLO
(`rflo`), SnAp-n (`snap`) and SK-RTRL (`sk_rtrl`). Beside them,
`truncated_bptt` (online TBPTT-T: each step's gradient backpropagated
through the last T steps, any cell); it is not a registry name, since
`estimator='tbptt'` in the supervised experiments names the window
trainer (`rtrl.bptt.make_tbptt_trainer`).

`make(name, cell, **hparams)` builds one by registry name (`names()`:
'rtrl', 'uoro', 'kf', 'kf_avg', 'kf_approx', 'ok', 'ok_biased', 'ktp',
'snap1', 'rflo', 'snap', 'sk_rtrl'), choosing the factory that serves the
cell. Each name is described once by an `EstimatorSpec` (`spec(name)`):
its factories, its label for legends and its cost per example and step;
its hyper-parameters are its factory's keyword parameters
(`hyperparameters(name)`, `spec(name).hyperparameters` with defaults).
The Lemma-1 factories take `routing=` (an `rtrl.routing.Routing`: the
speed choices, resolved when the estimator is built).
"""

from __future__ import annotations

from rtrl.estimators._autodiff import autodiff_rtrl as autodiff_rtrl
from rtrl.estimators._autodiff import autodiff_snap1 as autodiff_snap1
from rtrl.estimators._autodiff import autodiff_uoro as autodiff_uoro
from rtrl.estimators._base import Estimator
from rtrl.estimators._base import TangentState
from rtrl.estimators._exact import exact_rtrl as exact_rtrl
from rtrl.estimators._kronecker_sum import kf as kf
from rtrl.estimators._kronecker_sum import kf_approx as kf_approx
from rtrl.estimators._kronecker_sum import kf_avg as kf_avg
from rtrl.estimators._ktp import ktp as ktp
from rtrl.estimators._lru_exact import diagonal_rtrl as diagonal_rtrl
from rtrl.estimators._ok import ok as ok
from rtrl.estimators._ok import ok_biased as ok_biased
from rtrl.estimators._registry import FACTORIES
from rtrl.estimators._registry import SPECS
from rtrl.estimators._registry import hyperparameters
from rtrl.estimators._registry import make
from rtrl.estimators._registry import names
from rtrl.estimators._registry import spec
from rtrl.estimators._sk_rtrl import sk_rtrl as sk_rtrl
from rtrl.estimators._snap1_rflo import rflo as rflo
from rtrl.estimators._snap1_rflo import snap1 as snap1
from rtrl.estimators._snap_n import snap as snap
from rtrl.estimators._spec import Cost
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import Hyperparameter
from rtrl.estimators._truncated_bptt import truncated_bptt as truncated_bptt
from rtrl.estimators._uoro import uoro as uoro

__all__ = [
  *FACTORIES,
  "Cost",
  "Estimator",
  "EstimatorSpec",
  "FACTORIES",
  "Hyperparameter",
  "SPECS",
  "TangentState",
  "hyperparameters",
  "make",
  "names",
  "spec",
  "truncated_bptt",
]
