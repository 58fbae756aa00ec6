"""The files of a run directory besides its checkpoints and its log:
`config.json` (checked against the saved one on resume), `summary.json`,
and progress lines with an ETA (checkpoints: `checkpoints.py`; the log:
`metrics_log.py`; the lock: `lock.py`; how each file is written:
`writes.py`).

Nothing here knows about any algorithm; `runner.py` calls these around an
experiment's jitted training chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import json
import os
import sys
import time
from typing import Any, NamedTuple

import numpy as np

from experiments.loop import metrics_log
from experiments.loop import writes
from experiments.loop.errors import RunError

CONFIG_FILE = "config.json"
METRICS_FILE = metrics_log.METRICS_FILE
SUMMARY_FILE = "summary.json"

# Fields that change only how long a run goes, how often it reports, where
# it reads data or when it gives up, never what it computes: they may differ
# on resume.
BOOKKEEPING_FIELDS = frozenset(
  {
    "num_steps",
    "epochs",
    "log_every",
    "eval_every",
    "checkpoint_every",
    "data_dir",
    "allow_config_change",
    "keep_checkpoints",
    "num_devices",
    "mesh_shape",
    "distributed",
    "coordinator_address",
    "num_processes",
    "process_id",
    # How the hardware runs the GEMMs (rtrl.linalg), like the device fields;
    # also lets runs saved before the field existed resume.
    "matmul_precision",
    # When a failing run stops (health.py).
    "max_consecutive_skips",
    "divergence_factor",
  }
)


class ConfigMismatchError(RunError, ValueError):
  """A rerun's config differs from the workdir's saved `config.json` (or
  from the config its checkpoint was made with)."""


# Kept for callers that imported these from here.
write_atomic = writes.write_atomic
_to_jsonable = writes.to_jsonable
_fsync_dir = writes.fsync_dir
MetricsWriter = metrics_log.MetricsLog
read_metrics = metrics_log.read_metrics


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(tree, Mapping):
    out = {}
    for key, value in tree.items():
      out.update(_flatten(value, f"{prefix}{key}."))
    return out
  return {prefix[:-1]: tree}


def config_differences(
  old: Mapping,
  new: Mapping,
  resume_defaults: Mapping[str, Any] | None = None,
) -> list[tuple[str, Any, Any]]:
  """`(field, old, new)` for every dotted field whose value differs; a field
  absent on one side shows as `'<absent>'` there.

  `resume_defaults` (an experiment's `Experiment.resume_defaults`) maps
  fields added after runs were saved to the value that reproduces what
  those runs computed: such a field absent from `old` counts as that value.
  """
  old_flat, new_flat = _flatten(old), _flatten(new)
  absent = "<absent>"
  for field, default in (resume_defaults or {}).items():
    if field in new_flat:
      old_flat.setdefault(field, default)
  return [
    (k, old_flat.get(k, absent), new_flat.get(k, absent))
    for k in sorted(set(old_flat) | set(new_flat))
    if old_flat.get(k, absent) != new_flat.get(k, absent)
  ]


class ConfigCheck(NamedTuple):
  """What `check_config` found: the config to save (`new`, JSON types),
  the saved one (`old`, None on a first run) and their differences."""

  new: dict
  old: dict | None
  differences: list[tuple[str, Any, Any]]


def check_config(
  workdir: str,
  config: Any,
  *,
  resume_defaults: Mapping[str, Any] | None = None,
  bookkeeping_fields: Iterable[str] = BOOKKEEPING_FIELDS,
  allow_change: bool = False,
  extra: Mapping[str, Any] | None = None,
  log=print,
) -> ConfigCheck:
  """Compares `config` (plus `extra`, e.g. the run grid) with the workdir's
  saved `config.json`, writing nothing.

  Differences in `bookkeeping_fields` are logged. Any other difference
  raises `ConfigMismatchError` listing each field (old and new value),
  unless `allow_change` (`config.allow_config_change`): then it is logged.

  Raises:
    ConfigMismatchError: see above; or `config.json` is not JSON.
  """
  new = writes.to_jsonable(config)
  if extra:
    new.update(writes.to_jsonable(extra))
  path = os.path.join(workdir, CONFIG_FILE)
  old = _read_saved_config(path)
  differences = (
    [] if old is None else config_differences(old, new, resume_defaults)
  )
  check_differences(
    differences, set(bookkeeping_fields), allow_change, path, log
  )
  return ConfigCheck(new, old, differences)


def save_config(
  workdir: str,
  checked: ConfigCheck,
  bookkeeping_fields: Iterable[str] = BOOKKEEPING_FIELDS,
) -> None:
  """Writes `config.json` from `check_config`'s result (once the run's
  checkpoint has loaded, so that a change that does not fit it leaves the
  saved config as it was); an essential change keeps the old file as
  `config.previous.json`.

  Raises:
    WorkdirWriteError: the disk is full or read-only.
  """
  if checked.old is not None and not checked.differences:
    return
  writes.make_dirs(workdir)
  bookkeeping = set(bookkeeping_fields)
  if any(d[0] not in bookkeeping for d in checked.differences):
    write_json(workdir, "config.previous.json", checked.old or {})
  write_json(workdir, CONFIG_FILE, checked.new)


def prepare(
  workdir: str,
  config: Any,
  bookkeeping_fields: Iterable[str] = BOOKKEEPING_FIELDS,
  log=print,
  extra: Mapping[str, Any] | None = None,
  write: bool = True,
  allow_change: bool = False,
  resume_defaults: Mapping[str, Any] | None = None,
) -> str:
  """`check_config`, then (with `write`) `save_config`: for callers that
  have no checkpoint to load in between. Returns `workdir`."""
  checked = check_config(
    workdir,
    config,
    resume_defaults=resume_defaults,
    bookkeeping_fields=bookkeeping_fields,
    allow_change=allow_change,
    extra=extra,
    log=log,
  )
  if write:
    save_config(workdir, checked, bookkeeping_fields)
  return workdir


def _read_saved_config(path: str) -> dict | None:
  """The saved `config.json`, or None if there is none yet."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise ConfigMismatchError(
        f"{path} is not valid JSON ({e}); move it away or use a new --workdir"
      ) from e


