"""Every preset of every config file resolves to the values it had before the
configs shared their blocks (configs/common.py, issue 52): each field's value
(its repr: 1 and 1.0, a tuple and a list differ) and its declared type, in
the recorded order. `config_presets.json` holds each experiment's default
config in full and each preset's differences from it.

A deliberate change of a default or a preset updates the record:

  .venv/bin/python tests/experiments/test_config_presets.py --write
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # `--write` runs it as a script.
  sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from ml_collections import config_dict  # noqa: E402

from experiments.loop.config_files import load_config  # noqa: E402
from experiments.loop.config_files import load_config_module  # noqa: E402

RECORD = pathlib.Path(__file__).with_name("config_presets.json")


def config_names() -> list[str]:
  return sorted(
    p.stem
    for p in (ROOT / "configs").glob("*.py")
    if p.stem not in ("__init__", "common")
  )


def presets(name: str) -> list[str]:
  """Every preset the config takes ("" is its default)."""
  module = load_config_module(name)
  names = list(getattr(module, "PRESETS", ()))
  modifiers = getattr(module, "MODIFIERS", ())
  with_modifiers = [f"{p},{m}" for p in names for m in modifiers]
  return sorted({"", *names, *with_modifiers})


def fields(config: config_dict.ConfigDict, prefix: str = "") -> dict:
  """Dotted field -> [repr of its value, its declared type's name]."""
  out = {}
  for key in config:
    value = config[key]
    if isinstance(value, config_dict.ConfigDict):
      out.update(fields(value, f"{prefix}{key}."))
      continue
    field = config._fields[key]  # A placeholder keeps its declared type.
    if isinstance(field, config_dict.FieldReference):
      kind = field.get_type().__name__
    else:
      kind = type(value).__name__
    out[prefix + key] = [repr(value), kind]
  return out


def snapshot() -> dict:
  """name -> {"default": fields, "order": keys, "presets": {preset: diff}}."""
  record = {}
  for name in config_names():
    base = load_config(name)
    default = fields(base)
    diffs = {}
    for preset in presets(name):
      if not preset:
        continue
      resolved = fields(load_config(name, preset))
      diffs[preset] = {
        key: value
        for key, value in resolved.items()
        if default.get(key) != value
      }
      diffs[preset].update(
        {key: None for key in default if key not in resolved}
      )
    record[name] = {
      "order": list(base.keys()),
      "default": default,
      "presets": diffs,
    }
  return record


@pytest.fixture(scope="module")
def current():
  return snapshot()


@pytest.fixture(scope="module")
def recorded():
  return json.loads(RECORD.read_text())


def test_every_config_and_preset_is_recorded(current, recorded):
  """A new config file or preset is recorded as it is first written (the
  module docstring's `--write`); a recorded one does not disappear."""
  write = (
    "record it: .venv/bin/python tests/experiments/test_config_presets.py "
    "--write"
  )
  assert sorted(current) == sorted(recorded), write
  for name in current:
    now, then = current[name]["presets"], recorded[name]["presets"]
    assert sorted(now) == sorted(then), f"configs/{name}.py: {write}"


@pytest.mark.parametrize("name", config_names())
def test_defaults_and_presets_are_unchanged(name, current, recorded):
  now, then = current[name], recorded[name]
  assert now["order"] == then["order"]
  changed = {
    key: (then["default"].get(key), now["default"].get(key))
    for key in set(now["default"]) | set(then["default"])
    if now["default"].get(key) != then["default"].get(key)
  }
  assert not changed, f"configs/{name}.py's default: {changed}"
  for preset, diff in then["presets"].items():
    assert now["presets"].get(preset) == diff, f"configs/{name}.py:{preset}"


if __name__ == "__main__":
  if sys.argv[1:] != ["--write"]:
    sys.exit(__doc__)
  RECORD.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
  print(f"wrote {RECORD}")
