"""The expected ways a run ends early, as one family.

Every error here is a message written for the person at the command line:
the mains (`cli.py`) print `Error: <message>` and exit with the error's
`exit_code`, without a traceback. A traceback means a bug.

Exit codes: 2 for a run that cannot start or go on as asked (a bad config
field, a changed config, no usable checkpoint, a workdir held by another process, a full or
read-only disk, missing data, a broken log); 3 for a run that failed
numerically (NaN/Inf, too many skipped updates, a diverged loss); 128 + the
signal number after SIGTERM/SIGINT (`signals.Preempted`, not a `RunError`).

This module imports nothing, so that any part of `experiments/` (the data
loaders included) can raise these errors.
"""

from __future__ import annotations


class RunError(Exception):
  """A run stopped for a reason its message explains (see the module)."""

  exit_code = 2


class ConfigError(RunError, ValueError):
  """A config field has a value the run cannot use (`checks.py`): the
  message names `config.FIELD` and what it should be."""


class WorkdirLockedError(RunError):
  """Another process holds the workdir (`lock.py`)."""


class WorkdirWriteError(RunError):
  """A file of the workdir could not be written (full or read-only disk,
  no permission); what was written before is left valid (`writes.py`)."""


class MetricsLogError(RunError, ValueError):
  """`metrics.jsonl` holds a line that is not a record of this run
  (`metrics_log.py`)."""


class TrainingFailedError(RunError, FloatingPointError):
  """Training failed numerically: the last good checkpoint is kept."""

  exit_code = 3


class DataNotFoundError(RunError, FileNotFoundError):
  """A dataset's files are not where the run looks (`experiments/data`):
  the message names the folder and how to get the files."""


class DataFormatError(RunError, ValueError):
  """A dataset's file is not in its format (a bad byte, an empty split, a
  wrong md5): the message names the file."""
