"""When training has failed: the run loop's policy, so that a failed run
never passes as a finished one.

Each decision is a config value; a config that does not list one gets the
default in `DEFAULTS`.

1. **NaN/Inf.** A non-finite training metric in a chunk stops the run
   (`TrainingFailedError`, exit 3) naming the metrics and the steps; the
   last good checkpoint is kept. With `config.skip_nonfinite_updates` the
   experiment's optimiser instead skips each update whose gradient is not
   finite (`optax.apply_if_finite`), and the loop reads its counters from
   the optimiser state (the leaves named `notfinite_count`, updates skipped
   in a row, and `total_notfinite`): every record gets `skipped_updates`
   (since the previous record), and the run stops as above once
   `config.max_consecutive_skips` (default 100) or more updates in a row
   were skipped at the end of a chunk.
2. **Divergence.** An experiment that names its training loss and the loss
   of an uninformed prediction (`Experiment.chance_loss`, e.g. 2 bits on
   the Copy task's 4 symbols) has each record checked: a loss above
   `config.divergence_factor` (default 10) times that is flagged on the
   progress line (`DIVERGED`), the record is written, and the run stops
   (exit 3) without checkpointing the diverged state. 0 turns this off.
3. **Stacked runs** (seeds x rates in one program): a run that fails by 1
   or 2 is reported once and listed in `summary.json`'s `failed_runs`; the
   other runs go on. When every run has failed, the run stops (exit 3).

The loop stays algorithm-free: the counters are found by name in the state,
whatever optimiser holds them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from experiments.loop import checkpoints
from experiments.loop import checks
from experiments.loop import run_axes
from experiments.loop.errors import ConfigError
from experiments.loop.errors import TrainingFailedError

Pytree = Any

DEFAULTS = {"max_consecutive_skips": 100, "divergence_factor": 10.0}
CONSECUTIVE, TOTAL = "notfinite_count", "total_notfinite"


def limits(config) -> tuple[int, float]:
  """`(max_consecutive_skips, divergence_factor)` of `config`, checked.

  A config that does not list a field yet gets its value in `DEFAULTS`
  (the configs' run block lists both).

  Raises:
    ConfigError: naming the field.
  """
  value = dict(DEFAULTS)
  value.update({k: config[k] for k in DEFAULTS if k in config})
  skips = value["max_consecutive_skips"]
  checks.positive_int("config.max_consecutive_skips", skips)
  factor = value["divergence_factor"]
  if (
    isinstance(factor, bool)
    or not isinstance(factor, (int, float))
    or not 0 <= factor < float("inf")
  ):
    raise ConfigError(
      "config.divergence_factor must be a number >= 0 (0: no divergence "
      f"check), got {factor!r}"
    )
  return skips, float(factor)


def _counter_leaves(state: Pytree, name: str) -> list:
  return [
    leaf
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
    if path and getattr(path[-1], "name", None) == name
  ]


def has_skip_counters(state: Pytree) -> bool:
  """Whether `state` (or its shape) holds `optax.apply_if_finite` state."""
  return bool(_counter_leaves(state, CONSECUTIVE))


def skip_counters(state: Pytree, stacked: bool) -> dict[str, jax.Array]:
  """Jittable: `{'consecutive', 'total'}` skipped updates (the largest and
  the sum over the optimisers in `state`), one per run when `stacked`."""

  def reduce(name, combine):
    leaves = _counter_leaves(state, name)
    if stacked:
      flat = [x.reshape(x.shape[0], -1) for x in leaves]
    else:
      flat = [x.reshape(1, -1) for x in leaves]
    stacked_leaves = jnp.concatenate(flat, axis=1).astype(jnp.int32)
    out = combine(stacked_leaves, axis=1)
    return out if stacked else out[0]

  return {
    "consecutive": reduce(CONSECUTIVE, jnp.max),
    "total": reduce(TOTAL, jnp.sum),
  }


class Failure(NamedTuple):
  """Why a run failed, at which step."""

  step: int
  reason: str


class Health:
  """The failure policy (module docstring) applied to one run loop: the
  failures seen so far and the skip counts at the last record.

  Attributes:
    failed: run index -> `Failure` (index 0 for a single run).
    skips_at_record: total skipped updates per run at the last record.
  """

  def __init__(
    self,
    config,
    runs: list[dict],
    chunk_steps: int,
    chance_loss: tuple[str, float] | None = None,
    skips_at_start: Any = None,
    log=print,
    workdir: str = "",
  ):
    self.max_skips, self.factor = limits(config)
    self.skip_nonfinite = bool(config.skip_nonfinite_updates)
    self.runs = runs
    self.stacked = len(runs) > 1
    self.chunk_steps = chunk_steps
    self.chance_loss = chance_loss
    self.log = log
    self.workdir = workdir
    self.failed: dict[int, Failure] = {}
    self.skips_at_record = (
      np.zeros(len(runs), np.int64)
      if skips_at_start is None
      else np.asarray(skips_at_start, np.int64).reshape(len(runs))
    )

  def fail(self, run: int, step: int, reason: str) -> None:
    """Reports run `run`'s failure once.

    Raises:
      TrainingFailedError: a single run failed, or every stacked run has.
    """
    if run not in self.failed:
      self.failed[run] = Failure(step, reason)
      if self.stacked:
        self.log(
          f"Run {run} ({self.runs[run]}) failed: {reason}; the other runs "
          "go on."
        )
    if len(self.failed) == len(self.runs):
      if self.stacked:
        reason = f"Every run failed (the last, run {run}: {reason})"
      raise stop(reason, checkpoints.latest_checkpoint_step(self.workdir))

  def check_chunk(self, metrics: Pytree, counters: dict | None, step: int):
    """Policies 1 and 3 for one chunk's metrics and skip counters (host
    arrays; `counters` None without `apply_if_finite`).

    Raises:
      TrainingFailedError: see `fail`.
    """
    for r in range(len(self.runs)):
      one = run_axes.run_index(metrics, r) if self.stacked else metrics
      bad = run_axes.nonfinite_leaves(one)
      if bad and not self.skip_nonfinite:
        self.fail(r, step, nonfinite_reason(bad, step, self.chunk_steps))
      if counters is not None:
        consecutive = int(np.asarray(counters["consecutive"]).reshape(-1)[r])
        if consecutive >= self.max_skips:
          self.fail(r, step, skip_reason(consecutive, step, self.max_skips))

  def add_skips(self, record: dict, counters: dict | None) -> None:
    """`record['skipped_updates']`: updates skipped since the last record
    (a list over stacked runs); nothing without counters."""
    if counters is None:
      return
    total = np.asarray(counters["total"], np.int64).reshape(-1)
    skipped = (total - self.skips_at_record).tolist()
    self.skips_at_record = total
    record["skipped_updates"] = skipped if self.stacked else skipped[0]

  def diverged(self, record: dict) -> list[tuple[int, str]]:
    """`(run, reason)` of each run whose loss in `record` newly passed the
    divergence bound (policy 2)."""
    chance = self.chance_loss
    if chance is None or not self.factor or chance[0] not in record:
      return []
    values = record[chance[0]] if self.stacked else [record[chance[0]]]
    return [
      (r, divergence_reason(chance[0], value, chance[1], self.factor))
      for r, value in enumerate(values)
      if r not in self.failed and diverged(value, chance, self.factor)
    ]


def nonfinite_reason(bad_leaves: list[str], step: int, chunk_steps: int) -> str:
  return (
    f"Non-finite {', '.join(bad_leaves)} in the chunk ending at step {step} "
    f"(steps {step - chunk_steps + 1}..{step})"
  )


def skip_reason(consecutive: int, step: int, limit: int) -> str:
  return (
    f"{consecutive} updates in a row were skipped as non-finite by step "
    f"{step} (config.max_consecutive_skips = {limit})"
  )


def divergence_reason(
  field: str, value: float, chance: float, factor: float
) -> str:
  return (
    f"Diverged: {field} = {value:.4g} is above {factor:g} x the loss of "
    f"an uninformed prediction ({chance:.4g})"
  )


def diverged(
  value: Any, chance_loss: tuple[str, float] | None, factor: float
) -> bool:
  """Whether one run's loss `value` is past the bound (finite values
  only: NaN is the non-finite policy's)."""
  if chance_loss is None or not factor or not isinstance(value, (int, float)):
    return False
  return bool(np.isfinite(value) and value > factor * chance_loss[1])


def stop(reason: str, last_checkpoint: int | None) -> TrainingFailedError:
  """The error that ends a failed single run (or one whose runs all
  failed)."""
  kept = (
    f"The last good checkpoint (step {last_checkpoint}) is kept"
    if last_checkpoint is not None
    else "No checkpoint was written yet"
  )
  return TrainingFailedError(
    f"{reason}. {kept}. Lower the learning rate or clip gradients (a "
    "changed config resumes with --config.allow_config_change=true)."
  )
