"""Checksummed checkpoints that a restarted run resumes from.

`checkpoint_<step>.msgpack` holds the flax msgpack of a state dict, and the
sidecar `checkpoint_<step>.msgpack.sha256` its SHA-256: a file cut short by a
crash or a copy fails the checksum and is skipped in favour of an older one.

The run loop's state dict (`runner.write_checkpoint`): `step`, `state`,
`window` (the metrics since the last record), `config` (the JSON of the
config it was made with), `last_record` (the step of the last record
written before it) and `skips_at_record` (`health.py`).
"""

from __future__ import annotations

from collections.abc import Iterator
import hashlib
import os
from typing import Any
import warnings

import flax.serialization
import jax
import numpy as np

from experiments.loop import writes
from experiments.loop.errors import RunError

CHECKPOINT_PREFIX = "checkpoint_"
CHECKPOINT_SUFFIX = ".msgpack"
CHECKSUM_SUFFIX = ".sha256"


class CheckpointError(RunError, RuntimeError):
  """No checkpoint in a workdir could be read."""


def checkpoint_path(workdir: str, step: int) -> str:
  return os.path.join(
    workdir, f"{CHECKPOINT_PREFIX}{step:010d}{CHECKPOINT_SUFFIX}"
  )


def save_checkpoint(workdir: str, step: int, target: Any, keep: int = 2) -> str:
  """Writes `target` (any pytree of arrays) with its checksum; keeps the
  newest `keep` checkpoints (0: every one).

  The checksum and the data are each written atomically (temporary file,
  fsync, rename, directory fsync), the checksum first: a crash in between
  leaves only a checksum file, which nothing reads (`remove_orphans`), so a
  checkpoint file on disk always has its checksum.

  Raises:
    WorkdirWriteError: the disk is full or read-only; nothing of this
      checkpoint is left behind and the older ones are untouched.
  """
  data = flax.serialization.to_bytes(jax.device_get(target))
  path = checkpoint_path(workdir, step)
  sidecar = path + CHECKSUM_SUFFIX
  writes.write_atomic(sidecar, hashlib.sha256(data).hexdigest().encode())
  try:
    writes.write_atomic(path, data)
  except RunError:
    writes.remove_quietly(sidecar)
    raise
  for old in checkpoint_paths(workdir)[:-keep] if keep else ():
    for p in (old, old + CHECKSUM_SUFFIX):
      writes.remove_quietly(p)
  return path


def remove_orphans(workdir: str, log=print) -> None:
  """Removes checksum files without their checkpoint (a crash between the
  two writes of `save_checkpoint`)."""
  if not os.path.isdir(workdir):
    return
  for name in sorted(os.listdir(workdir)):
    data = name[: -len(CHECKSUM_SUFFIX)]
    if (
      name.startswith(CHECKPOINT_PREFIX)
      and name.endswith(CHECKPOINT_SUFFIX + CHECKSUM_SUFFIX)
      and not os.path.exists(os.path.join(workdir, data))
    ):
      writes.remove_quietly(os.path.join(workdir, name))
      log(f"Removed {name}, left by an interrupted checkpoint write.")


def checkpoint_paths(workdir: str) -> list[str]:
  """Checkpoint files of `workdir`, oldest first."""
  if not os.path.isdir(workdir):
    return []
  names = sorted(
    n
    for n in os.listdir(workdir)
    if n.startswith(CHECKPOINT_PREFIX) and n.endswith(CHECKPOINT_SUFFIX)
  )
  return [os.path.join(workdir, n) for n in names]


def _step_of(path: str) -> int:
  name = os.path.basename(path)
  return int(name[len(CHECKPOINT_PREFIX) : -len(CHECKPOINT_SUFFIX)])


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
    raise CheckpointError(
      f"{path}: no checksum file {sidecar} (the write was cut short)"
    )
  with open(sidecar) as f:
    expected = f.read().strip()
  actual = hashlib.sha256(data).hexdigest()
  if actual != expected:
    raise CheckpointError(
      f"{path}: checksum mismatch (file is {len(data)} "
      "bytes; truncated or corrupted)"
    )
  try:
    return flax.serialization.msgpack_restore(data)
  except Exception as e:  # msgpack raises several unrelated types.
    raise CheckpointError(f"{path}: unreadable ({e})") from e


