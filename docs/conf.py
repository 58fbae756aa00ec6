"""Sphinx configuration of the rtrl-rls documentation.

Build it with `bash scripts/docs.sh` (offline; warnings are errors); the HTML
lands in `docs/_build/html`.
"""

import inspect
import os
import sys

from sphinx.util import logging

logger = logging.getLogger(__name__)

sys.path.insert(0, os.path.abspath(".."))
# The `public-api` directive of the API pages, and their docstrings' rst.
sys.path.insert(0, os.path.abspath("api"))

from docstrings import as_rst  # noqa: E402
from docstrings import rst_problems  # noqa: E402

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
  # MathJax from the build's own _static/mathjax, not a CDN: the site's
  # maths render offline (tests/test_docs_render.py checks the pages).
  "sphinx-mathjax-offline",
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


# The class of a docstring shown as written (tests/test_docs_render.py).
VERBATIM_CLASS = "verbatim-docstring"


def verbatim_unless_rst(app, what, name, obj, options, lines):
  """Makes a docstring's plain-text tables and indented examples rst
  (`docstrings.as_rst`); one that still is not valid reStructuredText is
  shown as written, in a preformatted block (`sphinx-build -v` lists them),
  but a module's fails the build: its page would open on a grey block."""
  del obj, options
  lines[:] = as_rst(lines, app.env)
  problems = rst_problems("\n".join(lines), app.env)
  if problems:
    log = logger.warning if what == "module" else logger.verbose
    log("docstring of %s shown verbatim: %s", name, problems[0])
    head = [".. code-block:: text", f"   :class: {VERBATIM_CLASS}", ""]
    lines[:] = head + [f"   {line}" for line in lines] + [""]


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
