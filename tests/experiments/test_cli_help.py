"""`python -m experiments.NAME --help` lists the config's fields (name,
default, the comment from the config file) and presets and exits 0; a
config the command line cannot build (misspelt field or preset, no file, a
value of the wrong type) is one line on stderr and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import REPO_ROOT
from helpers import load_config
import pytest

from experiments.loop import cli
from experiments.loop import config_files
from experiments.loop import config_help

EXPERIMENTS = sorted(
  p.stem
  for p in (REPO_ROOT / "experiments").glob("*.py")
  if p.stem != "__init__"
)


@pytest.fixture(autouse=True)
def _in_repo_root(monkeypatch):
  monkeypatch.chdir(REPO_ROOT)  # --config paths are relative, as typed.


def _main(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "-m", *args],
    cwd=REPO_ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=300,
  )


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_help_lists_every_field_with_its_default_and_comment(name):
  path = f"configs/{name}.py"
  text = config_help.help_text(name, path)
  config = load_config(name)
  docs = config_help.field_docs(path)
  for field, value in config_help.flat_fields(config):
    if not isinstance(value, type(config)):
      assert f"    {field} = {value!r}" in text, field
  for field in config_help.flat_fields(config):
    top = field[0].split(".")[0]
    assert docs[top].text, f"{path}: {top} has no comment"
  # Each comment is shown (wrapped, so compare words).
  words = " ".join(text.replace("#", " ").split())
  for top in docs:
    if top in config:
      assert " ".join(docs[top].text.split()) in words, top
  module = config_files.load_config_module(name)
  for preset in getattr(module, "PRESETS", ()):
    assert preset in text


def test_help_shows_a_presets_values():
  text = config_help.help_text("ptb", "configs/ptb.py:small")
  assert "    hidden_size = 64" in text
  assert "configs/ptb.py:small" in text
  assert "Presets (--config=configs/ptb.py:PRESET): small, official" in text


def test_field_comments_come_from_the_config_file_first():
  docs = config_help.field_docs("configs/copy_task.py")
  assert docs["chunk_steps"].note.endswith("output_only: its check period")
  assert docs["rank"].note.startswith("kf_avg, kf_approx")  # common.py's
  # The classifiers' optimiser block does not leak into the online one.
  assert docs["clip_norm"].note.startswith("global-norm clipping")
  assert "rls_hybrid" not in docs["optimizer"].text


@pytest.mark.parametrize(
  "argv,expected",
  [
    (["--config.rnak=4"], "has no field 'rnak' (--config.rnak); did you mean"),
    (["--noconfig.distribted"], "did you mean --config.distributed?"),
    (["--config.mesh_shape[0]=2"], None),
    (["--config.rank", "4"], None),
  ],
)
def test_config_problem_names_the_field_and_the_nearest(argv, expected):
  argv = ["main", "--config=configs/copy_task.py:small", *argv]
  problem = cli.config_problem("copy_task", argv)
  if expected is None:
    assert problem is None
  else:
    assert expected in problem and "\n" not in problem


def test_config_problem_for_nested_fields_presets_and_files():
  problem = cli.config_problem(
    "suite_task",
    [
      "m",
      "--config",
      "configs/suite_task.py",
      "--config.task_settings.lenth=3",
    ],
  )
  assert "did you mean --config.task_settings.length?" in problem
  problem = cli.config_problem("ptb", ["m", "--config=configs/ptb.py:smal"])
  assert "unknown preset 'smal'; did you mean 'small'?" in problem
  problem = cli.config_problem("ptb", ["m", "--config=configs/pdb.py"])
  assert problem.startswith("no config file 'configs/pdb.py'")
  problem = cli.config_problem("mnist", ["m", "--workdir=w"])
  assert problem.startswith("--config is required")


def test_main_help_exits_zero():
  result = _main("experiments.mnist", "--help")
  assert result.returncode == 0, result.stderr
  assert "    hidden_size = 512" in result.stdout
  assert "rls_hybrid_momentum_l1" in result.stdout
  assert "optionally followed by ,small" in result.stdout


@pytest.mark.parametrize(
  "flags,message",
  [
    (
      ["--config=configs/copy_task.py:small", "--config.rnak=4"],
      "Error: configs/copy_task.py has no field 'rnak' (--config.rnak); "
      "did you mean --config.rank?",
    ),
    (
      ["--config=configs/copy_task.py:smal"],
      "Error: configs/copy_task.py: unknown preset 'smal'; did you mean "
      "'small'? (known: 'small', 'official', 'lru_paper')",
    ),
    (
      ["--config=configs/copy_task.py:small", "--config.rank=abc"],
      "Error: flag --config.rank=abc: invalid literal for int() with base "
      "10: 'abc'",
    ),
  ],
)
def test_main_bad_config_is_one_line(tmp_path, flags, message):
  result = _main("experiments.copy_task", f"--workdir={tmp_path}", *flags)
  assert result.returncode == 2
  assert result.stderr.strip() == message
  assert not (tmp_path / "config.json").exists()
