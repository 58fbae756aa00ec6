"""The project's scripts: benchmarks and tools run from a checkout, each as
a module from the repository root, e.g.

  python -m scripts.bench_rtrl --sizes 16,32 --ranks 8
  python -m scripts.bench_seeds --experiment copy_task --preset official

(`scripts/reproduce.py`, the papers' figures, also runs as a file:
`python scripts/reproduce.py --list`). What several benchmarks share is in
`scripts/benchlib/`. Not part of the installed library.
"""
