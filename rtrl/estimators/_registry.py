"""`make(name, cell, **hparams)`: the estimator factories by name, for configs.

`SPECS` lists every registry name's `EstimatorSpec`, each declared once
beside its factory (its hyper-parameters read from the factory's
signature); `FACTORIES`, `rtrl.estimators.__all__`, `make`'s checks and
`hyperparameters(name)` are derived from it. The table is read-only.
"""

from __future__ import annotations

from collections.abc import Callable
import types
from typing import NoReturn

from rtrl.cells import LRU
from rtrl.cells import Cell
from rtrl.cells import CustomCell
from rtrl.estimators._base import Estimator
from rtrl.estimators._exact import RTRL
from rtrl.estimators._kronecker_sum import KF
from rtrl.estimators._kronecker_sum import KF_APPROX
from rtrl.estimators._kronecker_sum import KF_AVG
from rtrl.estimators._ktp import KTP
from rtrl.estimators._ok import OK
from rtrl.estimators._ok import OK_BIASED
from rtrl.estimators._sk_rtrl import SK_RTRL
from rtrl.estimators._snap1_rflo import RFLO
from rtrl.estimators._snap1_rflo import SNAP1
from rtrl.estimators._snap_n import SNAP
from rtrl.estimators._spec import EstimatorSpec
from rtrl.estimators._spec import Hyperparameter
from rtrl.estimators._uoro import UORO
from rtrl.routing import Routing

# Every registry name, in the order of the paper's Table 1 and then the
# later estimators: the one list a new estimator joins.
SPECS: tuple[EstimatorSpec, ...] = (
  RTRL,
  UORO,
  KF,
  KF_AVG,
  KF_APPROX,
  OK,
  OK_BIASED,
  KTP,
  SNAP1,
  RFLO,
  SNAP,
  SK_RTRL,
)

REGISTRY: types.MappingProxyType[str, EstimatorSpec] = types.MappingProxyType(
  {spec.name: spec for spec in SPECS}
)


# Every factory's name, once, in the order of `SPECS` (each spec's Lemma-1,
# LRU and CustomCell factories).
FACTORIES: tuple[str, ...] = tuple(
  dict.fromkeys(f.__name__ for s in SPECS for f in s.factories)
)


def factory(name: str) -> Callable[..., Estimator]:
  """The factory function called `name` (one of `FACTORIES`).

  Raises:
    ValueError: an unknown name, listing the known ones.
  """
  found = {f.__name__: f for s in SPECS for f in s.factories}
  if name not in found:
    raise ValueError(f"factory must be one of {FACTORIES}, got {name!r}")
  return found[name]


def names() -> list[str]:
  """The registry names, sorted."""
  return sorted(REGISTRY)


def spec(name: str) -> EstimatorSpec:
  """The `EstimatorSpec` of `name`.

  Raises:
    ValueError: an unknown name, listing the known ones.
  """
  if name not in REGISTRY:
    raise ValueError(f"estimator must be one of {names()}, got {name!r}")
  return REGISTRY[name]


def hyperparameters(name: str) -> tuple[str, ...]:
  """The hyper-parameters estimator `name` takes for a Lemma-1 cell, its
  factory's keyword parameters (e.g. `('rank',)`; SK-RTRL's optional ones
  included): `make(name, cell, **{h: ... for h in these})`.
  `spec(name).hyperparameters` says which are required and their
  defaults.

  Raises:
    ValueError: an unknown name.
  """
  return tuple(h.name for h in spec(name).hyperparameters)


def _check_hyperparameters(
  name: str, declared: tuple[Hyperparameter, ...], given: dict, where: str
) -> None:
  accepted = [h.name for h in declared]
  unknown = sorted(set(given) - set(accepted))
  if unknown:
    takes = ", ".join(accepted) or "no hyper-parameters"
    raise ValueError(
      f"estimator {name!r} does not take {', '.join(unknown)} "
      f"(it takes {takes}){where}"
    )
  for h in declared:
    if h.required and h.name not in given:
      raise ValueError(f"estimator {name!r} needs {h.name} ({h.valid}){where}")


