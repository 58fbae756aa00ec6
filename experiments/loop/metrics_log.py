"""`metrics.jsonl`: one record per logged step, each step once and in order.

Format: one JSON object per line, strict JSON (RFC 8259, what `jq`,
JavaScript and every JSON library read). A non-finite float is written as
the string `"NaN"`, `"Infinity"` or `"-Infinity"` (the spellings `float()`
parses); `read_metrics` turns those strings back into floats. Every record
has an integer `step`, strictly increasing down the file.

Writing: `MetricsLog.append` writes a whole line with one `write` to the
file opened for appending. A write that fails (a full disk) is cut back to
the file's previous length, so no partial line remains, and raises
`WorkdirWriteError`. `sync` fsyncs: the run loop calls it before each
checkpoint, so a checkpoint is never on disk without the records before it.

Reading: `scan` returns the file's records. A last line cut short (a crash
during an append) is dropped and reported in `LogScan.cut_line`. Any other
bad line (not JSON, not an object with an integer `step`, or a step not
after the one before it) raises `MetricsLogError` naming the file, the line
and what is wrong: the run loop never writes such a line, so the file was
edited, or two runs wrote into it.

Resume: `MetricsLog.rewrite` atomically replaces the file with the given
lines (the run loop keeps those up to the checkpoint it resumes from).
"""

from __future__ import annotations

from collections.abc import Mapping
import contextlib
import json
import math
import os
from typing import Any, NamedTuple

from experiments.loop import writes
from experiments.loop.errors import MetricsLogError

METRICS_FILE = "metrics.jsonl"
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _strict(value: Any) -> Any:
  if isinstance(value, float) and not math.isfinite(value):
    return (
      "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    )
  if isinstance(value, dict):
    return {k: _strict(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_strict(v) for v in value]
  return value


def encode(record: Mapping[str, Any]) -> str:
  """One record as a line of strict JSON (no newline)."""
  return json.dumps(_strict(writes.to_jsonable(record)), allow_nan=False)


def decode(value: Any) -> Any:
  """A parsed record with `"NaN"`, `"Infinity"`, `"-Infinity"` as floats."""
  if isinstance(value, str):
    return NONFINITE.get(value, value)
  if isinstance(value, dict):
    return {k: decode(v) for k, v in value.items()}
  if isinstance(value, list):
    return [decode(v) for v in value]
  return value


class LogScan(NamedTuple):
  """What `scan` found.

  Attributes:
    lines: the intact records' lines, in order (no newline).
    steps: their steps.
    cut_line: the 1-based number of a last line cut short (dropped), or
      None.
  """

  lines: list[str]
  steps: list[int]
  cut_line: int | None = None


def _parse(path: str, number: int, line: str, previous: int | None) -> int:
  """The step of one line.

  Raises:
    MetricsLogError: naming `path:number` and the problem.
  """
  where = f"{path}:{number}"
  try:
    record = json.loads(line)
  except json.JSONDecodeError as e:
    raise MetricsLogError(
      f"{where} is not JSON ({e.msg}): {line[:80]!r}"
    ) from e
  step = record.get("step") if isinstance(record, dict) else None
  if isinstance(step, bool) or not isinstance(step, int):
    raise MetricsLogError(f"{where} has no integer 'step': {line[:80]!r}")
  if previous is not None and step <= previous:
    raise MetricsLogError(
      f"{where} has step {step} after step {previous}: the log holds "
      "records of two runs (two processes, or an earlier version that "
      "appended a rerun)"
    )
  return step


def scan(path: str) -> LogScan:
  """The records of the log at `path` (see the module docstring); an empty
  scan if there is no file.

  Raises:
    MetricsLogError: a bad line other than a cut-off last one.
  """
  if not os.path.exists(path):
    return LogScan([], [])
  with open(path, "rb") as f:
    raw = f.read()
  # A last line without its newline was cut short by a crash.
  text = raw.decode("utf-8", errors="replace")
  numbered = [(i + 1, line.strip()) for i, line in enumerate(text.split("\n"))]
  complete = text.endswith("\n") or not text
  tail = None if complete else numbered.pop()
  lines, steps = [], []
  for number, line in numbered:
    if not line:
      continue
    steps.append(_parse(path, number, line, steps[-1] if steps else None))
    lines.append(line)
  cut_line = None
  if tail is not None and tail[1]:
    try:  # A complete record whose newline was lost is kept.
      steps.append(_parse(path, *tail, steps[-1] if steps else None))
      lines.append(tail[1])
    except MetricsLogError:
      cut_line = tail[0]
  return LogScan(lines, steps, cut_line)


def read_metrics(workdir: str) -> list[dict]:
  """All records of `workdir/metrics.jsonl`, in order, non-finite values as
  floats (a cut-off last line is left out).

  Raises:
    MetricsLogError: a bad line (file and line number named).
  """
  found = scan(os.path.join(workdir, METRICS_FILE))
  return [decode(json.loads(line)) for line in found.lines]


class MetricsLog:
  """Appends records to `workdir/metrics.jsonl` (see the module docstring)."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, METRICS_FILE)

  def append(self, record: Mapping[str, Any]) -> None:
    """Appends one line.

    Raises:
      WorkdirWriteError: the write failed; the file is as it was before.
    """
    line = (encode(record) + "\n").encode()
    try:
      fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
      raise writes.write_error(e, self.path, len(line)) from e
    try:
      size = os.fstat(fd).st_size
      try:
        writes.write_all(fd, line)
      except OSError as e:
        with contextlib.suppress(OSError):  # No partial line stays behind.
          os.ftruncate(fd, size)
        raise writes.write_error(e, self.path, len(line)) from e
    finally:
      os.close(fd)

  write = append  # The name of `workdir.MetricsWriter`'s method.

  def rewrite(self, lines: list[str]) -> None:
    """Replaces the file with `lines` (each a record, no newline),
    atomically."""
    writes.write_atomic(self.path, "".join(f"{x}\n" for x in lines).encode())

  def sync(self) -> None:
    """Flushes the log to disk (before a checkpoint is written)."""
    if not os.path.exists(self.path):
      return
    fd = os.open(self.path, os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)

  def truncate_after(self, step: int) -> None:
    """Keeps the records up to `step` (a resumed run rewrites the rest)."""
    found = scan(self.path)
    kept = [x for x, s in zip(found.lines, found.steps) if s <= step]
    if (
      kept != found.lines
      or found.cut_line is not None
      or not _ends_line(self.path)
    ):
      self.rewrite(kept)


def _ends_line(path: str) -> bool:
  """Whether the file at `path` is empty, absent or ends with a newline (so
  that an append starts a line)."""
  if not os.path.exists(path) or not os.path.getsize(path):
    return True
  with open(path, "rb") as f:
    f.seek(-1, os.SEEK_END)
    return f.read(1) == b"\n"
