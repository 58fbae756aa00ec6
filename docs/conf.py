"""Sphinx configuration of the rtrl-rls documentation.

Build it with `bash scripts/docs.sh` (offline; warnings are errors); the HTML
lands in `docs/_build/html`.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "rtrl-rls"
author = "rtrl-rls authors"
copyright = "2026, rtrl-rls authors"  # noqa: A001  (Sphinx's name)
release = "0.1.0"

extensions = [
  "myst_nb",
  "sphinx.ext.autodoc",
  "sphinx.ext.autosummary",
  "sphinx.ext.napoleon",
  "sphinx.ext.mathjax",
  "sphinx_copybutton",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "README.md"]
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

# API pages: generated from the docstrings (Google style).
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = "sphinx_book_theme"
html_title = "rtrl-rls"
html_theme_options = {
  "show_toc_level": 2,
  "home_page_in_toc": True,
}
