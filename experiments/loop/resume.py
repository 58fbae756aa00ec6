"""Where a run starts: the newest checkpoint that fits this config and
`metrics.jsonl`, or step 0; the log is then cut to that step.

A checkpoint fits when

* it is valid (checksum, parses: `checkpoints.py`; else it is skipped with a
  warning, as before);
* the config it was made with (saved inside it since this version) differs
  from this run's only in bookkeeping fields, or
  `config.allow_config_change` is set: otherwise `ConfigMismatchError`,
  even when `config.json` was deleted;
* the log holds its last record: the checkpoint stores the step of the
  last record written before it (`last_record`; older checkpoints: their
  step less the logging window). A checkpoint newer than the log (a record
  lost after it was saved) is passed over with a warning for an older one.
  If checkpoints exist and none fits the log, the run is refused
  (`MetricsLogError`): starting afresh would mix two runs' checkpoints.

Then the log keeps exactly the records up to the checkpoint's step (a
fresh start: none), so the rerun writes each later record once, and the
records equal an uninterrupted run's, whatever the moment of the kill.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import jax
import numpy as np

from experiments.loop import checkpoints
from experiments.loop import metrics_log
from experiments.loop import workdir as workdir_lib
from experiments.loop import writes
from experiments.loop.errors import MetricsLogError

Pytree = Any


class Start(NamedTuple):
  """Where training starts.

  Attributes:
    step: the step trained to (0: a fresh start).
    state: the run state on the devices.
    window: per-chunk metrics since the last record (host arrays).
    last_record: the step of the last record written (0: none).
    skips_at_record: updates skipped as non-finite up to that record, per
      run (`health.py`), or None (none counted yet).
  """

  step: int
  state: Pytree
  window: list[Pytree]
  last_record: int
  skips_at_record: Any = None


def _host_zeros(shapes: Pytree) -> Pytree:
  return jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)


def _config_hparams(state: Pytree, hparams: dict) -> Pytree:
  """`state` with `state['hparams']` set to the config's values, not the
  checkpoint's: an allowed change of a learning rate takes effect on
  resume."""
  if not hparams or not isinstance(state, dict) or "hparams" not in state:
    return state
  return {
    **state,
    "hparams": jax.tree_util.tree_map(
      lambda old, new: np.asarray(new, old.dtype),
      state["hparams"],
      jax.device_get(hparams),
    ),
  }


def last_record(raw: dict, step: int, chunk_steps: int) -> int:
  """The step of the last record written before checkpoint `raw` (0: none)."""
  if "last_record" in raw:
    return int(raw["last_record"])
  return step - len(raw.get("window") or {}) * chunk_steps


def check_made_with(setting, raw: dict, path: str) -> None:
  """Refuses a checkpoint made with an essentially different config.

  Raises:
    ConfigMismatchError: naming the checkpoint and each field.
  """
  if "config" not in raw:
    return  # Saved before checkpoints carried their config.
  made_with = json.loads(raw["config"])
  differences = workdir_lib.config_differences(
    made_with, setting.saved_config, setting.experiment.resume_defaults
  )
  workdir_lib.check_differences(
    differences,
    set(workdir_lib.BOOKKEEPING_FIELDS),
    setting.config.allow_config_change,
    path,
    checkpoint=True,
  )


def restore(setting, step: int, raw: dict) -> tuple[Pytree, list[Pytree]]:
  """`(state on the devices, logging window)` of checkpoint `raw`.

  The window is the per-chunk metrics since the last record, checkpointed
  with the state so that a run resumed between two records writes the same
  records.
  """
  path = checkpoints.checkpoint_path(setting.workdir, step)
  program = setting.program
  state = checkpoints.restore_like(
    _host_zeros(program.state_shape), raw["state"], path
  )
  state = _config_hparams(state, setting.runs.hparams)
  saved_window = raw.get("window") or {}
  window = [
    checkpoints.restore_like(
      _host_zeros(program.metrics_shape), saved_window[str(i)], path
    )
    for i in range(len(saved_window))
  ]
  return program.place_state(state), window


def choose(setting, log_steps: list[int]) -> tuple[int, dict] | None:
  """`(step, raw)` of the newest checkpoint that fits (module docstring),
  or None when the workdir has none.

  Raises:
    ConfigMismatchError, CheckpointError, MetricsLogError: see the module.
  """
  found = False
  chunk = setting.experiment.chunk_steps
  logged = set(log_steps)
  for step, raw in checkpoints.valid_checkpoints(setting.workdir, setting.log):
    found = True
    path = checkpoints.checkpoint_path(setting.workdir, step)
    check_made_with(setting, raw, path)
    needed = last_record(raw, step, chunk)
    if needed <= 0 or needed in logged:
      return step, raw
    setting.log(
      f"Passing over {path}: metrics.jsonl lacks its record at step "
      f"{needed} (lost after the checkpoint was saved)."
    )
  if not found:
    return None
  last = log_steps[-1] if log_steps else "none"
  raise MetricsLogError(
    f"No checkpoint in {setting.workdir} fits its metrics.jsonl (last "
    f"record: step {last}): the log lost records the checkpoints were made "
    "after. Restore the log, or move the checkpoints and the log away to "
    "start the run afresh."
  )


def start(setting) -> Start:
  """Where to train from, with the log cut to that step (see the module
  docstring)."""
  log = metrics_log.MetricsLog(setting.workdir)
  scanned = metrics_log.scan(log.path)
  if scanned.cut_line is not None:
    setting.log(
      f"Dropping {log.path}:{scanned.cut_line}, a record cut short by an "
      "interruption (it is written again)."
    )
  if setting.writes:
    writes.remove_stray_temporaries(setting.workdir, setting.log)
    checkpoints.remove_orphans(setting.workdir, setting.log)
  chosen = choose(setting, scanned.steps)
  step = 0 if chosen is None else chosen[0]
  dropped = [s for s in scanned.steps if s > step]
  if setting.writes:
    log.truncate_after(step)
  if dropped:
    setting.log(
      f"Dropped {len(dropped)} records after step {step} from "
      f"{log.path} (steps {dropped[0]}..{dropped[-1]}); they are written "
      "again."
    )
  if chosen is None:
    runs = setting.runs
    return Start(0, setting.program.init(runs.keys, runs.hparams), [], 0)
  raw = chosen[1]
  state, window = restore(setting, step, raw)
  setting.log(
    f"Resumed from step {step} "
    f"({checkpoints.checkpoint_path(setting.workdir, step)})."
  )
  skips = raw.get("skips_at_record")
  if skips is None and setting.program.skip_counters is not None:
    skips = jax.device_get(setting.program.skip_counters(state))["total"]
  return Start(
    step,
    state,
    window,
    last_record(raw, step, setting.experiment.chunk_steps),
    skips,
  )
