"""Docstrings as the API pages show them: reStructuredText, with the two
plain-text forms that read well in a terminal made into their rst twins.

A docstring is written for `help()` as much as for these pages, so some
hold a plain-text table (a name, two spaces, its description, continued
under the description) or an indented code example after an ordinary
paragraph; rst reads both as badly indented text. `as_rst` turns such a
table into a definition list (each name as code) and such an example into
a code block, and leaves every other line alone. `rst_problems` lists what
docutils still finds wrong; `docs/conf.py` shows a docstring that keeps a
problem as written, in a preformatted block (`tests/test_docs_render.py`
fails when a module's docstring would be shown so).
"""

from __future__ import annotations

import ast
import re
import textwrap

from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser as RstParser
from docutils.parsers.rst import roles
from docutils.utils import new_document

# A table's first column: names, comma-separated (`kf, kf_avg, ok`).
_NAMES = r"[\w.\[\]*-]+(?:,\s*[\w.\[\]*-]+)*"
_ROW = re.compile(rf"^(?P<names>{_NAMES})(?:\s{{2,}}(?P<text>\S.*))?$")
# A line that opens rst structure an indented block may belong to.
_STRUCTURE = re.compile(r"^(\.\. |[-*+] |:\w|\d+[.)] |#)")


def rst_problems(text: str, env=None) -> list[str]:
  """docutils' warnings and errors on `text` as reStructuredText (a trial
  parse; Sphinx's roles read `env`). Keeps the caller's default role:
  docutils' parser drops it after every document it parses, which would
  turn every later `name` of the page being built into italics."""
  settings = get_default_settings(RstParser)
  settings.report_level = settings.halt_level = 5  # collect, do not print
  settings.env = env
  document = new_document("<docstring>", settings)
  found: list[str] = []
  document.reporter.attach_observer(
    lambda m: found.append(m.astext()) if m["level"] >= 2 else None
  )
  default_role = roles._roles.get("")  # pylint: disable=protected-access
  try:
    RstParser().parse(text, document)
  finally:
    if default_role is not None:
      roles._roles[""] = default_role  # pylint: disable=protected-access
  return [m for m in found if "Unknown interpreted text role" not in m]


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def _table(block: list[str]) -> list[str] | None:
  """The definition list of a plain-text table, or None if `block` is not
  one (each row a line at the block's indent: names, two spaces, text;
  deeper lines continue the text)."""
  margin = min(_indent(line) for line in block if line.strip())
  rows: list[tuple[str, list[str]]] = []
  for line in block:
    if not line.strip():
      continue
    if _indent(line) > margin and rows:
      rows[-1][1].append(line.strip())
      continue
    match = _ROW.match(line.strip())
    if _indent(line) != margin or match is None:
      return None
    rows.append((match["names"], [match["text"]] if match["text"] else []))
  if len(rows) < 2:
    return None
  out: list[str] = []
  for names, text in rows:
    out.append(", ".join(f"``{n.strip()}``" for n in names.split(",")))
    out += [f"   {line}" for line in text] or ["   \\"]
  return out


def _code(block: list[str]) -> list[str]:
  """`block` as a code block: Python's if it parses as Python, else
  literal."""
  code = textwrap.dedent("\n".join(block)).strip("\n")
  try:
    ast.parse(code)
    head = [".. code-block:: python", ""]
  except SyntaxError:
    head = ["::", ""]
  return head + [f"   {line}" if line else "" for line in code.split("\n")]


def _blocks(lines: list[str]):
  """(start, end) of each indented block that follows a blank line under
  an ordinary paragraph (not a directive, list, field or `::` block)."""
  i = 0
  while i < len(lines):
    line = lines[i]
    opens = (
      line.strip() and _indent(line) > 0 and i >= 2 and not lines[i - 1].strip()
    )
    if not opens:
      i += 1
      continue
    above = next(
      (lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), ""
    )
    end = i
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end])):
      end += 1
    while end > i and not lines[end - 1].strip():
      end -= 1
    plain = _indent(above) == 0 and not _STRUCTURE.match(above)
    if plain and not above.rstrip().endswith("::"):
      yield i, end
    i = max(end, i + 1)


def as_rst(lines: list[str], env=None) -> list[str]:
  """`lines` (a docstring) with its plain-text tables as definition lists
  and its indented code examples as code blocks; unchanged when they are
  valid reStructuredText already (`env`: Sphinx's, while it builds)."""
  if not rst_problems("\n".join(lines), env):
    return list(lines)
  out: list[str] = []
  done = 0
  for start, end in _blocks(lines):
    block = lines[start:end]
    out += lines[done:start]
    out += _table(block) or _code(block)
    done = end
  return out + lines[done:]
