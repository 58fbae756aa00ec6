#!/usr/bin/env python
"""Reproduces one figure or table of the papers with one command.

  python scripts/reproduce.py --list
  python scripts/reproduce.py ok_fig1 --scale small --workdir runs/reproduce
  python scripts/reproduce.py ok_fig2_table2 --scale paper --workdir runs/paper
  python scripts/reproduce.py ok_fig1 --scale paper --plan   # cost, no training
  python scripts/reproduce.py ok_fig4 --scale paper --devices 0,1,2,3,4
  python scripts/reproduce.py ok_fig4 --scale paper --launcher slurm --workdir /shared/runs
  python scripts/reproduce.py ok_fig4 --scale paper --status --workdir /shared/runs
  python scripts/reproduce.py --help   # every option, with its default

`--scale paper` uses the paper's settings (sizes, batches, step counts, 5
seeds, the learning-rate grid with best-of selection); `--scale small` a
documented reduction that finishes in about 30 minutes on a 2-core CPU. A
target is a list of programs (each curve trains all its seeds and learning
rates as one compiled program); a rerun resumes unfinished programs and
skips finished ones. Results: `WORKDIR/TARGET/{figure.png, table.md,
table.json}` and one workdir per program. `--plan` trains nothing: it times
a short run of each program at its real sizes and prints (and writes to
`WORKDIR/TARGET/plan_SCALE.md`) their run-steps, memory, expected time, and
the target's wall time on one device and on N
(`experiments/reproduce/plan.py`). The programs run one after another in
this process, as parallel processes one per device (`--devices`), or as
SLURM jobs through submitit (`--launcher slurm`,
docs/howto/slurm_cluster.md); `--status` and `--collect` watch and
assemble them.

This file is a launcher: it runs `python -m experiments.reproduce` with the
same arguments in this process (`os.execve`, so that a scheduler's SIGTERM
reaches the run), with the checkout on `PYTHONPATH` so that it works from
any directory. The command line itself: `experiments/reproduce/cli.py`.
"""

import os
import sys


def main() -> None:
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  paths = [root, os.environ.get("PYTHONPATH", "")]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
  argv = [sys.executable, "-m", "experiments.reproduce", *sys.argv[1:]]
  os.execve(sys.executable, argv, env)


if __name__ == "__main__":
  main()
