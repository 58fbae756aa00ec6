"""`make(name, cell, **hparams)`: the estimator factories by name, for configs.

Each name is DECLARED here once, as an `EstimatorSpec`: its hyper-parameters
(with their valid values, for the error messages) and the factory that
serves each kind of cell (a Lemma-1 `rtrl.cells.Cell`, an `rtrl.cells.LRU`,
a `rtrl.cells.CustomCell`). The table is read-only.
"""

from __future__ import annotations

from collections.abc import Callable
import types
from typing import NamedTuple, NoReturn

from rtrl.cells import LRU
from rtrl.cells import Cell
from rtrl.cells import CustomCell
from rtrl.estimators.autodiff import autodiff_rtrl
from rtrl.estimators.autodiff import autodiff_snap1
from rtrl.estimators.autodiff import autodiff_uoro
from rtrl.estimators.base import Estimator
from rtrl.estimators.exact import exact_rtrl
from rtrl.estimators.kronecker_sum import kf
from rtrl.estimators.kronecker_sum import kf_approx
from rtrl.estimators.kronecker_sum import kf_avg
from rtrl.estimators.kronecker_sum import ok
from rtrl.estimators.kronecker_sum import ok_biased
from rtrl.estimators.ktp import ktp
from rtrl.estimators.lru_exact import diagonal_rtrl
from rtrl.estimators.sk_rtrl import sk_rtrl
from rtrl.estimators.snap import rflo
from rtrl.estimators.snap import snap1
from rtrl.estimators.snap_n import snap
from rtrl.estimators.uoro import uoro
from rtrl.routing import Routing


class Hyperparameter(NamedTuple):
  """A hyper-parameter of an estimator: its keyword, what values it takes
  (for messages), and whether it must be given."""

  name: str
  valid: str
  required: bool = True


class EstimatorSpec(NamedTuple):
  """One registry name.

  Attributes:
    name: the registry name (`Estimator.name`).
    lemma1: `factory(cell, *, routing, **hparams)` for a Lemma-1 `Cell`.
    hyperparameters: what `lemma1` takes (and `hyperparameters(name)`
      lists).
    lru: `factory(cell)` for an `LRU`, None where none serves it.
    custom: `factory(cell, **custom_hyperparameters)` for a `CustomCell`.
    custom_hyperparameters: what `custom` takes.
  """

  name: str
  lemma1: Callable[..., Estimator]
  hyperparameters: tuple[Hyperparameter, ...] = ()
  lru: Callable[..., Estimator] | None = None
  custom: Callable[..., Estimator] | None = None
  custom_hyperparameters: tuple[Hyperparameter, ...] = ()


_RANK = (Hyperparameter("rank", "an int >= 1"),)

_SPECS = (
  EstimatorSpec("rtrl", exact_rtrl, lru=diagonal_rtrl, custom=autodiff_rtrl),
  EstimatorSpec("uoro", uoro, lru=autodiff_uoro, custom=autodiff_uoro),
  EstimatorSpec("kf", kf),
  EstimatorSpec("kf_avg", kf_avg, _RANK),
  EstimatorSpec("kf_approx", kf_approx, _RANK),
  EstimatorSpec("ok", ok, _RANK),
  EstimatorSpec("ok_biased", ok_biased, _RANK),
  EstimatorSpec("ktp", ktp, _RANK),
  EstimatorSpec(
    "snap1",
    snap1,
    lru=diagonal_rtrl,
    custom=autodiff_snap1,
    custom_hyperparameters=(
      Hyperparameter("pattern", "None or a (d, p) bool array", required=False),
    ),
  ),
  EstimatorSpec("rflo", rflo),
  EstimatorSpec("snap", snap, (Hyperparameter("order", "an int >= 1"),)),
  EstimatorSpec(
    "sk_rtrl",
    sk_rtrl,
    (Hyperparameter("rank", "an int in [0, S n]: 0 SnAp-1, S n exact"),),
  ),
)

REGISTRY: types.MappingProxyType[str, EstimatorSpec] = types.MappingProxyType(
  {spec.name: spec for spec in _SPECS}
)


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
  """The hyper-parameters estimator `name` takes for a Lemma-1 cell (e.g.
  `('rank',)`), as declared in the registry:
  `make(name, cell, **{h: ... for h in these})`.

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
  served = [s.name for s in _SPECS if s.custom is not None]
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
  "REGISTRY",
  "EstimatorSpec",
  "Hyperparameter",
  "hyperparameters",
  "make",
  "names",
  "spec",
]
