"""What `python -m experiments.NAME --help` prints, and the one-line errors
for a config the command line cannot build.

A field's help is its comment in the config file: the comment on the line
that sets it (`config.rank = 8  # ...`, or a keyword `rank=8,  # ...` of a
call into `configs/common.py`), else the comment block above it in its
paragraph. Fields set in `configs/common.py` take the comments there unless
the config file comments them itself.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import io
import os
import textwrap
import tokenize
from typing import Any

import ml_collections

from experiments.loop import config_files


@dataclasses.dataclass(frozen=True)
class FieldDoc:
  """A field's comments: `note` on its own line(s), `block` the comment block
  above it in its paragraph (`block_id` tells blocks apart)."""

  note: str = ""
  block: str = ""
  block_id: tuple[str, int] | None = None

  @property
  def text(self) -> str:
    """The field's help: its own note, else its paragraph's comment."""
    return self.note or self.block


def _comment_lines(source: str) -> dict[int, str]:
  """Line number -> the text of the comment on it."""
  tokens = tokenize.generate_tokens(io.StringIO(source).readline)
  return {
    t.start[0]: t.string.lstrip("#").strip()
    for t in tokens
    if t.type == tokenize.COMMENT
  }


def _block_above(lines: list[str], comments, lineno: int, through_code: bool):
  """The comment block above `lineno` (1-based) before a blank line, as
  (text, first line); `through_code`: past code lines of the paragraph."""
  i = lineno - 1
  while i >= 1 and lines[i - 1].strip():
    if lines[i - 1].lstrip().startswith("#"):
      end = i
      while i >= 1 and lines[i - 1].lstrip().startswith("#"):
        i -= 1
      text = " ".join(comments[j] for j in range(i + 1, end + 1))
      return text, i + 1
    if not through_code:
      return "", None
    i -= 1
  return "", None


def _is_name(node: ast.AST, name: str) -> bool:
  return isinstance(node, ast.Name) and node.id == name


def _sites(tree: ast.AST, shared_calls: bool):
  """(field, first line, last line, is_keyword) of each `config.FIELD = ...`
  and, with `shared_calls`, each keyword of a `common.*(...)` call."""
  for node in ast.walk(tree):
    if isinstance(node, ast.Assign):
      for target in node.targets:
        if isinstance(target, ast.Attribute) and _is_name(
          target.value, "config"
        ):
          yield target.attr, node.lineno, node.end_lineno, False
    elif shared_calls and _shared_call(node):
      for keyword in node.keywords:  # type: ignore[attr-defined]
        # A keyword on the call's own line has no comment of its own.
        if keyword.arg and keyword.lineno != node.lineno:
          yield keyword.arg, keyword.lineno, keyword.value.end_lineno, True


def _shared_call(node: ast.AST) -> str | None:
  """NAME of a `common.NAME(...)` call."""
  if (
    isinstance(node, ast.Call)
    and isinstance(node.func, ast.Attribute)
    and _is_name(node.func.value, "common")
  ):
    return node.func.attr
  return None


def _docs(path: str, source: str, sites) -> dict[str, FieldDoc]:
  """Field -> its comments at `sites` of the file `path` (the first site
  that has any)."""
  lines = source.splitlines()
  comments = _comment_lines(source)
  docs: dict[str, FieldDoc] = {}
  for field, first, last, keyword in sorted(sites, key=lambda s: s[1]):
    if docs.get(field, FieldDoc()).text:
      continue
    note = next(
      (comments[n] for n in range(first, last + 1) if n in comments), ""
    )
    block, start = _block_above(lines, comments, first, not keyword)
    if keyword and block:  # A comment right above a keyword is its own.
      note, block, start = f"{block} {note}".strip(), "", None
    docs[field] = FieldDoc(note, block, (path, start) if start else None)
  return docs


def _read(path: str) -> tuple[str, ast.Module]:
  with open(path, encoding="utf-8") as f:
    source = f.read()
  return source, ast.parse(source)


def _shared_docs(path: str, called: list[str]) -> dict[str, FieldDoc]:
  """Field -> its comments in the functions `called` of the shared config
  module `path`, and in the functions those call."""
  source, tree = _read(path)
  functions = {
    node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)
  }
  docs: dict[str, FieldDoc] = {}
  seen: set[str] = set()
  pending = list(called)
  while pending:
    name = pending.pop(0)
    if name in seen or name not in functions:
      continue
    seen.add(name)
    body = functions[name]
    for field, doc in _docs(path, source, _sites(body, False)).items():
      docs.setdefault(field, doc)
    pending += [
      n.func.id
      for n in ast.walk(body)
      if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
  return docs


def field_docs(path: str) -> dict[str, FieldDoc]:
  """Field -> its help for the config file at `path`: its own comments, then
  those of the `configs/common.py` functions it calls."""
  source, tree = _read(path)
  called = [name for node in ast.walk(tree) if (name := _shared_call(node))]
  shared = os.path.join(os.path.dirname(path), "common.py")
  docs = _shared_docs(shared, called) if os.path.isfile(shared) else {}
  for field, doc in _docs(path, source, _sites(tree, True)).items():
    if doc.note or not docs.get(field, FieldDoc()).text:
      docs[field] = doc
  return docs


def _keys(config: ml_collections.ConfigDict) -> list[str]:
  """The fields in the order the config file sets them (a ConfigDict
  iterates sorted; its `_fields` keeps that order)."""
  return list(getattr(config, "_fields", config))


def flat_fields(config: ml_collections.ConfigDict, prefix: str = ""):
  """(dotted name, value) of every field, in the config file's order."""
  for key in _keys(config):
    value = config[key]
    if isinstance(value, ml_collections.ConfigDict):
      yield prefix + key, value
      yield from flat_fields(value, f"{prefix}{key}.")
    else:
      yield prefix + key, value


