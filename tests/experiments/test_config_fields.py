"""Configs show what they run: each `configs/NAME.py` is pure data listing
every field `experiments/NAME.py` reads, and the experiment reads every
field its config lists, for every preset (`config_reads` finds the reads
statically, following the code each main reaches)."""

import ast
import re

from config_reads import REPO_ROOT
from config_reads import config_reads
from helpers import load_config
import pytest

from experiments.loop.config_files import load_config_module as config_module

CONFIGS = REPO_ROOT / "configs"
EXPERIMENTS = (
  "copy_task",
  "ptb",
  "seq_cifar",
  "gradient_cosine",
  "suite_task",
  "rl",
)
CLASSIFIERS = ("mnist", "cifar10", "imdb")


def presets(name: str) -> list[str]:
  """Every preset `configs/NAME.py` takes ("" is the default)."""
  module = config_module(name)
  modifiers = ("",) + tuple("," + m for m in getattr(module, "MODIFIERS", ()))
  if name in CLASSIFIERS:
    return [p + s for p in module.PRESETS for s in modifiers]
  return [""] + list(getattr(module, "PRESETS", ()))


CASES = [
  (name, preset)
  for name in EXPERIMENTS + CLASSIFIERS
  for preset in presets(name)
]


# configs/common.py: the blocks and presets several config files share.
SHARED = {"__init__", "common"}


def test_every_experiment_has_a_config():
  mains = {p.stem for p in (REPO_ROOT / "experiments").glob("*.py")}
  configs = {p.stem for p in CONFIGS.glob("*.py")} - SHARED
  assert mains - {"__init__"} == configs == set(EXPERIMENTS + CLASSIFIERS)


@pytest.mark.parametrize("name,preset", CASES)
def test_config_lists_every_field_read_and_nothing_else(name, preset):
  reads = config_reads(f"experiments.{name}")
  fields = set(load_config(name, preset).keys())
  missing = reads.read - reads.stored - fields
  assert not missing, f"experiments/{name} reads fields its config lacks"
  unread = fields - reads.read
  assert not unread, f"configs/{name}.py:{preset} lists fields nothing reads"


def test_reads_are_found():
  """The scan sees through the shared modules (a guard on the scan itself:
  a field read three modules down, by a checks call, by a swept list)."""
  reads = config_reads("experiments.copy_task").read
  assert {"rank", "keep_checkpoints", "max_length", "learning_rates"} <= reads
  assert "conv_features" not in reads  # CIFAR-10's, not reached.
  assert "conv_features" in config_reads("experiments.cifar10").read


@pytest.mark.parametrize("name", [*EXPERIMENTS, *CLASSIFIERS, "common"])
def test_config_file_is_pure_data(name):
  """It imports ml_collections and the shared config module only: nothing
  from experiments/ or the libraries, so every value is written in
  configs/."""
  tree = ast.parse((CONFIGS / f"{name}.py").read_text())
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      imported.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      imported.update(f"{node.module}.{a.name}" for a in node.names)
  allowed = {"ml_collections", "ml_collections.config_dict", "configs.common"}
  if name == "common":
    allowed = {"difflib", "ml_collections", "ml_collections.config_dict"}
  assert imported <= allowed, imported


def test_no_experiment_restates_a_default():
  """No `config.get(name, default)`: a field is read as `config.name`."""
  offenders = []
  for path in (REPO_ROOT / "experiments").rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
      if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and (
          (
            isinstance(node.func.value, ast.Name)
            and node.func.value.id == "config"
          )
          or (
            isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "config"
          )
        )
      ):
        offenders.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
  assert not offenders, offenders


@pytest.mark.parametrize("name", EXPERIMENTS + CLASSIFIERS)
def test_docstring_commands_name_real_presets(name):
  """Each command in the config's docstring runs this experiment with a
  preset the config takes."""
  doc = config_module(name).__doc__
  commands = re.findall(
    r"python -m experiments\.(\w+) --config[ =]configs/(\w+)\.py(?::([\w,]+))?",
    doc,
  )
  assert commands, f"configs/{name}.py's docstring shows no command"
  for experiment, config_name, preset in commands:
    assert experiment == config_name == name
    load_config(name, preset)
