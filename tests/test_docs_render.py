"""The documentation renders as a reader sees it, offline: maths by a MathJax
that ships with the site (no script from a CDN), every module docstring as
reStructuredText (not a grey preformatted block), single backticks as code
(not italics), inline code that closes on the line it should.

The source checks always run (those that need the docs' packages skip
without them); the checks of the built pages run when `bash scripts/docs.sh`
has built `docs/_build/html`, and read its files only (no browser).
"""

from __future__ import annotations

import ast
import html.parser
import importlib
import importlib.util
import inspect
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"
MATHJAX_EXTENSION = "sphinx-mathjax-offline"
MATHJAX_SCRIPT = "_static/mathjax/tex-chtml.js"
VERBATIM_CLASS = "verbatim-docstring"  # docs/conf.py's


def _conf() -> ast.Module:
  return ast.parse((DOCS / "conf.py").read_text())


def _conf_value(name: str):
  for node in _conf().body:
    if isinstance(node, ast.Assign) and any(
      isinstance(t, ast.Name) and t.id == name for t in node.targets
    ):
      return ast.literal_eval(node.value)
  return None


def test_mathjax_ships_with_the_site():
  """MathJax comes from the build's `_static`, not from a CDN: the offline
  extension is loaded, no `mathjax_path` points at a URL, and the docs
  extra installs it."""
  assert MATHJAX_EXTENSION in _conf_value("extensions")
  assert "mathjax_path" not in (DOCS / "conf.py").read_text()
  pyproject = (ROOT / "pyproject.toml").read_text()
  docs_extra = re.search(r"\ndocs = \[(.*?)\]", pyproject, re.S)
  assert docs_extra and f'"{MATHJAX_EXTENSION}' in docs_extra[1]
  if importlib.util.find_spec(MATHJAX_EXTENSION) is None:
    pytest.skip("the docs extra is not installed here")
  package = pathlib.Path(importlib.util.find_spec(MATHJAX_EXTENSION).origin)
  assert (package.parent / "static" / "mathjax" / "tex-chtml.js").is_file()


def _public_module_docstrings():
  sys.path.insert(0, str(DOCS / "api"))
  try:
    api_pages = importlib.import_module("api_pages")
    docstrings = importlib.import_module("docstrings")
  finally:
    sys.path.remove(str(DOCS / "api"))
  for name in api_pages.public_modules():
    doc = inspect.getdoc(importlib.import_module(name)) or ""
    yield name, doc, docstrings


def test_every_module_docstring_renders_as_rst():
  """What `docs/conf.py` does to a docstring leaves every public module's
  valid reStructuredText, so no API page opens on a preformatted block
  (plain-text tables become definition lists, indented examples code)."""
  pytest.importorskip("docutils")
  problems = {}
  for name, doc, docstrings in _public_module_docstrings():
    found = docstrings.rst_problems(
      "\n".join(docstrings.as_rst(doc.split("\n")))
    )
    if found:
      problems[name] = found[0]
  assert not problems, problems


def test_docstring_tables_become_definition_lists():
  pytest.importorskip("docutils")
  sys.path.insert(0, str(DOCS / "api"))
  try:
    docstrings = importlib.import_module("docstrings")
  finally:
    sys.path.remove(str(DOCS / "api"))
  lines = [
    "Losses:",
    "",
    "  squared_error     regression,",
    "                    ½ Σ.",
    "  a, b              two names.",
    "",
    "After.",
  ]
  assert docstrings.as_rst(lines) == [
    "Losses:",
    "",
    "``squared_error``",
    "   regression,",
    "   ½ Σ.",
    "``a``, ``b``",
    "   two names.",
    "",
    "After.",
  ]
  # A hanging continuation: rst's block quote would be badly indented.
  example = ["Example:", "", "    x = f(1,", "          2)", "    y = x", ""]
  assert docstrings.as_rst(example) == [
    "Example:",
    "",
    ".. code-block:: python",
    "",
    "   x = f(1,",
    "         2)",
    "   y = x",
    "",
  ]
  valid = ["A `name`.", "", "- a list", "  continued"]
  assert docstrings.as_rst(valid) == valid


def _stray_backticks(text: str, markdown_it) -> list[str]:
  """Text runs holding a backtick: inline code that did not close (e.g. a
  line starting `+ 1` inside one, which Markdown reads as a list item)."""
  parser = markdown_it.MarkdownIt("commonmark").enable("table")
  found = []
  for token in parser.parse(text):
    for child in token.children or []:
      if child.type == "text" and "`" in child.content:
        found.append(f"line {token.map[0] + 1}: {child.content[:60]!r}")
  return found


def test_inline_code_closes_in_every_page():
  markdown_it = pytest.importorskip("markdown_it")
  pages = [ROOT / "README.md"] + [
    p for p in DOCS.rglob("*.md") if "_build" not in p.parts
  ]
  broken = {
    str(p.relative_to(ROOT)): found
    for p in pages
    if (found := _stray_backticks(p.read_text(), markdown_it))
  }
  assert not broken, broken
  assert _stray_backticks("keep `a + n\n+ 1` floats", markdown_it)


class _Page(html.parser.HTMLParser):
  """What a page loads from where, and its math and verbatim blocks."""

  def __init__(self):
    super().__init__()
    self.external: list[str] = []
    self.scripts: list[str] = []
    self.math = 0
    self.cites = 0
    self.verbatim_before_rubric = 0
    self.rubric_seen = False

  def handle_starttag(self, tag, attrs):
    attrs = dict(attrs)
    classes = (attrs.get("class") or "").split()
    source = attrs.get("src") or ""
    if tag == "link" and "stylesheet" in (attrs.get("rel") or ""):
      source = attrs.get("href") or ""
    if source and re.match(r"^(https?:)?//", source):
      self.external.append(source)
    if tag == "script" and attrs.get("src"):
      self.scripts.append(attrs["src"])
    self.math += "math" in classes
    self.cites += tag == "cite"
    self.rubric_seen |= "rubric" in classes
    if VERBATIM_CLASS in classes and not self.rubric_seen:
      self.verbatim_before_rubric += 1


def _pages():
  if not (HTML / "index.html").is_file():
    pytest.skip("the site is not built here (bash scripts/docs.sh)")
  for path in sorted(HTML.rglob("*.html")):
    if "_static" in path.parts or "_sources" in path.parts:
      continue
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    yield path, page


def test_built_pages_load_nothing_from_the_network():
  offending = {
    str(p.relative_to(HTML)): page.external
    for p, page in _pages()
    if page.external
  }
  assert not offending, offending


def test_built_maths_render_with_the_bundled_mathjax():
  pages_with_math = 0
  for path, page in _pages():
    if not page.math:
      continue
    pages_with_math += 1
    loaded = [s for s in page.scripts if s.endswith(MATHJAX_SCRIPT)]
    assert loaded, f"{path.relative_to(HTML)} has maths but no local MathJax"
    assert (path.parent / loaded[0]).resolve().is_file(), loaded[0]
  assert pages_with_math, "no page with maths: the check checked nothing"


def test_built_api_pages_show_docstrings_as_rst():
  """No module docstring as a preformatted block, no single backtick as
  italics (`<cite>`: docutils' default role, where the site's is code)."""
  pages = [(p, page) for p, page in _pages() if "api" in p.parts]
  assert pages
  verbatim = [str(p.name) for p, page in pages if page.verbatim_before_rubric]
  cites = [str(p.name) for p, page in pages if page.cites]
  assert not verbatim, verbatim
  assert not cites, cites
