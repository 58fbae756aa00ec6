"""Loads an experiment's config file, `configs/NAME.py`, by path.

The same loader serves the command line's `--config` twin for code: the
reproduction targets, the benchmarks and the tests build configs with it.
"""

from __future__ import annotations

import importlib.util
import os
import types

import ml_collections

REPO_ROOT = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)


def config_path(experiment: str) -> str:
  """`configs/<experiment>.py`'s absolute path.

  Raises:
    FileNotFoundError: no such config file (the message names the path).
  """
  path = os.path.join(REPO_ROOT, "configs", f"{experiment}.py")
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"no config file {path} for experiment {experiment!r}"
    )
  return path


def load_module(path: str) -> types.ModuleType:
  """The config file at `path`, executed as a module (its `get_config`,
  `PRESETS`, docstring)."""
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(f"{name}_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_config_module(experiment: str) -> types.ModuleType:
  """`configs/<experiment>.py` as a module."""
  return load_module(config_path(experiment))


def load_config(
  experiment: str, preset: str = "", **overrides
) -> ml_collections.ConfigDict:
  """`configs/<experiment>.py`'s `get_config(preset)`, then `overrides`.

  Raises:
    FileNotFoundError: no such config file (the message names the path).
    ValueError: the config file does not take `preset` (naming the nearest).
  """
  module = load_config_module(experiment)
  config = module.get_config(preset) if preset else module.get_config()
  config.update(overrides)
  return config


def field_or(fields, name: str, default):
  """`fields.name` of a config, or `default` where it has no such field:
  for tools that read programs of several experiments
  (`scripts/reproduce.py`), never for an experiment's own fields (its
  config lists every one)."""
  return fields.get(name, default)
