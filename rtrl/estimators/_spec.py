"""`EstimatorSpec`: the one description of an estimator, beside its factory.

Each registry name is described once, in the module of its Lemma-1 factory:
its factories (Lemma-1 cells, LRUs, `CustomCell`s), its label for legends
and its cost per example and step (the paper's Table 1 form and formulas
in the cell's sizes). Its hyper-parameters are not written down again: they
are the keyword parameters of its factory's signature (less `cell` and
`routing`), with the factory's default and the first sentence of its
docstring's `Args:` entry. `rtrl.estimators.make`, `FACTORIES`, `__all__`,
the experiments' estimator fields, the benchmarks' cost table and the
gradient-cosine tool's list are read from these descriptions.
"""

from __future__ import annotations

from collections.abc import Callable
import functools
import inspect
import re
from typing import Any, NamedTuple

from rtrl.estimators._base import Estimator

# Parameters of every factory that are not hyper-parameters.
NOT_HYPERPARAMETERS = ("cell", "routing")


class Hyperparameter(NamedTuple):
  """A hyper-parameter of an estimator, read from its factory.

  Attributes:
    name: its keyword.
    valid: what values it takes (for messages): the first sentence of the
      factory's docstring entry.
    required: it has no default.
    default: the factory's default (None where required).
  """

  name: str
  valid: str
  required: bool = True
  default: Any = None


def _docstring_entries(factory: Callable) -> dict[str, str]:
  """`{arg: first sentence}` of `factory`'s `Args:` section."""
  doc = inspect.getdoc(factory) or ""
  section = re.split(r"^Args:\s*$", doc, flags=re.M)
  if len(section) < 2:
    return {}
  body = re.split(r"^\S", section[1], flags=re.M)[0]  # up to `Returns:`
  entries = re.split(r"^  (\w+): ", body, flags=re.M)[1:]
  out = {}
  for name, text in zip(entries[::2], entries[1::2]):
    text = " ".join(text.split())
    match = re.match(r"(.+?[.;])(\s|$)", text)
    out[name] = (match.group(1) if match else text).rstrip(".;")
  return out


@functools.cache
def hyperparameters_of(factory: Callable) -> tuple[Hyperparameter, ...]:
  """The hyper-parameters of `factory`: its parameters but `cell` and
  `routing`, in signature order, each with its docstring entry."""
  entries = _docstring_entries(factory)
  out = []
  for name, parameter in inspect.signature(factory).parameters.items():
    if name in NOT_HYPERPARAMETERS:
      continue
    required = parameter.default is inspect.Parameter.empty
    out.append(
      Hyperparameter(
        name,
        entries.get(name, str(parameter.annotation)),
        required,
        None if required else parameter.default,
      )
    )
  return tuple(out)


def dims(cell, input_size: int) -> tuple[int, int, int, int]:
  """`(P, K, S, n)` of a Lemma-1 cell's influence, `P = input_size + n +
  1` (the rows of `W`), for the cost formulas."""
  n = cell.hidden_size
  return input_size + n + 1, cell.num_gates, cell.num_state_rows, n


class Cost(NamedTuple):
  """An estimator's cost per example and step.

  Attributes:
    time: the time, in the paper's Table 1 form (`'r n^3'`).
    memory: the memory, likewise (`'r n^2'`).
    exponents: `(time, memory)` exponents of `n` at a fixed rank, what a
      measurement over sizes should show.
    tangent_floats: `(cell, input_size, **hparams) -> int`, the floats its
      tangent holds per example (its design's promise).
    gemm_flops: `(cell, input_size, **hparams) -> float`, the FLOPs per
      example of its unavoidable matrix products (a roofline floor; the
      element-wise work, the cell and the optimiser left out).
  """

  time: str
  memory: str
  exponents: tuple[int, int]
  tangent_floats: Callable[..., int]
  gemm_flops: Callable[..., float]


class EstimatorSpec(NamedTuple):
  """One registry name, described once.

  Attributes:
    name: the registry name (`make`'s, `Estimator.name`).
    label: the legend's label, a format string of the hyper-parameters
      (`'{rank}-OK'`, `'SnAp-{order}'`, `'KF-RTRL'`); `label_for` fills it.
    lemma1: `factory(cell, *, routing, **hparams)` for a Lemma-1 `Cell`;
      its signature gives `hyperparameters`.
    cost: its `Cost` (on a Lemma-1 cell).
    lru: `factory(cell)` for an `LRU`, None where none serves it.
    custom: `factory(cell, **custom_hyperparameters)` for a `CustomCell`,
      None where none serves it.
  """

  name: str
  label: str
  lemma1: Callable[..., Estimator]
  cost: Cost
  lru: Callable[..., Estimator] | None = None
  custom: Callable[..., Estimator] | None = None

  @property
  def hyperparameters(self) -> tuple[Hyperparameter, ...]:
    """What `lemma1` takes, from its signature."""
    return hyperparameters_of(self.lemma1)

  @property
  def custom_hyperparameters(self) -> tuple[Hyperparameter, ...]:
    """What `custom` takes, from its signature (() without one)."""
    return () if self.custom is None else hyperparameters_of(self.custom)

  @property
  def factories(self) -> tuple[Callable[..., Estimator], ...]:
    """Its distinct factories: Lemma-1, then LRU, then `CustomCell`."""
    found = (self.lemma1, self.lru, self.custom)
    return tuple(dict.fromkeys(f for f in found if f is not None))

  def label_for(self, **hparams) -> str:
    """The label with `hparams` filled in (`'8-OK'`)."""
    return self.label.format(**hparams)


__all__ = [
  "Cost",
  "EstimatorSpec",
  "Hyperparameter",
  "dims",
  "hyperparameters_of",
]