def split_config_arg(arg: str) -> tuple[str, str]:
  """`configs/NAME.py:PRESET` -> (path, preset)."""
  path, _, preset = arg.partition(":")
  return path, preset


def load(arg: str) -> tuple[Any, ml_collections.ConfigDict]:
  """The config module and the config `--config=arg` names.

  Raises:
    ValueError: no such file, or a preset it does not take (one line).
  """
  path, preset = split_config_arg(arg)
  if not os.path.isfile(path):
    raise ValueError(f"no config file {path!r} (from --config={arg})")
  module = config_files.load_module(path)
  config = module.get_config(preset) if preset else module.get_config()
  return module, config


def presets_line(module: Any, path: str) -> str:
  """The presets `--config=PATH:PRESET` takes."""
  presets = tuple(getattr(module, "PRESETS", ()))
  if not presets:
    return f"Presets: none (--config={path})."
  line = f"Presets (--config={path}:PRESET): {', '.join(presets)}"
  modifiers = tuple(getattr(module, "MODIFIERS", ()))
  if modifiers:
    line += f"; each optionally followed by ,{' or ,'.join(modifiers)}"
  return line + "."


def _wrap(text: str, indent: str) -> list[str]:
  return textwrap.wrap(
    text, 79, initial_indent=indent, subsequent_indent=indent
  )


def fields_text(config: ml_collections.ConfigDict, path: str) -> list[str]:
  """Each field as `name = default  # its comment`, under the comment block
  of its paragraph, in the config's order."""
  docs = field_docs(path)
  out: list[str] = []
  shown_blocks = set()
  for name, value in flat_fields(config):
    doc = docs.get(name.split(".")[0], FieldDoc())
    if doc.block_id and doc.block_id not in shown_blocks and "." not in name:
      out.append("")
      out.extend(_wrap(doc.block, "  # "))
      shown_blocks.add(doc.block_id)
    if isinstance(value, ml_collections.ConfigDict):
      continue
    line = f"    {name} = {value!r}"
    note = doc.note if "." not in name else ""
    if note and len(line) + len(note) + 4 <= 79:
      out.append(f"{line}  # {note}")
    else:
      out.append(line)
      out.extend(_wrap(note, "        # ") if note else [])
  return out


def help_text(experiment: str, arg: str) -> str:
  """The whole `--help` of `python -m experiments.<experiment>`, with the
  defaults of `--config=arg`."""
  module, config = load(arg)
  path, preset = split_config_arg(arg)
  usage = (
    f"usage: python -m experiments.{experiment} --config={path}[:PRESET] "
    "--workdir=DIR [--config.FIELD=VALUE ...]"
  )
  parts = [usage, "", textwrap.dedent(module.__doc__ or "").strip(), ""]
  parts += textwrap.wrap(presets_line(module, path), 79)
  shown = f"{path}:{preset}" if preset else f"{path} (its default)"
  parts += ["", f"Fields at their values in {shown}; set any"]
  parts.append("with --config.FIELD=VALUE (a nested one: --config.A.B=VALUE):")
  parts += fields_text(config, path)
  parts += [
    "",
    "Other flags:",
    "  --workdir=DIR  the run directory (config.json, metrics.jsonl,",
    "    checkpoints); a rerun with the same DIR resumes. Required.",
    "  --helpfull     every flag absl and JAX define.",
  ]
  return "\n".join(parts) + "\n"


def _override_names(argv: list[str]) -> list[str]:
  """The dotted field of each `--config.FIELD[=VALUE]` (or `--noconfig.`)."""
  names = []
  for arg in argv:
    flag = arg.lstrip("-").split("=", 1)[0]
    if arg.startswith("-") and flag.startswith(("config.", "noconfig.")):
      names.append(flag.split(".", 1)[1])
  return names


def unknown_override(
  config: ml_collections.ConfigDict, path: str, argv: list[str]
) -> str | None:
  """One line naming the first `--config.FIELD` that `config` lacks and the
  nearest field it has; None when every override names a field."""
  known = [name for name, _ in flat_fields(config)]
  for name in _override_names(argv):
    field = name.split("[", 1)[0]  # `--config.mesh_shape[0]=2`
    if field in known:
      continue
    close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
    hint = f"; did you mean --config.{close[0]}?" if close else ""
    return f"{path} has no field {field!r} (--config.{name}){hint}"
  return None
