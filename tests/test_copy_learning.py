"""Copy task end to end through `experiments.copy_task.train`: exact RTRL and
TBPTT climb the curriculum with a fixed seed, and a restarted run resumes
from its checkpoint and matches an uninterrupted run."""

import importlib.util
import json
import os

import flax.serialization
import jax
import numpy as np
import pytest

from conftest import REPO_ROOT
from experiments import copy_task as copy_experiment
from experiments import workdir as workdir_lib


# Fields pinned so that later changes of the shipped defaults (e.g. another
# default estimator) do not change what these tests measure.
PINNED = dict(estimator="rtrl", cell="rhn", hidden_size=32, batch_size=16,
              learning_rate=10 ** -2.5, clip_norm=0.0, accumulate_steps=1,
              seed=0, chunk_steps=100, log_every=100, checkpoint_every=100_000,
              max_length=100, error_threshold=0.15)


def copy_config(**overrides):
  """`configs/copy_task.py` get_config() with `PINNED` and `overrides`
  (the file is loaded by path)."""
  spec = importlib.util.spec_from_file_location(
      "copy_task_config", REPO_ROOT / "configs" / "copy_task.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  config.update({**PINNED, **overrides})
  return config


def first_step_reaching(records, length):
  return next((r["step"] for r in records if r["curriculum_length"] >= length),
              None)


def check_learns(tmp_path, config, target_length):
  """Trains; asserts the run reaches `target_length` and its logs are sane."""
  last = copy_experiment.train(config, str(tmp_path))
  records = workdir_lib.read_metrics(str(tmp_path))
  steps = [r["step"] for r in records]
  assert steps == list(range(config.log_every, config.num_steps + 1,
                             config.log_every))
  for r in records:
    assert {"step", "loss_bits", "curriculum_length",
            "steps_per_second"} <= set(r)
    assert np.isfinite(r["loss_bits"]) and r["steps_per_second"] > 0
  lengths = [r["curriculum_length"] for r in records]
  assert lengths == sorted(lengths)  # the curriculum never goes back
  reached = first_step_reaching(records, target_length)
  assert reached is not None, (
      f"{config.estimator}: curriculum {lengths} never reached "
      f"{target_length} in {config.num_steps} steps")
  assert last == records[-1]
  saved = json.loads((tmp_path / "config.json").read_text())
  assert saved["estimator"] == config.estimator
  assert saved["hidden_size"] == config.hidden_size
  return reached


# Fixed seed 0, 2-core CPU. Observed: T=4 reached at step 1000.
def test_rtrl_rhn16_reaches_length_4(tmp_path):
  """Exact RTRL, RHN-16, batch 16, Adam lr 1e-2, seed 0: curriculum length
  >= 4 within 1300 steps."""
  config = copy_config(estimator="rtrl", cell="rhn", hidden_size=16,
                       batch_size=16, learning_rate=1e-2, seed=0,
                       num_steps=1300, chunk_steps=100, log_every=100,
                       checkpoint_every=100_000)
  check_learns(tmp_path, config, 4)


# Fixed seed 0. Observed: T=4 at step 2900 (T=5 at 4500).
def test_tbptt_rhn32_reaches_length_4(tmp_path):
  """TBPTT-20, RHN-32, batch 16, Adam lr 1e-2, seed 0: curriculum length
  >= 4 within 3500 steps."""
  config = copy_config(estimator="tbptt", truncation=20, cell="rhn",
                       hidden_size=32, batch_size=16, learning_rate=1e-2,
                       seed=0, num_steps=3500, chunk_steps=100, log_every=100,
                       checkpoint_every=100_000)
  check_learns(tmp_path, config, 4)


# Observed: T=4 at step 1000.
@pytest.mark.slow
def test_rtrl_rhn32_default_config_reaches_length_4(tmp_path):
  """Exact RTRL, RHN-32, batch 16, Adam lr 10^-2.5, seed 0 reaches
  curriculum length >= 4 within 1500 steps."""
  config = copy_config(estimator="rtrl", hidden_size=32,
                       learning_rate=10 ** -2.5, num_steps=1500)
  check_learns(tmp_path, config, 4)


# Observed: T=5 at step 4500.
@pytest.mark.slow
def test_tbptt_rhn32_reaches_length_5(tmp_path):
  """TBPTT-20, RHN-32, lr 1e-2, seed 0: curriculum length >= 5 within 5500
  steps."""
  config = copy_config(estimator="tbptt", truncation=20, learning_rate=1e-2,
                       num_steps=5500, log_every=100,
                       checkpoint_every=100_000)
  check_learns(tmp_path, config, 5)


def _final_checkpoint(workdir):
  path = workdir_lib.checkpoint_paths(workdir)[-1]
  return os.path.basename(path), workdir_lib.read_checkpoint_file(path)


def test_resume_from_checkpoint_matches_uninterrupted_run(tmp_path, capsys):
  """Run 100 steps, then rerun the same workdir with num_steps=200: it
  resumes at step 100 (metrics steps 50..200, no duplicates) and its final
  checkpoint (params, optimiser, tangents, data stream, curriculum) and
  losses equal those of an uninterrupted 200-step run with the same seed.
  Rerunning a finished run does nothing."""
  base = dict(estimator="rtrl", cell="rhn", hidden_size=4, batch_size=4,
              learning_rate=1e-2, seed=3, chunk_steps=50, log_every=50,
              checkpoint_every=50)
  whole, split = tmp_path / "whole", tmp_path / "split"
  copy_experiment.train(copy_config(num_steps=200, **base), str(whole))
  copy_experiment.train(copy_config(num_steps=100, **base), str(split))
  assert workdir_lib.latest_checkpoint_step(str(split)) == 100
  capsys.readouterr()
  copy_experiment.train(copy_config(num_steps=200, **base), str(split))
  assert "Resumed from step 100" in capsys.readouterr().out

  got = workdir_lib.read_metrics(str(split))
  want = workdir_lib.read_metrics(str(whole))
  assert [r["step"] for r in got] == [50, 100, 150, 200]
  assert [r["step"] for r in want] == [50, 100, 150, 200]
  np.testing.assert_allclose([r["loss_bits"] for r in got],
                             [r["loss_bits"] for r in want], rtol=1e-5)
  assert [r["curriculum_length"] for r in got] == \
      [r["curriculum_length"] for r in want]

  name_split, ckpt_split = _final_checkpoint(str(split))
  name_whole, ckpt_whole = _final_checkpoint(str(whole))
  assert name_split == name_whole
  leaves_split, tree_split = jax.tree_util.tree_flatten(ckpt_split)
  leaves_whole, tree_whole = jax.tree_util.tree_flatten(ckpt_whole)
  assert tree_split == tree_whole
  for a, b in zip(leaves_split, leaves_whole):
    a, b = np.asarray(a), np.asarray(b)
    if np.issubdtype(a.dtype, np.floating):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    else:
      np.testing.assert_array_equal(a, b)
  assert int(ckpt_split["step"]) == 200

  # A finished run restarted with the same num_steps writes nothing new.
  copy_experiment.train(copy_config(num_steps=200, **base), str(split))
  assert [r["step"] for r in workdir_lib.read_metrics(str(split))] == \
      [50, 100, 150, 200]
