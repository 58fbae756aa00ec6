"""Which config fields an experiment's code reads, found statically.

From `experiments/NAME.py`, follows every reference to a top-level function
or class of a module under `experiments/` (calls, and functions passed as
values), and collects in the code it reaches:

* `config.FIELD` / `<anything>.config.FIELD` attribute reads,
* `config["FIELD"]`,
* the field names given to `experiments.loop.checks` with `config`
  (`checks.positive_ints(config, "rank")`),
* `swept_hparams=("FIELD", ...)`: `FIELD` and its list `FIELDs`,

but not through a call given `saved_config` (another run's config, read
back from its workdir); and the fields the code itself stores
(`config.FIELD = ...`: derived fields of an effective config, which the
config file need not list). Reads of ConfigDict methods (`to_dict`,
`update`, ...) are not fields.
"""

from __future__ import annotations

import ast
import pathlib
from typing import NamedTuple

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The name of a run's config read back from its workdir (another run's):
# calls given it are not followed.
SAVED_CONFIG = "saved_config"
CONFIG_METHODS = frozenset(
  {"to_dict", "update", "get", "items", "keys", "values", "lock", "unlock"}
)


class Unit(NamedTuple):
  module: str  # dotted, e.g. "experiments.online.setup"
  name: str  # a top-level def, or "<module>" for the module's own statements


def _is_config(node: ast.AST) -> bool:
  return (isinstance(node, ast.Name) and node.id == "config") or (
    isinstance(node, ast.Attribute) and node.attr == "config"
  )


def _is_checks_call(node: ast.Call, mod: _Module) -> bool:
  """A call of `experiments.loop.checks`, whose string arguments name
  config fields."""
  func = node.func
  return (
    isinstance(func, ast.Attribute)
    and isinstance(func.value, ast.Name)
    and mod.modules.get(func.value.id) == "experiments.loop.checks"
  )


def _module_path(module: str) -> pathlib.Path | None:
  path = REPO_ROOT.joinpath(*module.split("."))
  if path.with_suffix(".py").is_file():
    return path.with_suffix(".py")
  if (path / "__init__.py").is_file():
    return path / "__init__.py"
  return None


class _Module:
  """One parsed module: its top-level defs and what its names refer to."""

  def __init__(self, module: str):
    self.name = module
    self.tree = ast.parse(_module_path(module).read_text())
    self.defs: dict[str, ast.AST] = {}
    for node in self.tree.body:
      if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
      ):
        self.defs[node.name] = node
      elif (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
      ):
        # A named value (`MNIST = Task(...)`): reached where it is used.
        self.defs[node.targets[0].id] = node
    self.modules: dict[str, str] = {}  # alias -> experiments module
    self.functions: dict[str, Unit] = {}  # alias -> def in another module
    for node in ast.walk(self.tree):
      if isinstance(node, ast.ImportFrom) and node.module:
        if not node.module.startswith("experiments"):
          continue
        for alias in node.names:
          target = f"{node.module}.{alias.name}"
          local = alias.asname or alias.name
          if _module_path(target) is not None:
            self.modules[local] = target
          else:
            self.functions[local] = Unit(node.module, alias.name)
      elif isinstance(node, ast.Import):
        for alias in node.names:
          if alias.name.startswith("experiments") and alias.asname:
            self.modules[alias.asname] = alias.name

  def body(self, name: str) -> list[ast.AST]:
    if name == "<module>":
      return [n for n in self.tree.body if n not in self.defs.values()]
    return [self.defs[name]]


class Reads(NamedTuple):
  read: frozenset[str]
  stored: frozenset[str]
  units: frozenset[Unit]


def config_reads(main_module: str) -> Reads:
  """The config fields read and stored by the code `main_module` reaches."""
  parsed: dict[str, _Module] = {}

  def module(name: str) -> _Module:
    if name not in parsed:
      parsed[name] = _Module(name)
    return parsed[name]

  read, stored, seen = set(), set(), set()
  todo = [Unit(main_module, "<module>")]
  while todo:
    unit = todo.pop()
    if unit in seen:
      continue
    seen.add(unit)
    mod = module(unit.module)
    if unit.name != "<module>" and unit.name not in mod.defs:
      continue  # A constant or a re-export: no code.
    todo.extend(
      Unit(m, "<module>")
      for m in mod.modules.values()
      if unit.name == "<module>"
    )
    for top in mod.body(unit.name):
      # A call given another run's saved config reads that run's fields.
      skipped = {
        id(call.func)
        for call in ast.walk(top)
        if isinstance(call, ast.Call)
        and any(
          isinstance(arg, ast.Name) and arg.id == SAVED_CONFIG
          for arg in call.args
        )
      }
      for node in ast.walk(top):
        if id(node) in skipped:
          continue
        if isinstance(node, ast.Attribute) and _is_config(node.value):
          if isinstance(node.ctx, ast.Store):
            stored.add(node.attr)
          elif node.attr not in CONFIG_METHODS:
            read.add(node.attr)
        elif isinstance(node, ast.Subscript) and _is_config(node.value):
          if isinstance(node.slice, ast.Constant):
            target = stored if isinstance(node.ctx, ast.Store) else read
            target.add(node.slice.value)
        elif isinstance(node, ast.Call):
          if (
            _is_checks_call(node, mod)
            and node.args
            and _is_config(node.args[0])
          ):
            read.update(
              a.value
              for a in node.args[1:]
              if isinstance(a, ast.Constant)
              and isinstance(a.value, str)
              and a.value.isidentifier()
            )
          for keyword in node.keywords:
            value = keyword.value
            named = isinstance(value, ast.Name) and mod.defs.get(value.id)
            if isinstance(named, ast.Assign):
              value = named.value  # A module's named tuple.
            if keyword.arg == "swept_hparams" and isinstance(value, ast.Tuple):
              for element in value.elts:
                if isinstance(element, ast.Constant):
                  read.update({element.value, element.value + "s"})
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
          if node.id in mod.defs:
            todo.append(Unit(mod.name, node.id))
          elif node.id in mod.functions:
            todo.append(mod.functions[node.id])
        if (
          isinstance(node, ast.Attribute)
          and isinstance(node.value, ast.Name)
          and node.value.id in mod.modules
        ):
          todo.append(Unit(mod.modules[node.value.id], node.attr))
          todo.append(Unit(mod.modules[node.value.id], "<module>"))
  return Reads(frozenset(read), frozenset(stored), frozenset(seen))
