"""The API pages: which names of a module are public, and the directive that
documents them.

A module's public names are its `__all__` or, where it has none, the names
its source defines at top level (`def`, `class`, assignments) that do not
start with an underscore (less local names of other libraries' objects,
such as `Array = jax.Array`). The public modules are `rtrl`, `rls` and the
`rtrl.tasks` modules, and every module that a public module's `__all__`
names; under a package without `__all__` (`rtrl.tasks`), every submodule
whose name does not start with an underscore.

`.. public-api:: rtrl.cells` writes the module's docstring, a summary table
of its public names (linked) and each name's documentation from its docstring (a
name that another public module defines and lists is linked to there, not
documented twice). Used by the page template `_templates/api_module.rst`;
`tests/test_docs_api.py` uses `public_modules` and `public_names`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import types

# The packages whose public modules get API pages.
ROOT_MODULES = ("rtrl", "rls", "rtrl.tasks")


def defined_names(module: types.ModuleType) -> list[str]:
  """Names that `module`'s source binds at top level, in source order."""
  source = inspect.getsource(module)
  names = []
  for node in ast.parse(source).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.append(node.name)
    elif isinstance(node, ast.Assign):
      names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
      names.append(node.target.id)
  return list(dict.fromkeys(names))


def is_foreign(value) -> bool:
  """A class, function or typing alias that another library defined."""
  if not (
    inspect.isclass(value) or callable(value) or hasattr(value, "__origin__")
  ):
    return False
  home = getattr(value, "__module__", None) or ""
  return home.split(".")[0] not in ("rtrl", "rls")


def public_names(module: types.ModuleType) -> list[str]:
  """`module.__all__`, or the non-underscore names its source defines, but
  for local names of other libraries' objects (`Array = jax.Array`)."""
  if hasattr(module, "__all__"):
    return list(module.__all__)
  names = [n for n in defined_names(module) if not n.startswith("_")]
  return [n for n in names if not is_foreign(getattr(module, n))]


def public_modules() -> list[str]:
  """Every public module's name, parents before children."""
  found: list[str] = []
  pending = list(ROOT_MODULES)
  while pending:
    name = pending.pop(0)
    if name in found:
      continue
    found.append(name)
    module = importlib.import_module(name)
    for attr in public_names(module):
      value = getattr(module, attr)
      if inspect.ismodule(value):
        pending.append(value.__name__)
    pending += public_submodules(module)
  return found


def public_submodules(module: types.ModuleType) -> list[str]:
  """A package without `__all__`: its submodules not named `_...`."""
  if not hasattr(module, "__path__") or hasattr(module, "__all__"):
    return []
  infos = pkgutil.iter_modules(module.__path__)
  names = sorted(i.name for i in infos if not i.name.startswith("_"))
  return [f"{module.__name__}.{name}" for name in names]


def home_of(value, public: set[str]) -> str | None:
  """The public module that defines `value` and lists it, if any: the
  module itself or, for a private file of a public package
  (`rtrl.online.trainer`), the nearest public package above it."""
  module = getattr(value, "__module__", None)
  name = getattr(value, "__name__", None)
  if module is None or name is None:
    return None
  parts = module.split(".")
  homes = [".".join(parts[:end]) for end in range(len(parts), 0, -1)]
  home = next((h for h in homes if h in public), None)
  if home is None or name not in public_names(importlib.import_module(home)):
    return None
  return f"{home}.{name}"


def first_sentence(doc: str) -> str:
  """The first sentence of `doc`'s first paragraph (all of it if none
  ends inside it)."""
  paragraph = " ".join(doc.strip().split("\n\n")[0].split())
  # A sentence ends at a period before a capital letter (not "eq. (3)").
  for match in re.finditer(r"\.(?=\s+[A-Z]|$)", paragraph):
    head = paragraph[: match.end()]
    balanced = head.count("`") % 2 == 0 and head.count("(") == head.count(")")
    if balanced and not head.endswith((" e.g.", " i.e.", " al.")):
      return head
  return paragraph


def is_documented_object(value) -> bool:
  """Whether `value` is a module, or a class or function of this project
  (which carries a docstring), rather than a constant or an alias of
  another library's object such as `Params = dict`."""
  if inspect.ismodule(value):
    return True
  if not (inspect.isclass(value) or callable(value)):
    return False
  home = getattr(value, "__module__", None) or ""
  return home.split(".")[0] in ("rtrl", "rls")


def summary_row(value, target: str) -> list[str]:
  """One row of a page's summary table: a link to `target`, a summary."""
  if inspect.ismodule(value):
    role, summary = "py:mod", first_sentence(inspect.getdoc(value) or "")
  elif is_documented_object(value):
    role, summary = "py:obj", first_sentence(inspect.getdoc(value) or "")
  elif inspect.isclass(value):  # an alias
    role, summary = (
      "py:data",
      f"alias of ``{value.__module__}.{value.__qualname__}``",
    )
  else:  # a constant: its value, when short
    role, text = "py:data", repr(value)
    summary = f"``= {text}``" if len(text) <= 40 else ""
  return [f"   * - :{role}:`~{target}`", f"     - {summary}"]


def page_lines(module_name: str) -> list[str]:
  """The reStructuredText of one module's API page (below its title)."""
  module = importlib.import_module(module_name)
  public = set(public_modules())
  submodules, summary, entries = [], [], []
  for name in public_names(module):
    value = getattr(module, name)
    target = f"{module_name}.{name}"
    if inspect.ismodule(value):
      submodules += summary_row(value, value.__name__)
      continue
    home = home_of(value, public)
    if home is not None and home != target:
      summary += summary_row(value, home)  # documented on its home page
      continue
    summary += summary_row(value, target)
    if not is_documented_object(value):
      entries += [f".. autodata:: {target}", ""]
    elif inspect.isclass(value):
      entries += [f".. autoclass:: {target}", ""]
    else:
      entries += [f".. autofunction:: {target}", ""]
  for child in public_submodules(module):
    submodules += summary_row(importlib.import_module(child), child)
  lines = [f".. automodule:: {module_name}", "   :no-members:", ""]
  for title, rows in (("Modules", submodules), ("Summary", summary)):
    if rows:
      lines += [f".. rubric:: {title}", "", ".. list-table::", ""]
      lines += rows + [""]
  return lines + entries


def setup(app):
  """Registers the `public-api` directive."""
  from docutils.statemachine import StringList
  from sphinx.util.docutils import SphinxDirective
  from sphinx.util.parsing import nested_parse_to_nodes

  class PublicApi(SphinxDirective):
    """`.. public-api:: module`: the module's docstring and public names."""

    required_arguments = 1

    def run(self):
      lines = page_lines(self.arguments[0])
      source = f"<public-api {self.arguments[0]}>"
      content = StringList(lines, source=source)
      return nested_parse_to_nodes(self.state, content)

  app.add_directive("public-api", PublicApi)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
