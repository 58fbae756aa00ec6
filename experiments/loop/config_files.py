"""Loads an experiment's config file, `configs/NAME.py`, by path.

The same loader serves the command line's `--config` twin for code: the
reproduction targets, the benchmarks and the tests build configs with it.
"""

from __future__ import annotations

import importlib.util
import os

import ml_collections

REPO_ROOT = os.path.dirname(
  os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)


def load_config(
  experiment: str, preset: str = "", **overrides
) -> ml_collections.ConfigDict:
  """`configs/<experiment>.py`'s `get_config(preset)`, then `overrides`.

  Raises:
    FileNotFoundError: no such config file (the message names the path).
  """
  path = os.path.join(REPO_ROOT, "configs", f"{experiment}.py")
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"no config file {path} for experiment {experiment!r}"
    )
  spec = importlib.util.spec_from_file_location(f"{experiment}_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(preset) if preset else module.get_config()
  config.update(overrides)
  return config
