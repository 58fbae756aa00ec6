"""Config-field checks: every error names `config.FIELD` and what it should
be. The step schedule (`num_steps`, `log_every`, `eval_every`,
`checkpoint_every` against the chunk length) and `matmul_precision` are
checked here once, by the run loop, for every experiment.

Each error is a `ConfigError` (a `ValueError` that the mains print as one
line). The loop depends on no algorithm library (`rtrl`, `rls`): the value checks
it needs are written here, and the RLS experiments use them too."""

from __future__ import annotations

from typing import Any

from experiments.loop.errors import ConfigError

# The names `jax.default_matmul_precision` takes (the same set as
# `rtrl.linalg.MATMUL_PRECISIONS`; tests/experiments/loop checks they agree).
MATMUL_PRECISIONS = (
  "highest",
  "float32",
  "tensorfloat32",
  "bfloat16",
  "high",
  "default",
  "fastest",
)


def positive_int(name: str, value: Any) -> int:
  """`value` if it is an int >= 1 (not a bool), else a ConfigError (a ValueError) naming it."""
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ConfigError(f"{name} must be a positive integer, got {value!r}")
  return value


def nonnegative_int(name: str, value: Any, zero_means: str = "") -> int:
  """`value` if it is an int >= 0 (not a bool), else a ConfigError (a ValueError) naming it."""
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    meaning = f" (0: {zero_means})" if zero_means else ""
    raise ConfigError(f"{name} must be an integer >= 0{meaning}, got {value!r}")
  return value


def positive_ints(config, *fields: str) -> None:
  """Each of `fields` is a positive integer."""
  for field in fields:
    positive_int(f"config.{field}", config[field])


def nonnegative_ints(config, *fields: str, zero_means: str = "") -> None:
  """Each of `fields` is an integer >= 0."""
  for field in fields:
    nonnegative_int(f"config.{field}", config[field], zero_means)


def multiple_of(config, field: str, period: int, period_name: str) -> None:
  """`config.field` is a multiple of `period` (named `period_name`)."""
  if config[field] % period:
    raise ConfigError(
      f"config.{field} ({config[field]}) must be a multiple "
      f"of {period_name} ({period})"
    )


def schedule(config, chunk_steps: int, eval_every: int | None = None) -> None:
  """The step-count fields against the chunk length (a record, an
  evaluation and a checkpoint happen at the end of a chunk, so each period
  is a whole number of chunks), `eval_every` (the experiment's
  `config.eval_every`; None: it does not evaluate) and `keep_checkpoints`
  (the newest that many are kept; 0: every checkpoint)."""
  positive_int("chunk_steps", chunk_steps)
  positive_ints(config, "num_steps", "log_every", "checkpoint_every")
  nonnegative_int(
    "config.keep_checkpoints", config.keep_checkpoints, "keep every one"
  )
  periods = {
    "num_steps": config.num_steps,
    "log_every": config.log_every,
    "checkpoint_every": config.checkpoint_every,
  }
  if eval_every is not None:
    periods["eval_every"] = positive_int("config.eval_every", eval_every)
  for field, period in periods.items():
    if period % chunk_steps:
      raise ConfigError(
        f"config.{field} ({period}) must be a multiple of the chunk length "
        f"in steps ({chunk_steps}; online experiments: config.chunk_steps)"
      )


def matmul_precision(config) -> str:
  """`config.matmul_precision`, one of `MATMUL_PRECISIONS`."""
  name = config.matmul_precision
  if name not in MATMUL_PRECISIONS:
    raise ConfigError(
      f"config.matmul_precision: matmul precision must be one of "
      f"{sorted(MATMUL_PRECISIONS)}, got {name!r}"
    )
  return name
