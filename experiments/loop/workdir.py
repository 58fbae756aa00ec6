"""The files of a run directory besides its checkpoints: `config.json`
(checked against the saved one on resume), `metrics.jsonl`, `summary.json`,
and progress lines with an ETA (checkpoints: `checkpoints.py`).

Nothing here knows about any algorithm; `runner.py` calls these around an
experiment's jitted training chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import json
import os
import sys
import time
from typing import Any

import jax
import numpy as np

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"

# Fields that change only how long a run goes, how often it reports or where
# it reads data, never what it computes: they may differ on resume.
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
  }
)


# Fields added after runs were saved, at the value that reproduces what those
# runs computed: absent from a saved config.json and at this value now is no
# change, so runs saved before the field existed resume.
ADDED_FIELD_DEFAULTS = {
  "optimizer": "adam",
  "init_stddev": 0.0,
  "cell_clip_norm": 0.0,
  "text_layout": "standard",
  "readout": "linear",
  "stream_offsets": "even",
  "num_layers": 1,
  "head": "identity",
  "model_size": 0,
  "length_rule": "uniform",
  "output_gradient_scale": 1.0,
  "square_root": False,
  "param_init": "flax",
  "keep_partial_batch": False,
  "input_statistics": "mean",
  "input_samples": 256,
  "second_moment_direction": "eq63",
  "weight_decay": 0.0,
  "recurrence_learning_rate_factor": 1.0,
  "learning_rate_schedule": "constant",
  "warmup_updates": 0,
  "test_limit": 0,
  "shadow_every": 0,
  # Listed in every online config since configs became pure data; before,
  # an LRU in the Copy and PTB configs took the cell's ring.
  "lru_r_min": 0.0,
  "lru_r_max": 0.99,
  "muon_adam_learning_rate": 1e-3,
  "model_api": "linen",
  "recurrent_density": 1.0,
  "mask_seed": 0,
  "leak": 0.1,
  "order": 2,
}


class ConfigMismatchError(ValueError):
  """A rerun's config differs from the workdir's saved `config.json`."""


def _to_jsonable(value: Any) -> Any:
  if hasattr(value, "to_dict"):
    value = value.to_dict()
  if isinstance(value, Mapping):
    return {str(k): _to_jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_to_jsonable(v) for v in value]
  if isinstance(value, (np.generic, np.ndarray, jax.Array)):
    array = np.asarray(value)
    return array.item() if array.ndim == 0 else array.tolist()
  return value


def _fsync_dir(path: str) -> None:
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:  # Not every platform opens directories.
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def write_atomic(path: str, data: bytes) -> None:
  """Writes `data` to a temporary file, fsyncs it, renames it onto `path`
  and fsyncs the directory: a crash leaves the old file or the new one."""
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(tree, Mapping):
    out = {}
    for key, value in tree.items():
      out.update(_flatten(value, f"{prefix}{key}."))
    return out
  return {prefix[:-1]: tree}


def config_differences(
  old: Mapping, new: Mapping
) -> list[tuple[str, Any, Any]]:
  """`(field, old, new)` for every dotted field whose value differs; a field
  absent on one side shows as `'<absent>'` there (a field of
  `ADDED_FIELD_DEFAULTS` absent from `old` counts as its default)."""
  old_flat, new_flat = _flatten(old), _flatten(new)
  absent = "<absent>"
  for field, default in ADDED_FIELD_DEFAULTS.items():
    if field in new_flat:
      old_flat.setdefault(field, default)
  return [
    (k, old_flat.get(k, absent), new_flat.get(k, absent))
    for k in sorted(set(old_flat) | set(new_flat))
    if old_flat.get(k, absent) != new_flat.get(k, absent)
  ]


def prepare(
  workdir: str,
  config: Any,
  bookkeeping_fields: Iterable[str] = BOOKKEEPING_FIELDS,
  log=print,
  extra: Mapping[str, Any] | None = None,
  write: bool = True,
  allow_change: bool = False,
) -> str:
  """Creates `workdir` and writes `config.json`, after checking a saved one.

  On a rerun the saved `config.json` is compared with `config` before
  anything is written. Differences in `bookkeeping_fields` are logged and the
  new config is saved. Any other difference raises `ConfigMismatchError`
  listing each field (old and new value), leaving `config.json` untouched,
  unless `allow_change` (the experiment's `config.allow_config_change`) is
  true: then the differences are
  logged, the old file is kept as `config.previous.json`, and the new one is
  written.

  `extra` (e.g. the run grid) is saved beside the config's fields. With
  `write=False` (every process but the first of a multi-host run) the config
  is only checked.

  Returns:
    `workdir`.
  """
  new = _to_jsonable(config)
  if extra:
    new.update(_to_jsonable(extra))
  path = os.path.join(workdir, CONFIG_FILE)
  old = _read_saved_config(path)
  differences = [] if old is None else config_differences(old, new)
  essential = _check_changes(
    differences,
    set(bookkeeping_fields),
    allow_change,
    path,
    log,
  )
  if not write or (old is not None and not differences):
    return workdir
  os.makedirs(workdir, exist_ok=True)
  if essential:
    write_atomic(
      os.path.join(workdir, "config.previous.json"),
      json.dumps(old, indent=2, sort_keys=True).encode(),
    )
  write_atomic(path, json.dumps(new, indent=2, sort_keys=True).encode())
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


def _check_changes(
  differences: list[tuple[str, Any, Any]],
  bookkeeping: set[str],
  allow_change: bool,
  path: str,
  log,
) -> list[tuple[str, Any, Any]]:
  """Logs each difference; returns the essential ones (fields outside
  `bookkeeping`).

  Raises:
    ConfigMismatchError: listing the essential differences, unless
      `allow_change`.
  """
  essential = [d for d in differences if d[0] not in bookkeeping]
  if essential and not allow_change:
    lines = "\n".join(f"  {field}: {o!r} -> {n!r}" for field, o, n in essential)
    raise ConfigMismatchError(
      f"The config differs from the one saved in {path}, which this "
      f"workdir's checkpoints were made with:\n{lines}\n"
      "Use a new --workdir for a different run, or pass "
      "--config.allow_config_change=true to resume this one with the "
      "new values anyway (the old config is then kept as "
      "config.previous.json)."
    )
  for field, o, n in differences:
    kind = "bookkeeping" if field in bookkeeping else "ALLOWED change"
    log(f"Config {kind}: {field}: {o!r} -> {n!r}")
  return essential


def write_json(workdir: str, name: str, record: Mapping[str, Any]) -> str:
  path = os.path.join(workdir, name)
  write_atomic(
    path,
    (
      json.dumps(_to_jsonable(record), indent=2, sort_keys=True) + "\n"
    ).encode(),
  )
  return path


class MetricsWriter:
  """Appends one JSON object per call to `workdir/metrics.jsonl`."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, METRICS_FILE)

  def write(self, record: Mapping[str, Any]) -> None:
    with open(self.path, "a") as f:
      f.write(json.dumps(_to_jsonable(record)) + "\n")

  def truncate_after(self, step: int) -> None:
    """Drops records past `step` (a resumed run rewrites them)."""
    if not os.path.exists(self.path):
      return
    kept = [
      line
      for line in read_metrics_lines(self.path)
      if json.loads(line).get("step", -1) <= step
    ]
    write_atomic(self.path, "".join(line + "\n" for line in kept).encode())


def read_metrics_lines(path: str) -> list[str]:
  """Non-empty lines; a last line cut short by a crash is dropped."""
  with open(path) as f:
    lines = [line.strip() for line in f if line.strip()]
  if lines:
    try:
      json.loads(lines[-1])
    except json.JSONDecodeError:
      lines.pop()
  return lines


def read_metrics(workdir: str) -> list[dict]:
  """All records of `workdir/metrics.jsonl`, in order."""
  path = os.path.join(workdir, METRICS_FILE)
  if not os.path.exists(path):
    return []
  return [json.loads(line) for line in read_metrics_lines(path)]


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

  def report(self, step: int, **metrics: Any) -> float:
    """Prints one line and returns steps per second since the last report."""
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
