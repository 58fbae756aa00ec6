"""Run bookkeeping shared by every experiment: `config.json` (checked against
the saved one on resume), `metrics.jsonl`, progress lines with an ETA, and
checksummed checkpoints that a restarted run resumes from.

Nothing here knows about any algorithm; `experiments/runner.py` calls these
around an experiment's jitted training chunks.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings
from typing import Any, Iterable, Mapping

import flax.serialization
import jax
import numpy as np

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CHECKPOINT_PREFIX = "checkpoint_"
CHECKPOINT_SUFFIX = ".msgpack"
CHECKSUM_SUFFIX = ".sha256"

# Fields that change only how long a run goes, how often it reports or where
# it reads data, never what it computes: they may differ on resume.
BOOKKEEPING_FIELDS = frozenset({
    "num_steps", "epochs", "log_every", "eval_every", "checkpoint_every",
    "data_dir", "allow_config_change", "keep_checkpoints", "num_devices",
    "mesh_shape", "distributed", "coordinator_address", "num_processes",
    "process_id",
    # How the hardware runs the GEMMs (rtrl.linalg), like the device fields;
    # also lets runs saved before the field existed resume.
    "matmul_precision",
})


class ConfigMismatchError(ValueError):
  """A rerun's config differs from the workdir's saved `config.json`."""


class CheckpointError(RuntimeError):
  """No checkpoint in a workdir could be read."""


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


def config_differences(old: Mapping, new: Mapping) -> list[tuple[str, Any, Any]]:
  """`(field, old, new)` for every dotted field whose value differs; a field
  absent on one side shows as `'<absent>'` there."""
  old_flat, new_flat = _flatten(old), _flatten(new)
  absent = "<absent>"
  return [(k, old_flat.get(k, absent), new_flat.get(k, absent))
          for k in sorted(set(old_flat) | set(new_flat))
          if old_flat.get(k, absent) != new_flat.get(k, absent)]


def prepare(workdir: str, config: Any,
            bookkeeping_fields: Iterable[str] = BOOKKEEPING_FIELDS,
            log=print, extra: Mapping[str, Any] | None = None,
            write: bool = True) -> str:
  """Creates `workdir` and writes `config.json`, after checking a saved one.

  On a rerun the saved `config.json` is compared with `config` before
  anything is written. Differences in `bookkeeping_fields` are logged and the
  new config is saved. Any other difference raises `ConfigMismatchError`
  listing each field (old and new value), leaving `config.json` untouched,
  unless `config.allow_config_change` is true: then the differences are
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
  if os.path.exists(path):
    with open(path) as f:
      try:
        old = json.load(f)
      except json.JSONDecodeError as e:
        raise ConfigMismatchError(
            f"{path} is not valid JSON ({e}); move it away or use a new "
            "--workdir") from e
    differences = config_differences(old, new)
    bookkeeping = set(bookkeeping_fields)
    essential = [d for d in differences if d[0] not in bookkeeping]
    if essential and not new.get("allow_config_change", False):
      lines = "\n".join(f"  {field}: {o!r} -> {n!r}"
                        for field, o, n in essential)
      raise ConfigMismatchError(
          f"The config differs from the one saved in {path}, which this "
          f"workdir's checkpoints were made with:\n{lines}\n"
          "Use a new --workdir for a different run, or pass "
          "--config.allow_config_change=true to resume this one with the "
          "new values anyway (the old config is then kept as "
          "config.previous.json).")
    for field, o, n in differences:
      kind = "bookkeeping" if field in bookkeeping else "ALLOWED change"
      log(f"Config {kind}: {field}: {o!r} -> {n!r}")
    if not write:
      return workdir
    if essential:
      write_atomic(os.path.join(workdir, "config.previous.json"),
                   json.dumps(old, indent=2, sort_keys=True).encode())
    if not differences:
      return workdir
  if write:
    os.makedirs(workdir, exist_ok=True)
    write_atomic(path, json.dumps(new, indent=2, sort_keys=True).encode())
  return workdir


def write_json(workdir: str, name: str, record: Mapping[str, Any]) -> str:
  path = os.path.join(workdir, name)
  write_atomic(path, (json.dumps(_to_jsonable(record), indent=2,
                                 sort_keys=True) + "\n").encode())
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
    kept = [line for line in read_metrics_lines(self.path)
            if json.loads(line).get("step", -1) <= step]
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

  def __init__(self, total: int, start: int = 0, label: str = "step",
               stream=None):
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
      parts.append(f"{key}={value:.4g}" if isinstance(value, float)
                   else f"{key}={value}")
    parts.append(f"{rate:.3g} {self.label}s/s" if rate >= 0.1
                 else f"{1 / rate:.3g} s/{self.label}")
    parts.append(f"ETA {_format_seconds(remaining)}")
    print(" | ".join(parts), file=self.stream, flush=True)
    return rate


def _format_seconds(seconds: float) -> str:
  if not np.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


# --------------------------------------------------------------------------
# Checkpoints: `checkpoint_<step>.msgpack` (flax msgpack of a state dict) and
# a sidecar `checkpoint_<step>.msgpack.sha256` holding its SHA-256.
# --------------------------------------------------------------------------


