"""Reproduction targets: one function per figure or table of the papers.

`TARGETS` maps a name (`ok_fig1`, ...) to `fn(scale, workdir) -> Result`;
`scripts/reproduce.py` runs them. The OK paper's targets live in
`ok_paper.py`; the RLS paper's, when present, in `rls_paper.py`.
"""

from __future__ import annotations

import importlib

from experiments.reproduce import common

_MODULES = ("ok_paper", "rls_paper")


def targets() -> dict:
  """Every target of every paper module present, by name."""
  found = {}
  for name in _MODULES:
    try:
      module = importlib.import_module(f"experiments.reproduce.{name}")
    except ModuleNotFoundError as e:
      if e.name != f"experiments.reproduce.{name}":
        raise
      continue
    found.update({t: (module, fn) for t, fn in module.TARGETS.items()})
  return found


def describe(fn) -> str:
  return " ".join((fn.__doc__ or "").split())


__all__ = ["common", "targets", "describe"]
