"""How a target runs (`Mode`) and the one gate every program of every
target passes (`visit`): train it, read it, measure it for the plan, or
only list it for a launcher. Targets see these through `common`.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import os
import types
from typing import Any, NamedTuple

from experiments.loop import config_files
from experiments.reproduce import plan


@dataclasses.dataclass
class Program:
  """One program of a target: one compiled run that a launcher can start on
  its own (a curve: all its seeds and learning rates in one program; one
  gradient-cosine run; one (task, method) of the suite). Every launcher, the
  plan and `--status` see the same list (`programs.py`).

  Attributes:
    label: the target's name for it (a curve's label).
    experiment: `experiments.<experiment>` runs it.
    config: its full config (an `ml_collections.ConfigDict`).
    path: the folder it writes (its workdir), or its one result file.
    done: it had finished when the target went through it.
  """

  label: str
  experiment: str
  config: Any
  path: str
  done: bool

  @property
  def reads(self) -> str:
    """The workdir of another program this one starts from (a trained
    network's checkpoint), or ''."""
    checkpoint_dir = config_files.field_or(self.config, "checkpoint_dir", "")
    return str(checkpoint_dir or "")


# What a program does when its target goes through it (`visit`).
TRAIN = "train"  # train it if not finished, then read it
READ = "read"  # read what it wrote so far; never train
SKIP = "skip"  # nothing: its results are empty, as in plan mode


class Mode(NamedTuple):
  """How a target runs: an argument of every target, passed down to each of
  its curves.

  Attributes:
    overrides: fields set in every curve's config that has them
      (`scripts/reproduce.py --set FIELD=VALUE`; tests shrink targets).
    plans: None to train. A list to plan (`scripts/reproduce.py --plan`):
      each program is timed by a short run instead of trained, and its
      `plan.ProgramPlan` appended here.
    only: when not empty, train only the curves whose label contains one of
      these strings (`scripts/reproduce.py --only mnist`); every other
      curve is read from its workdir as far as it ran, or left empty as in
      plan mode, so a target's figures and tables show what exists.
    programs: when a list, every program the target goes through is
      appended to it (`Program`), whatever the mode.
    listing: go through the programs without training any (but `train`)
      and write no figure or table, as in plan mode (the launchers).
    train: with `listing`, the path of the one program to train
      (`scripts/reproduce.py --program KEY`, what a job runs).
    collect: train nothing; build the figures and tables from what the
      programs wrote (`scripts/reproduce.py --collect`).
  """

  overrides: Mapping[str, Any] = types.MappingProxyType({})
  plans: list[plan.ProgramPlan] | None = None
  only: tuple[str, ...] = ()
  programs: list[Program] | None = None
  listing: bool = False
  train: str = ""
  collect: bool = False

  @property
  def planning(self) -> bool:
    """Nothing is trained for the target's figures: it writes none."""
    return self.plans is not None or self.listing


RUN = Mode()  # Train every curve, no overrides.


def planning(overrides: Mapping[str, Any] | None = None) -> Mode:
  """A fresh plan mode (an empty `plans` list), with `overrides`."""
  return Mode(types.MappingProxyType(dict(overrides or {})), [], programs=[])


def listing(
  overrides: Mapping[str, Any] | None = None, train: str = ""
) -> Mode:
  """Goes through the programs (into `programs`), training only the one at
  path `train` (none if '')."""
  return Mode(
    types.MappingProxyType(dict(overrides or {})),
    programs=[],
    listing=True,
    train=os.path.abspath(train) if train else "",
  )


def collecting(overrides: Mapping[str, Any] | None = None) -> Mode:
  """Builds the figures from what exists; `programs` says what is missing."""
  return Mode(
    types.MappingProxyType(dict(overrides or {})), programs=[], collect=True
  )


def visit(mode: Mode, program: Program) -> str:
  """Every program of every target passes here once, before it runs; says
  what its caller does with it: `TRAIN`, `READ` or `SKIP`. In plan mode the
  program is measured here (`plan.measure`)."""
  if mode.programs is not None:
    mode.programs.append(program)
  if mode.plans is not None:
    mode.plans.append(
      plan.measure(program.label, program.experiment, program.config)
    )
    return SKIP
  if mode.listing:
    chosen = os.path.abspath(program.path) == mode.train
    return TRAIN if mode.train and chosen else SKIP
  return READ if mode.collect else TRAIN
