"""Run bookkeeping shared by every experiment: config.json, metrics.jsonl,
progress lines with an ETA, and checkpoints that a restarted run resumes from.

Nothing here knows about any algorithm; experiments call these around their
jitted training chunks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Mapping

import flax.serialization
import jax
import numpy as np

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_PREFIX = "checkpoint_"


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


def prepare(workdir: str, config: Any) -> str:
  """Creates `workdir` and writes `config.json` there. Returns the path."""
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, CONFIG_FILE), "w") as f:
    json.dump(_to_jsonable(config), f, indent=2, sort_keys=True)
  return workdir


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
    with open(self.path, "w") as f:
      f.writelines(line + "\n" for line in kept)


def read_metrics_lines(path: str) -> list[str]:
  with open(path) as f:
    return [line.strip() for line in f if line.strip()]


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


def save_checkpoint(workdir: str, step: int, target: Any, keep: int = 2) -> str:
  """Writes `target` (any pytree of arrays) atomically; keeps the newest `keep`."""
  data = flax.serialization.to_bytes(jax.device_get(target))
  path = os.path.join(workdir, f"{CHECKPOINT_PREFIX}{step:010d}.msgpack")
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(data)
  os.replace(tmp, path)
  for old in _checkpoint_paths(workdir)[:-keep]:
    os.remove(old)
  return path


def _checkpoint_paths(workdir: str) -> list[str]:
  if not os.path.isdir(workdir):
    return []
  names = sorted(n for n in os.listdir(workdir)
                 if n.startswith(CHECKPOINT_PREFIX) and n.endswith(".msgpack"))
  return [os.path.join(workdir, n) for n in names]


def latest_checkpoint_step(workdir: str) -> int | None:
  paths = _checkpoint_paths(workdir)
  if not paths:
    return None
  name = os.path.basename(paths[-1])
  return int(name[len(CHECKPOINT_PREFIX):-len(".msgpack")])


def restore_checkpoint(workdir: str, template: Any) -> tuple[int, Any] | None:
  """Returns `(step, target)` of the newest checkpoint, or None if there is none.

  `template` is a pytree with the structure, shapes and dtypes to restore into.
  """
  paths = _checkpoint_paths(workdir)
  if not paths:
    return None
  with open(paths[-1], "rb") as f:
    target = flax.serialization.from_bytes(template, f.read())
  return latest_checkpoint_step(workdir), target
