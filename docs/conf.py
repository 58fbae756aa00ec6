"""Sphinx configuration of the rtrl-rls documentation.

Build it with `bash scripts/docs.sh` (offline; warnings are errors); the HTML
lands in `docs/_build/html`.
"""

import inspect
import os
import sys

from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser as RstParser
from docutils.utils import new_document
from sphinx.util import logging

logger = logging.getLogger(__name__)

sys.path.insert(0, os.path.abspath(".."))
# The `public-api` directive of the API pages.
sys.path.insert(0, os.path.abspath("api"))

project = "rtrl-rls"
author = "rtrl-rls authors"
copyright = "2026, rtrl-rls authors"  # (the name Sphinx reads)
release = "0.1.0"

extensions = [
  "myst_nb",
  "sphinx.ext.autodoc",
  "sphinx.ext.autosummary",
  "sphinx.ext.napoleon",
  "sphinx.ext.mathjax",
  "sphinx_copybutton",
  "api_pages",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
exclude_patterns = [
  "_build",
  "**.ipynb_checkpoints",
  "README.md",
  "api/_templates",
]
templates_path = ["api/_templates"]
root_doc = "index"

# MyST: `$...$` maths, definition lists, `{attribute}` anchors.
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# Tutorials run at every build; a failing cell fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# API pages: one per public module, listed in api/index.md (an autosummary
# table whose stubs, written into api/generated/ at build time, hold the
# `public-api` directive of api/api_pages.py: the module's public names).
autosummary_generate = True
autosummary_generate_overwrite = True
autodoc_default_options = {"members": True}  # no base classes shown
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types are added to the arguments a docstring describes, not to all.
autodoc_typehints_description_target = "documented"
# In docstrings (reStructuredText), `name` is a cross-reference when it names
# a documented object and code otherwise (not the italics of the default).
default_role = "py:obj"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# Attributes: sections as fields of the class, not `attribute` entries that
# would repeat the NamedTuple and dataclass fields autodoc finds itself.
napoleon_use_ivar = True


def drop_type_docstrings(app, what, name, obj, options, lines):
  """A constant without a doc comment gets no text, not its type's docstring
  (autodoc falls back on `type(obj).__doc__`, e.g. dict's, for a dict), and
  an alias of another library's class (`Params = dict`) not that class's
  docstring (autodoc says "alias of" itself)."""
  del app, name, options
  if what != "data":
    return
  text = "\n".join(lines).strip()
  foreign = [type(obj)]
  if inspect.isclass(obj) and not obj.__module__.startswith(("rtrl", "rls")):
    foreign.append(obj)
  if text and any(text == (inspect.getdoc(t) or "").strip() for t in foreign):
    lines[:] = []


def rst_problems(text: str, env) -> list[str]:
  """docutils' warnings and errors on `text` as reStructuredText (a trial
  parse; Sphinx's roles read `env`)."""
  settings = get_default_settings(RstParser)
  settings.report_level = settings.halt_level = 5  # collect, do not print
  settings.env = env
  document = new_document("<docstring>", settings)
  found: list[str] = []
  document.reporter.attach_observer(
    lambda m: found.append(m.astext()) if m["level"] >= 2 else None
  )
  RstParser().parse(text, document)
  return [m for m in found if "Unknown interpreted text role" not in m]


def verbatim_unless_rst(app, what, name, obj, options, lines):
  """Shows a docstring that is not valid reStructuredText as written, in a
  preformatted block: some are plain-text tables, and a docstring is read
  in a terminal as often as on these pages. `sphinx-build -v` lists them."""
  del what, obj, options
  problems = rst_problems("\n".join(lines), app.env)
  if problems:
    logger.verbose("docstring of %s shown verbatim: %s", name, problems[0])
    lines[:] = ["::", ""] + [f"  {line}" for line in lines] + [""]


def skip_foreign_members(app, what, name, obj, skip, options):
  """Hides what a class holds but did not write: NamedTuple fields'
  generated "Alias for field number i" (the class docstring describes the
  fields) and other libraries' functions held as attributes (a dataclass
  field defaulting to `jnp.tanh` would show tanh's docstring)."""
  del app, name, options
  if what != "class":
    return skip
  if (getattr(obj, "__doc__", None) or "").startswith("Alias for field"):
    return True
  home = getattr(obj, "__module__", None) or ""
  if callable(obj) and not home.startswith(("rtrl", "rls")):
    return True
  return skip


def setup(app):
  app.connect("autodoc-skip-member", skip_foreign_members)
  app.connect("autodoc-process-docstring", drop_type_docstrings)
  # After napoleon (priority 500) has turned Google sections into fields.
  app.connect("autodoc-process-docstring", verbatim_unless_rst, priority=600)


html_theme = "sphinx_book_theme"
html_title = "rtrl-rls"
html_theme_options = {
  "show_toc_level": 2,
  "home_page_in_toc": True,
}
