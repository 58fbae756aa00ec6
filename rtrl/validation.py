"""Argument checks that name the argument, written once for the library and
the experiments (which pass `config.FIELD` as the name)."""

from __future__ import annotations

from typing import Any


def positive_int(name: str, value: Any) -> int:
  """`value` if it is an int >= 1 (not a bool), else a ValueError naming it."""
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  return value


def nonnegative_int(name: str, value: Any, zero_means: str = "") -> int:
  """`value` if it is an int >= 0 (not a bool), else a ValueError naming it."""
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    meaning = f" (0: {zero_means})" if zero_means else ""
    raise ValueError(f"{name} must be an integer >= 0{meaning}, got {value!r}")
  return value


def positive_number(name: str, value: Any) -> float:
  """`value` if it is a real number > 0 (inf included: the run-safety tests
  drive a run to NaN with an infinite learning rate), else a ValueError
  naming it."""
  if (
    isinstance(value, bool)
    or not isinstance(value, (int, float))
    or not value > 0
  ):
    raise ValueError(f"{name} must be a positive number, got {value!r}")
  return value
