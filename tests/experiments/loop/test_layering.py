"""The run loop (`experiments/loop/`) depends on no algorithm library: the
RLS experiments run on it without `rtrl`, and `rtrl` without `rls`."""

import ast
import pathlib

from experiments.loop import checks
from rtrl import linalg

LOOP = pathlib.Path(__file__).resolve().parents[3] / "experiments" / "loop"


def imported_packages(path: pathlib.Path) -> set[str]:
  """The top-level package of every import statement in `path`."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names.update(alias.name.split(".")[0] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module.split(".")[0])
  return names


def test_loop_imports_neither_rtrl_nor_rls():
  files = sorted(LOOP.glob("*.py"))
  assert files
  offenders = {
    path.name: sorted(imported_packages(path) & {"rtrl", "rls"})
    for path in files
    if imported_packages(path) & {"rtrl", "rls"}
  }
  assert not offenders, offenders


def test_loop_matmul_precisions_are_rtrls():
  assert set(checks.MATMUL_PRECISIONS) == set(linalg.MATMUL_PRECISIONS)
