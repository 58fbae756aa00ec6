"""`scripts/` is a package whose modules import each other by name (`python
-m scripts.NAME`): none edits `sys.path`, none reaches a private module of
another or of the project's packages (a third-party library's private
module, as the kfac-jax compatibility patch needs, is that library's
business)."""

import ast
import pathlib

SCRIPTS = pathlib.Path(__file__).resolve().parents[2] / "scripts"
PROJECT_PACKAGES = ("scripts", "rtrl", "rls", "experiments")


def test_no_script_edits_sys_path():
  offenders = [
    f"{path.relative_to(SCRIPTS.parent)}:{node.lineno}"
    for path in SCRIPTS.rglob("*.py")
    for node in ast.walk(ast.parse(path.read_text()))
    if isinstance(node, ast.Attribute)
    and node.attr == "path"
    and isinstance(node.value, ast.Name)
    and node.value.id == "sys"
  ]
  assert not offenders, offenders


def test_scripts_import_no_private_modules():
  offenders = []
  for path in SCRIPTS.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      names = []
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module]
      offenders += [
        f"{path.name}: {n}"
        for n in names
        if n.split(".")[0] in PROJECT_PACKAGES
        and any(
          part.startswith("_") and not part.startswith("__")
          for part in n.split(".")
        )
      ]
  assert not offenders, offenders
