"""A target's programs: which there are, what each reads, and the command
that runs one alone. Decided once, here, for `--plan`, every launcher,
`--status` and `--collect`.

A target goes through its programs in listing mode (`common.listing`):
nothing trains, and each program (`common.Program`: a curve, a
gradient-cosine run, a suite (task, method)) is recorded as the target
meets it. A program is named by its KEY, the path of its output relative to
`--workdir` (`ok_fig10_11/trained-RHN-32`), and run alone by
`scripts/reproduce.py TARGET --scale S --workdir W [--set ...] --program
KEY`: that command goes through the target the same way and trains only
that program, into the same workdir as the local launcher would. A program
that reads another's output (a cosine run on a trained network's
checkpoint, `config.checkpoint_dir`) starts after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import os
import sys

from experiments.reproduce import common

REPRODUCE_SCRIPT = os.path.join(
  os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
  "scripts",
  "reproduce.py",
)


@dataclasses.dataclass(frozen=True)
class Target:
  """One target at one scale, workdir and set of overrides: what every
  launcher of it shares."""

  name: str
  fn: Callable[..., common.Result]
  scale: str
  workdir: str  # absolute
  sets: tuple[str, ...] = ()  # the --set FIELD=VALUE strings, as typed
  overrides: tuple[tuple[str, object], ...] = ()  # the same, parsed

  @property
  def folder(self) -> str:
    """`WORKDIR/TARGET`: its figures, tables and launch records."""
    return os.path.join(self.workdir, self.name)

  def programs(self, train: str = "") -> list[common.Program]:
    """Goes through the target in listing mode; trains only the program
    at path `train` (none if '')."""
    mode = common.listing(dict(self.overrides), train)
    self.fn(self.scale, self.workdir, mode)
    return list(mode.programs or [])

  def key(self, program: common.Program) -> str:
    return os.path.relpath(os.path.abspath(program.path), self.workdir)

  def command(self, key: str = "", *extra: str) -> list[str]:
    """The command line that runs program `key` alone (or, without a key,
    the whole target with `extra` options)."""
    argv = [sys.executable, REPRODUCE_SCRIPT, self.name, "--scale", self.scale]
    argv += ["--workdir", self.workdir]
    for item in self.sets:
      argv += ["--set", item]
    if key:
      argv += ["--program", key]
    return argv + list(extra)


def reads(programs: Sequence[common.Program]) -> list[list[int]]:
  """For each program, the indices of the programs whose output it reads
  (it starts after them)."""
  by_path = {os.path.abspath(p.path): i for i, p in enumerate(programs)}
  return [
    [by_path[os.path.abspath(p.reads)]]
    if p.reads and os.path.abspath(p.reads) in by_path
    else []
    for p in programs
  ]


def stages(programs: Sequence[common.Program]) -> list[list[int]]:
  """Indices of the programs in waves: each wave's programs read only
  programs of earlier waves (the SLURM launcher submits a job array per
  wave)."""
  needs = reads(programs)
  level: dict[int, int] = {}

  def depth(i: int, seen: tuple[int, ...] = ()) -> int:
    if i in seen:
      raise ValueError(f"programs read each other: {programs[i].label}")
    if i not in level:
      level[i] = 1 + max((depth(j, (*seen, i)) for j in needs[i]), default=-1)
    return level[i]

  waves: dict[int, list[int]] = {}
  for i in range(len(programs)):
    waves.setdefault(depth(i), []).append(i)
  return [waves[k] for k in sorted(waves)]


def check_distinct(target: Target, programs: Sequence[common.Program]) -> None:
  """Two programs writing one path would overwrite each other's output."""
  seen: dict[str, str] = {}
  for program in programs:
    key = target.key(program)
    if key in seen:
      raise ValueError(
        f"{target.name}: programs {seen[key]!r} and {program.label!r} "
        f"both write {key}"
      )
    seen[key] = program.label


class UnknownProgram(ValueError):
  """`--program KEY` names no program of the target."""


def find(
  target: Target, programs: Sequence[common.Program], key: str
) -> common.Program:
  """The program named `key` (its output's path relative to the workdir).

  Raises:
    UnknownProgram: no program has that key (the known keys are listed).
  """
  for program in programs:
    if target.key(program) == os.path.normpath(key):
      return program
  known = "\n  ".join(target.key(p) for p in programs)
  raise UnknownProgram(
    f"--program {key!r}: {target.name} --scale {target.scale} has no such "
    f"program; its programs:\n  {known}"
  )
