"""The command line of every experiment: `--config`, `--workdir` and a main.

Each `experiments/NAME.py` is only

  if __name__ == "__main__":
    cli.run(train, "configs/NAME.py", "NAME config file.")

with `train(config, workdir)` from the experiment's package. `--help` prints
the config's fields with their defaults and comments and its presets
(`experiments/loop/config_help.py`); a config the command line cannot build
(no such file, preset or field, a value of the wrong type) is one line on
stderr and exit status 2.
"""

from __future__ import annotations

from collections.abc import Callable
import logging
import os
import sys
from typing import Any

from absl import app
from absl import flags

from experiments.loop import config_help
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


HELP_FLAGS = ("-h", "--help", "-help", "--helpshort", "-?")


def _main_experiment() -> str:
  """NAME of the running `python -m experiments.NAME`."""
  spec = getattr(sys.modules["__main__"], "__spec__", None)
  name = spec.name if spec else sys.argv[0]
  return os.path.splitext(name.rsplit(".", 1)[-1])[0]


def config_arg(argv: list[str]) -> str | None:
  """The value of `--config=X` (or `--config X`) in `argv`, if given."""
  for i, arg in enumerate(argv):
    if arg.lstrip("-") == "config" and arg.startswith("-"):
      return argv[i + 1] if i + 1 < len(argv) else None
    if arg.lstrip("-").startswith("config=") and arg.startswith("-"):
      return arg.split("=", 1)[1]
  return None


def config_problem(experiment: str, argv: list[str]) -> str | None:
  """One line saying why `argv`'s config cannot be built, or None: no
  `--config`, no such file or preset, or an override naming no field."""
  arg = config_arg(argv)
  if arg is None:
    return (
      f"--config is required, e.g. --config=configs/{experiment}.py "
      f"(python -m experiments.{experiment} --help lists its presets)"
    )
  try:
    _, config = config_help.load(arg)
  except ValueError as e:
    return str(e).replace("\n", " ")
  path, _ = config_help.split_config_arg(arg)
  return config_help.unknown_override(config, path, argv)


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; a bad flag value is one line, exit status 2."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    print(f"Error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)


def run(
  train: Callable[[Any, str], Any], default_config: str | None, help_text: str
) -> None:
  """Defines the flags and runs `train(config, workdir)` as an absl app;
  `--help` prints the config's fields and presets and exits 0."""
  experiment = _main_experiment()
  argv = sys.argv
  if default_config and config_arg(argv) is None:
    argv = [argv[0], f"--config={default_config}", *argv[1:]]
  if any(arg in HELP_FLAGS for arg in argv[1:]):
    arg = config_arg(argv) or f"configs/{experiment}.py"
    try:
      print(config_help.help_text(experiment, arg), end="")
    except ValueError as e:
      print(f"Error: {e}", file=sys.stderr, flush=True)
      sys.exit(2)
    sys.exit(0)
  problem = config_problem(experiment, argv)
  if problem:
    print(f"Error: {problem}", file=sys.stderr, flush=True)
    sys.exit(2)
  define_flags(default_config, help_text)
  app.run(main_for(train), argv=argv, flags_parser=_parse_flags)
