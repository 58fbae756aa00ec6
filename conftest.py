"""Runs the Python examples of README.md and docs/**/*.md as tests (sybil).

Every ```python fence of README.md and of the Markdown pages under docs/ is
one test; a file's fences run in order in one namespace (a later block sees
an earlier block's names). Fences of other languages (bash, text, ...) are
not run. To keep a Python fence out of the tests, put the comment

    <!-- skip: next -->

on the line before it (GitHub and Sphinx render nothing for it); hidden
set-up code goes in `<!-- invisible-code-block: python ... -->`. Sybil's
documentation of its Markdown parsers lists the other directives.

The MyST tutorials (docs/tutorials/*.md, `{code-cell}` notebooks) are not
collected here: myst-nb executes them when the documentation is built.
"""

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser
from sybil.parsers.markdown import SkipParser

# Relative to this file; `Path.match` matches from the right, and a `*` is
# one path component.
MARKDOWN_EXAMPLES = ("README.md", "docs/*.md", "docs/*/*.md", "docs/*/*/*.md")
NOT_EXAMPLES = ("docs/tutorials/*.md", "docs/_build/*")

pytest_collect_file = Sybil(
  parsers=[PythonCodeBlockParser(), SkipParser()],
  patterns=MARKDOWN_EXAMPLES,
  excludes=NOT_EXAMPLES,
).pytest()


try:
  from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist absent: tests run in one process anyway.
  LoadScopeScheduling = None

if LoadScopeScheduling is not None:

  class MarkdownFileScheduling(LoadScopeScheduling):
    """xdist's `load`, except that one Markdown file's examples go to one
    worker, in order (they share the file's namespace)."""

    def _split_scope(self, nodeid: str) -> str:
      path = nodeid.split("::", 1)[0]
      return path if path.endswith(".md") else nodeid

  # tryfirst: xdist's own hook would answer `load` first. (`xdist_group`
  # marks with `--dist loadgroup` do not group under pytest 9.2 with
  # xdist 3.8: pytest-dev/pytest-xdist#1386.)
  @pytest.hookimpl(tryfirst=True, optionalhook=True)
  def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "load":
      return MarkdownFileScheduling(config, log)
    return None
