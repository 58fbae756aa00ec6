"""No library function longer than a screen: every function and method in
`rtrl/` and `rls/` has at most 80 lines of code (its docstring not counted,
nested functions counted in the function that holds them), as the
developers' guide asks."""

import ast

from helpers import REPO_ROOT

MAX_LINES = 80


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
  """Lines from `def` to the function's last line, less its docstring's."""
  lines = node.end_lineno - node.lineno + 1
  first = node.body[0]
  if (
    isinstance(first, ast.Expr)
    and isinstance(first.value, ast.Constant)
    and isinstance(first.value.value, str)
  ):
    lines -= first.end_lineno - first.lineno + 1
  return lines


def long_functions(source: str, path: str) -> list[str]:
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      lines = code_lines(node)
      if lines > MAX_LINES:
        found.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
  return found


def test_the_count_skips_the_docstring():
  body = "\n".join(f"  x{i} = {i}" for i in range(MAX_LINES))
  source = f'def f():\n  """Doc.\n\n  More.\n  """\n{body}\n'
  assert long_functions(source, "f.py") == ["f.py:1 f (81 lines)"]
  short = f'def f():\n  """Doc."""\n{body[: body.rindex(chr(10))]}\n'
  assert long_functions(short, "f.py") == []


def test_no_library_function_is_over_80_lines():
  found = []
  for package in ("rtrl", "rls"):
    for path in sorted((REPO_ROOT / package).rglob("*.py")):
      relative = str(path.relative_to(REPO_ROOT))
      found += long_functions(path.read_text(), relative)
  assert not found, "split these functions:\n" + "\n".join(found)