def valid_checkpoints(workdir: str, log=None) -> Iterator[tuple[int, Any]]:
  """`(step, raw state dict)` of each valid checkpoint, newest first.

  Invalid ones are skipped with a warning naming each file.

  Raises:
    CheckpointError: once every checkpoint was tried and none was valid
      (none yielded); it lists them.
  """
  paths = checkpoint_paths(workdir)
  problems = []
  for path in reversed(paths):
    try:
      raw = read_checkpoint_file(path)
    except CheckpointError as e:
      problems.append(str(e))
      message = f"Skipping corrupt checkpoint: {e}"
      warnings.warn(message, stacklevel=2)
      if log is not None:
        log(message)
      continue
    yield _step_of(path), raw
  if paths and len(problems) == len(paths):
    raise CheckpointError(
      "No valid checkpoint in "
      + workdir
      + ":\n  "
      + "\n  ".join(problems)
      + "\nMove these files away to start the run afresh."
    )


def read_latest_checkpoint(workdir: str, log=None) -> tuple[int, Any] | None:
  """`(step, raw state dict)` of the newest valid checkpoint, or None if the
  workdir has none.

  Invalid newer checkpoints are skipped with a warning naming each file.

  Raises:
    CheckpointError: if checkpoints exist but none is valid; it lists them.
  """
  for found in valid_checkpoints(workdir, log):
    return found
  return None


def _merges_adjacent_axes(old_shape: tuple, new_shape: tuple) -> bool:
  """Whether `new_shape` is `old_shape` with two neighbouring axes merged
  (so a row-major reshape maps one onto the other element for element)."""
  if len(old_shape) != len(new_shape) + 1:
    return False
  return any(
    old_shape[:i] + (old_shape[i] * old_shape[i + 1],) + old_shape[i + 2 :]
    == new_shape
    for i in range(len(old_shape) - 1)
  )


def _upgrade_tangent_layout(template: Any, restored: Any) -> Any:
  """Checkpoints written before the Kronecker factors and the exact
  influence merged their state-row and unit axes (`(S, n, K, n, ...)` ->
  `(S n, K, n, ...)`, `rtrl.tangents`) hold the same numbers in the same
  order: their tangent leaves are reshaped, nothing else is."""

  def upgrade(key_path, want, got):
    name = jax.tree_util.keystr(key_path)
    old, new = np.shape(got), np.shape(want)
    if "tangent" in name and _merges_adjacent_axes(old, new):
      return np.reshape(got, new)
    return got

  return jax.tree_util.tree_map_with_path(upgrade, template, restored)


def _check_like(template: Any, restored: Any, path: str) -> None:
  want = jax.tree_util.tree_flatten_with_path(template)[0]
  got = jax.tree_util.tree_leaves(restored)
  for (key_path, w), g in zip(want, got):
    w_shape, g_shape = np.shape(w), np.shape(g)
    if w_shape != g_shape:
      raise CheckpointError(
        f"{path}: {jax.tree_util.keystr(key_path)} has shape {g_shape}, "
        f"but this config needs {w_shape}: the checkpoint was made with a "
        "different config"
      )


def restore_like(template: Any, raw: Any, path: str = "checkpoint") -> Any:
  """`raw` (a state dict read from `path`) in the structure of `template`.

  Raises:
    CheckpointError: if the structure or a shape differs from the template's.
  """
  try:
    target = flax.serialization.from_state_dict(template, raw)
  except (ValueError, KeyError, TypeError) as e:
    raise CheckpointError(
      f"{path} does not match this run's state "
      f"({e}); was it made with another config?"
    ) from e
  target = _upgrade_tangent_layout(template, target)
  _check_like(template, target, path)
  return target