def check_differences(
  differences: list[tuple[str, Any, Any]],
  bookkeeping: set[str],
  allow_change: bool,
  path: str,
  log=None,
  checkpoint: bool = False,
) -> list[tuple[str, Any, Any]]:
  """Logs each difference (when `log`); returns the essential ones (fields
  outside `bookkeeping`). `path` is the saved config: `config.json`, or a
  checkpoint (`checkpoint`), which carries the config it was made with.

  Raises:
    ConfigMismatchError: listing the essential differences, unless
      `allow_change`.
  """
  essential = [d for d in differences if d[0] not in bookkeeping]
  if essential and not allow_change:
    lines = "\n".join(f"  {field}: {o!r} -> {n!r}" for field, o, n in essential)
    saved = (
      f"the one {path} was made with"
      if checkpoint
      else f"the one saved in {path}, which this workdir's checkpoints "
      "were made with"
    )
    raise ConfigMismatchError(
      f"The config differs from {saved}:\n{lines}\n"
      "Use a new --workdir for a different run, or pass "
      "--config.allow_config_change=true to resume this one with the "
      "new values anyway (the old config is then kept as "
      "config.previous.json)."
    )
  for field, o, n in differences if log else ():
    kind = "bookkeeping" if field in bookkeeping else "ALLOWED change"
    log(f"Config {kind}: {field}: {o!r} -> {n!r}")
  return essential


def write_json(workdir: str, name: str, record: Mapping[str, Any]) -> str:
  """Writes `record` as `workdir/name`, atomically (`writes.write_atomic`)."""
  path = os.path.join(workdir, name)
  data = json.dumps(writes.to_jsonable(record), indent=2, sort_keys=True)
  writes.write_atomic(path, (data + "\n").encode())
  return path


class Progress:
  """Prints `label step/total | metrics | rate | ETA` lines to stdout.

  The rate is measured over the interval since the previous report, so the
  first interval's compilation does not skew later rates and ETAs.
  """

  def __init__(
    self, total: int, start: int = 0, label: str = "step", stream=None
  ):
    self.total = total
    self.start = start
    self.label = label
    self.stream = stream or sys.stdout
    self._last_step = start
    self._last_time = time.perf_counter()

  def report(self, step: int, note: str = "", **metrics: Any) -> float:
    """Prints one line (ending with `note`, if any: e.g. a divergence) and
    returns steps per second since the last report."""
    now = time.perf_counter()
    elapsed = now - self._last_time
    rate = (step - self._last_step) / elapsed if elapsed > 0 else float("nan")
    self._last_step, self._last_time = step, now
    remaining = (self.total - step) / rate if rate > 0 else float("nan")
    parts = [f"{self.label} {step}/{self.total}"]
    for key, value in metrics.items():
      parts.append(
        f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}"
      )
    parts.append(
      f"{rate:.3g} {self.label}s/s"
      if rate >= 0.1
      else f"{1 / rate:.3g} s/{self.label}"
    )
    parts.append(f"ETA {_format_seconds(remaining)}")
    if note:
      parts.append(note)
    print(" | ".join(parts), file=self.stream, flush=True)
    return rate


def _format_seconds(seconds: float) -> str:
  if not np.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  if hours:
    return f"{hours}h{minutes:02d}m{secs:02d}s"
  return f"{minutes}m{secs:02d}s"
