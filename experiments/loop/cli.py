"""The command line of every experiment: `--config`, `--workdir` and a main.

Each `experiments/NAME.py` is only

  if __name__ == "__main__":
    cli.run(train, "configs/NAME.py", "NAME config file.")

with `train(config, workdir)` from the experiment's package.
"""

from __future__ import annotations

from collections.abc import Callable
import logging
import sys
from typing import Any

from absl import app
from absl import flags

from experiments.loop import errors
from experiments.loop import sharding
from experiments.loop import signals


def define_flags(default_config: str, help_text: str) -> None:
  """`--config` (an ml_collections config file, fields overridable) and
  `--workdir`. Call under `if __name__ == '__main__'` only, so tests can
  import several experiments at once."""
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

  config_flags.DEFINE_config_file("config", default_config, help_text)
  flags.DEFINE_string(
    "workdir",
    None,
    "Run directory: config.json, metrics.jsonl, checkpoints.",
    required=True,
  )


# JAX logs at INFO each platform it probes and cannot open (a CPU or GPU
# machine: "Unable to initialize backend 'tpu'"); under absl that reaches
# stderr on every run although nothing is wrong.
BACKEND_PROBE_LOGGER = "jax._src.xla_bridge"


def quiet_backend_probe() -> None:
  """Shows the backend probe's warnings and errors only. A main's decision,
  made before JAX initialises its backends; the library logs as JAX does."""
  logging.getLogger(BACKEND_PROBE_LOGGER).setLevel(logging.WARNING)


def main_for(train: Callable[[Any, str], Any]) -> Callable[[list[str]], None]:
  """An absl `main` that calls `train(config, workdir)` and turns the run
  loop's expected failures into one clear message and a non-zero exit."""

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    quiet_backend_probe()
    sharding.initialize_distributed(flags.FLAGS.config)
    try:
      train(flags.FLAGS.config, flags.FLAGS.workdir)
    except signals.Preempted:
      raise
    except errors.RunError as e:  # One message, no traceback.
      print(f"Error: {e}", file=sys.stderr, flush=True)
      sys.exit(e.exit_code)

  return main


def run(
  train: Callable[[Any, str], Any], default_config: str | None, help_text: str
) -> None:
  """Defines the flags and runs `train(config, workdir)` as an absl app."""
  define_flags(default_config, help_text)
  app.run(main_for(train))