def checkpoint_path(workdir: str, step: int) -> str:
  return os.path.join(workdir,
                      f"{CHECKPOINT_PREFIX}{step:010d}{CHECKPOINT_SUFFIX}")


def save_checkpoint(workdir: str, step: int, target: Any, keep: int = 2) -> str:
  """Writes `target` (any pytree of arrays) with its checksum; keeps the
  newest `keep` checkpoints.

  The data and the checksum are each written atomically (temporary file,
  fsync, rename, directory fsync), data first: a crash in between leaves a
  checkpoint without checksum, which restore skips in favour of an older one.
  """
  data = flax.serialization.to_bytes(jax.device_get(target))
  path = checkpoint_path(workdir, step)
  write_atomic(path, data)
  write_atomic(path + CHECKSUM_SUFFIX,
               hashlib.sha256(data).hexdigest().encode())
  for old in checkpoint_paths(workdir)[:-keep]:
    for p in (old, old + CHECKSUM_SUFFIX):
      if os.path.exists(p):
        os.remove(p)
  return path


def checkpoint_paths(workdir: str) -> list[str]:
  """Checkpoint files of `workdir`, oldest first."""
  if not os.path.isdir(workdir):
    return []
  names = sorted(n for n in os.listdir(workdir)
                 if n.startswith(CHECKPOINT_PREFIX)
                 and n.endswith(CHECKPOINT_SUFFIX))
  return [os.path.join(workdir, n) for n in names]


def _step_of(path: str) -> int:
  name = os.path.basename(path)
  return int(name[len(CHECKPOINT_PREFIX):-len(CHECKPOINT_SUFFIX)])


def latest_checkpoint_step(workdir: str) -> int | None:
  paths = checkpoint_paths(workdir)
  return _step_of(paths[-1]) if paths else None


def read_checkpoint_file(path: str) -> Any:
  """The raw state dict of one checkpoint, after verifying its checksum.

  Raises:
    CheckpointError: naming the file, if it is missing its checksum, does not
      match it, or does not parse.
  """
  with open(path, "rb") as f:
    data = f.read()
  sidecar = path + CHECKSUM_SUFFIX
  if not os.path.exists(sidecar):
    raise CheckpointError(f"{path}: no checksum file {sidecar} (the write "
                          "was cut short)")
  with open(sidecar) as f:
    expected = f.read().strip()
  actual = hashlib.sha256(data).hexdigest()
  if actual != expected:
    raise CheckpointError(f"{path}: checksum mismatch (file is {len(data)} "
                          "bytes; truncated or corrupted)")
  try:
    return flax.serialization.msgpack_restore(data)
  except Exception as e:  # msgpack raises several unrelated types.
    raise CheckpointError(f"{path}: unreadable ({e})") from e


def read_latest_checkpoint(workdir: str, log=None) -> tuple[int, Any] | None:
  """`(step, raw state dict)` of the newest valid checkpoint, or None if the
  workdir has none.

  Invalid newer checkpoints are skipped with a warning naming each file.

  Raises:
    CheckpointError: if checkpoints exist but none is valid; it lists them.
  """
  paths = checkpoint_paths(workdir)
  problems = []
  for path in reversed(paths):
    try:
      raw = read_checkpoint_file(path)
    except CheckpointError as e:
      problems.append(str(e))
      message = f"Skipping corrupt checkpoint: {e}"
      warnings.warn(message)
      if log is not None:
        log(message)
      continue
    return _step_of(path), raw
  if paths:
    raise CheckpointError(
        "No valid checkpoint in " + workdir + ":\n  " + "\n  ".join(problems)
        + "\nMove these files away to start the run afresh.")
  return None


def _check_like(template: Any, restored: Any, path: str) -> None:
  want = jax.tree_util.tree_flatten_with_path(template)[0]
  got = jax.tree_util.tree_leaves(restored)
  for (key_path, w), g in zip(want, got):
    w_shape, g_shape = np.shape(w), np.shape(g)
    if w_shape != g_shape:
      raise CheckpointError(
          f"{path}: {jax.tree_util.keystr(key_path)} has shape {g_shape}, "
          f"but this config needs {w_shape}: the checkpoint was made with a "
          "different config")


def restore_like(template: Any, raw: Any, path: str = "checkpoint") -> Any:
  """`raw` (a state dict read from `path`) in the structure of `template`.

  Raises:
    CheckpointError: if the structure or a shape differs from the template's.
  """
  try:
    target = flax.serialization.from_state_dict(template, raw)
  except (ValueError, KeyError, TypeError) as e:
    raise CheckpointError(f"{path} does not match this run's state "
                          f"({e}); was it made with another config?") from e
  _check_like(template, target, path)
  return target


def restore_checkpoint(workdir: str, template: Any,
                       log=None) -> tuple[int, Any] | None:
  """Returns `(step, target)` of the newest valid checkpoint, or None if
  there is none.

  `template` is a pytree with the structure, shapes and dtypes to restore
  into; a checkpoint whose shapes differ raises `CheckpointError`.
  """
  found = read_latest_checkpoint(workdir, log=log)
  if found is None:
    return None
  step, raw = found
  return step, restore_like(template, raw, checkpoint_path(workdir, step))
