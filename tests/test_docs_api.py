"""The API reference covers the public API: every public name of `rtrl` and
`rls` has a docstring, and every public module has a page (a line of the
autosummary table in docs/api/*.md, from which its page is generated).

What is public is defined once, in docs/api/api_pages.py (a module's
`__all__`, or the names its source defines that do not start with an
underscore; the modules reachable through `__all__` from `rtrl`, `rls` and
`rtrl.tasks`), which the documentation build uses too.
"""

import dataclasses
import importlib
import importlib.util
import inspect
import re

from helpers import REPO_ROOT
import pytest

API_DIR = REPO_ROOT / "docs" / "api"


def load_api_pages():
  spec = importlib.util.spec_from_file_location(
    "api_pages", API_DIR / "api_pages.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


api_pages = load_api_pages()
PUBLIC_MODULES = api_pages.public_modules()

# Public classes and functions allowed without a docstring: none (the test
# fails while a listed name has one, so that the set can only shrink).
UNDOCUMENTED_TODAY: set[str] = set()


def has_docstring(value) -> bool:
  """A docstring written for `value`, not the one Python generates for a
  NamedTuple or a dataclass (`Name(field, ...)`)."""
  doc = (value.__doc__ or "").strip()
  if inspect.isclass(value) and hasattr(value, "_fields"):
    return doc != f"{value.__name__}({', '.join(value._fields)})"
  if dataclasses.is_dataclass(value):
    return not (doc.startswith(f"{value.__name__}(") and "\n" not in doc)
  return bool(doc)


def documented_pages() -> set[str]:
  """Module names listed in the autosummary tables of docs/api/*.md."""
  listed = set()
  for page in API_DIR.glob("*.md"):
    for block in re.findall(
      r"^\.\. autosummary::\n((?:[ \t]+.*\n|\n)*)", page.read_text(), re.M
    ):
      for line in block.splitlines():
        entry = line.strip()
        if entry and not entry.startswith(":"):
          listed.add(entry)
  return listed


def test_the_public_modules_include_the_documented_packages():
  # The discovery itself: if it found nothing, the tests below could not fail.
  for name in ("rtrl", "rtrl.cells", "rtrl.estimators", "rtrl.tasks.ptb"):
    assert name in PUBLIC_MODULES
  assert "rls" in PUBLIC_MODULES
  assert not [m for m in PUBLIC_MODULES if "._" in m or m.startswith("_")]


def test_every_public_module_has_an_api_page():
  missing = sorted(set(PUBLIC_MODULES) - documented_pages())
  assert not missing, (
    f"public modules without an API page: {missing}; add each as a line of "
    "the autosummary table in docs/api/index.md"
  )


def test_every_api_page_is_a_public_module():
  extra = sorted(documented_pages() - set(PUBLIC_MODULES))
  assert not extra, f"API pages of modules that are not public: {extra}"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring(module_name):
  module = importlib.import_module(module_name)
  assert inspect.getdoc(module), f"module {module_name} has no docstring"
  names = api_pages.public_names(module)
  assert len(set(names)) == len(names), f"{module_name}: repeated names"
  undocumented, documented_but_listed = [], []
  for name in names:
    assert hasattr(module, name), f"{module_name}.__all__ lists {name!r}"
    value = getattr(module, name)
    if inspect.ismodule(value):
      continue  # a public module: checked as one
    if not api_pages.is_documented_object(value):
      continue  # a constant or an alias: its value is what the page shows
    full_name = f"{value.__module__}.{value.__qualname__}"  # where defined
    has_doc = has_docstring(value)
    if not has_doc and full_name not in UNDOCUMENTED_TODAY:
      undocumented.append(name)
    if has_doc and full_name in UNDOCUMENTED_TODAY:
      documented_but_listed.append(full_name)
  assert not undocumented, f"{module_name}: no docstring on {undocumented}"
  assert not documented_but_listed, (
    f"{documented_but_listed} have docstrings now: remove them from "
    "UNDOCUMENTED_TODAY"
  )


def test_private_names_are_not_public():
  for module_name in PUBLIC_MODULES:
    module = importlib.import_module(module_name)
    private = [n for n in api_pages.public_names(module) if n.startswith("_")]
    assert not private, f"{module_name} exports private names {private}"
