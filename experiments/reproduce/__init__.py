"""Reproduction targets: one function per figure or table of the papers.

`targets()` maps a name (`ok_fig1`, ...) to
`fn(scale, workdir, mode=common.RUN) -> Result`; `scripts/reproduce.py` runs
them. `mode` (`common.Mode`, `modes.py`) carries the `--set` overrides and
says whether the target trains, plans (`--plan`: its programs measured into
`mode.plans`), lists its programs for a launcher or collects; every program
passes `common.visit` once. The OK paper's figures are in
`ok_paper.py` (the cosine figures' shared runs in `cosine_figures.py`, the
Copy and char-PTB curves, scores and tables in `online_curves.py`), the
official code's logs against our official presets in `ok_official.py`,
SnAp-1, RFLO, UORO, KF-RTRL, KF-AVG, OK and TBPTT side by side (gradient
cosine, Copy, char-PTB) in `compare_online.py`, the online LRU stacks
beside them in `compare_lru.py`, every method on the task suite with
an exact-RTRL shadow in `compare_suite.py`, the RLS paper's figures in
`rls_paper.py`, RTRRL's Table 2 and every estimator in an online RL
agent in `rtrrl_paper.py`; what every target shares (curves, learning-rate selection,
plots, tables) in `common.py`, and `--plan`'s measurements in `plan.py`.

Running them: `cli.py` (the command line), `programs.py` (a target's
programs, what each reads, the command that runs one alone),
`launch_local.py` (`--devices`: one process per device), `launch_slurm.py`
with `slurm_checks.py` (`--launcher slurm`: job arrays through submitit),
`records.py` (which job runs which program), `status.py` (`--status`) and
`collect.py` (`--collect`). A new target is a function in one of the target
modules, added to its `TARGETS`.
"""

from __future__ import annotations

from experiments.reproduce import common
from experiments.reproduce import compare_lru
from experiments.reproduce import compare_online
from experiments.reproduce import compare_suite
from experiments.reproduce import ok_official
from experiments.reproduce import ok_paper
from experiments.reproduce import rls_paper
from experiments.reproduce import rtrrl_paper

_MODULES = (
  ok_paper,
  ok_official,
  compare_online,
  compare_lru,
  compare_suite,
  rls_paper,
  rtrrl_paper,
)


def targets() -> dict:
  """Every target of every paper module, by name: `(module, fn)`."""
  return {
    name: (module, fn)
    for module in _MODULES
    for name, fn in module.TARGETS.items()
  }


def describe(fn) -> str:
  return " ".join((fn.__doc__ or "").split())


__all__ = ["common", "targets", "describe"]
