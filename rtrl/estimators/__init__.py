"""RTRL gradient estimators behind one contract: `make(name, cell, **hparams)`.

Names (`names()`): 'rtrl' (exact), 'uoro', 'kf' (KF-RTRL), 'kf_avg' (rank
copies of KF-RTRL averaged), 'kf_approx' (KF-RTRL with a rank-`rank` D), 'ok'
(r-OK), 'ok_biased' (r-B-OK), 'ktp' (Kronecker triple product), 'snap1'
(SnAp-1), 'rflo' (RFLO's eligibility trace). Each returns
an `Estimator` (see `base.Estimator`); `hyperparameters(name)` says which
keyword arguments it takes (`('rank',)` or none), read from the registry.

For a `rtrl.cells.CustomCell` (any step function), `make` takes 'rtrl',
'uoro' and 'snap1' and builds them by autodiff (`generic.py`); for an
`rtrl.cells.LRU`, 'rtrl' (= 'snap1') is the exact element-wise RTRL of its
diagonal recurrence (`diagonal.py`) and 'uoro' the autodiff one.
"""

from __future__ import annotations

from collections.abc import Callable
import inspect

from rtrl.cells import LRU
from rtrl.cells import Cell
from rtrl.cells import CustomCell
from rtrl.estimators import diagonal
from rtrl.estimators import generic
from rtrl.estimators.base import Estimator
from rtrl.estimators.base import TangentState
from rtrl.estimators.exact import exact_rtrl
from rtrl.estimators.kronecker_sum import kf
from rtrl.estimators.kronecker_sum import kf_approx
from rtrl.estimators.kronecker_sum import kf_avg
from rtrl.estimators.kronecker_sum import ok
from rtrl.estimators.kronecker_sum import ok_biased
from rtrl.estimators.ktp import ktp
from rtrl.estimators.snap import rflo
from rtrl.estimators.snap import snap1
from rtrl.estimators.uoro import uoro

_REGISTRY: dict[str, Callable[..., Estimator]] = {
  "rtrl": exact_rtrl,
  "uoro": uoro,
  "kf": kf,
  "kf_avg": kf_avg,
  "kf_approx": kf_approx,
  "ok": ok,
  "ok_biased": ok_biased,
  "ktp": ktp,
  "snap1": snap1,
  "rflo": rflo,
}


def names() -> list[str]:
  """The registered estimator names."""
  return sorted(_REGISTRY)


def register(name: str, factory: Callable[..., Estimator]) -> None:
  """Adds an estimator factory `factory(cell, **hparams) -> Estimator`."""
  _REGISTRY[name] = factory


def hyperparameters(name: str) -> tuple[str, ...]:
  """The hyper-parameters estimator `name` takes (e.g. `('rank',)`), read from
  its factory's signature: `make(name, cell, **{h: ... for h in these})`."""
  if name not in _REGISTRY:
    raise ValueError(f"estimator must be one of {names()}, got {name!r}")
  parameters = inspect.signature(_REGISTRY[name]).parameters
  return tuple(h for h in parameters if h != "cell")


def make(name: str, cell: Cell, **hparams) -> Estimator:
  """Builds the estimator `name` for `cell`.

  Args:
    name: one of `names()`; for a `CustomCell`, one of `generic.GENERIC`
      ('rtrl', 'uoro', 'snap1').
    cell: a cell from `rtrl.cells`, a `CustomCell` included.
    **hparams: the estimator's hyper-parameters (e.g. `rank`).

  Raises:
    ValueError: unknown name, a hyper-parameter the estimator does not take,
      an invalid value, or an estimator that needs a Lemma-1 cell given a
      `CustomCell`.
  """
  if isinstance(cell, CustomCell):
    return generic.for_custom_cell(name, cell, **hparams)
  if isinstance(cell, LRU):
    return diagonal.for_lru(name, cell, **hparams)
  accepted = hyperparameters(name)
  if not isinstance(cell, Cell):
    raise ValueError(
      "cell must be an rtrl.cells cell (RNN, RHN, LSTM, GRU, "
      f"a Cell subclass or a CustomCell), got {cell!r}"
    )
  unknown = set(hparams) - set(accepted)
  if unknown:
    takes = ", ".join(accepted) or "no hyper-parameters"
    raise ValueError(
      f"estimator {name!r} does not take "
      f"{', '.join(sorted(unknown))} (it takes {takes})"
    )
  return _REGISTRY[name](cell, **hparams)


__all__ = [
  "Estimator",
  "TangentState",
  "hyperparameters",
  "make",
  "names",
  "register",
]