def _refuse_custom(name: str, cell: CustomCell) -> NoReturn:
  served = [s.name for s in SPECS if s.custom is not None]
  if name not in REGISTRY:
    raise ValueError(
      f"estimator must be one of {sorted(served)} for a CustomCell, "
      f"got {name!r}"
    )
  why = (
    "it propagates along the cell's direct state path only, which "
    "a general step function does not separate from the path "
    "through its recurrent weights"
    if name == "rflo"
    else "its factorisation F = hhat ⊗ D does not exist for a general "
    "step function"
  )
  raise ValueError(
    f"estimator {name!r} needs a cell in the Lemma-1 form (z = [x, h, "
    f"1] @ W followed by a per-unit map, as rtrl.cells.Cell subclasses "
    f"are): {why}; use {', '.join(map(repr, served))} for "
    f"{cell!r}, or write the cell as a Cell subclass"
  )


def make(
  name: str, cell, *, routing: Routing | None = None, **hparams
) -> Estimator:
  """Builds the estimator `name` for `cell`: sugar over the factories for
  configs (`Estimator.implementation` says which factory served it).

  'rtrl' is `exact_rtrl` for a Lemma-1 cell, `diagonal_rtrl` for an LRU
  and `autodiff_rtrl` for a `CustomCell`; 'uoro' and 'snap1' are
  `autodiff_uoro` and `autodiff_snap1` for a `CustomCell` ('uoro' also for
  an LRU, whose 'snap1' is `diagonal_rtrl`); every other name needs a
  Lemma-1 cell.

  Args:
    name: one of `names()`.
    cell: a cell from `rtrl.cells`, a `CustomCell` or an `LRU` included.
    routing: the Lemma-1 estimators' speed choices (`rtrl.routing`); None:
      `Routing.auto()`. The autodiff and LRU estimators have no routed
      operation and do not use it.
    **hparams: the estimator's hyper-parameters (`hyperparameters(name)`;
      `pattern` for 'snap1' on a `CustomCell`).

  Raises:
    ValueError: an unknown name, a missing or unknown hyper-parameter
      (named), an invalid value, or a cell the estimator cannot serve
      (naming what can).
  """
  if isinstance(cell, CustomCell):
    custom = REGISTRY[name].custom if name in REGISTRY else None
    if custom is None:
      _refuse_custom(name, cell)
    _check_hyperparameters(
      name, REGISTRY[name].custom_hyperparameters, hparams, " for a CustomCell"
    )
    return custom(cell, **hparams)
  entry = spec(name)
  if isinstance(cell, LRU):
    _check_hyperparameters(name, (), hparams, " for an LRU")
    if entry.lru is None:
      raise ValueError(
        f"estimator {name!r} does not serve an LRU: use 'rtrl' (exact and "
        f"element-wise, as cheap as the forward step; 'snap1' is the same), "
        f"or 'uoro'. The Kronecker family and RFLO need the Lemma-1 form "
        f"z = [x, h, 1] @ W, which a complex diagonal recurrence is not"
      )
    return entry.lru(cell)
  if not isinstance(cell, Cell):
    raise ValueError(
      "cell must be an rtrl.cells cell (RNN, RHN, LSTM, GRU, "
      f"a Cell subclass, an LRU or a CustomCell), got {cell!r}"
    )
  _check_hyperparameters(name, entry.hyperparameters, hparams, "")
  return entry.lemma1(cell, routing=routing, **hparams)


__all__ = [
  "FACTORIES",
  "REGISTRY",
  "SPECS",
  "EstimatorSpec",
  "Hyperparameter",
  "factory",
  "hyperparameters",
  "make",
  "names",
  "spec",
]
