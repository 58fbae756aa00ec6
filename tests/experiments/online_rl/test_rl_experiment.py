"""`python -m experiments.rl`: runs resume exactly, seeds and learning
rates vmapped in one program equal their single runs, early stop freezes
a run, the summary holds the best evaluation, and bad fields are named."""

from __future__ import annotations

import json

from helpers import load_config
import jax
import numpy as np
import pytest

from experiments.loop import checkpoints
from experiments.loop import workdir as workdir_lib
from experiments.online_rl import rl_experiment

TINY = dict(
  memory_length=3,
  hidden_size=6,
  seed=3,
  num_steps=3000,
  chunk_steps=500,
  log_every=500,
  eval_every=1000,
  eval_envs=4,
  eval_steps=50,
  checkpoint_every=1000,
)


def rl_config(**fields):
  config = load_config("rl")
  config.update({**TINY, **fields})
  return config


def final_state(workdir):
  _, raw = checkpoints.read_latest_checkpoint(str(workdir))
  return raw["state"]


def test_vmapped_runs_equal_single_runs(tmp_path, x64):
  """2 seeds x 2 learning rates in one program: each run's state and
  records equal the single run's (float64, 1e-10)."""
  stacked_dir = tmp_path / "stacked"
  rl_experiment.train(
    rl_config(num_seeds=2, learning_rates=(1e-2, 1e-3)), str(stacked_dir)
  )
  saved = json.loads((stacked_dir / "config.json").read_text())
  stacked_state = final_state(stacked_dir)
  stacked_records = workdir_lib.read_metrics(str(stacked_dir))
  summary = json.loads((stacked_dir / "summary.json").read_text())
  assert len(summary["best_eval_return"]) == 4
  for r in (2,):  # seed 3 at the second rate
    run = saved["runs"][r]
    single_dir = tmp_path / f"single{r}"
    rl_experiment.train(
      rl_config(seed=run["seed"], learning_rate=run["learning_rate"]),
      str(single_dir),
    )
    got = jax.tree_util.tree_map(lambda a, r=r: np.asarray(a)[r], stacked_state)
    jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12),
      got,
      final_state(single_dir),
    )
    single_records = workdir_lib.read_metrics(str(single_dir))
    for stacked, single in zip(stacked_records, single_records):
      assert stacked["episodes"][r] == single["episodes"]
      if "eval_return" in single:
        assert stacked["eval_return"][r] == single["eval_return"]


def test_resume_equals_an_uninterrupted_run(tmp_path, x64):
  whole = tmp_path / "whole"
  rl_experiment.train(rl_config(), str(whole))
  parts = tmp_path / "parts"
  rl_experiment.train(rl_config(num_steps=2000), str(parts))
  rl_experiment.train(rl_config(allow_config_change=True), str(parts))
  a, b = (workdir_lib.read_metrics(str(d)) for d in (whole, parts))
  assert [r["step"] for r in a] == [r["step"] for r in b]
  for x, y in zip(a, b):
    assert {k: v for k, v in x.items() if k != "steps_per_second"} == {
      k: v for k, v in y.items() if k != "steps_per_second"
    }
  summary = json.loads((whole / "summary.json").read_text())
  assert summary == json.loads((parts / "summary.json").read_text())
  evals = [r["eval_return"] for r in a if "eval_return" in r]
  assert summary["best_eval_return"] == pytest.approx(max(evals))


def test_early_stop_freezes_the_run(tmp_path):
  """patience=1: the first evaluation that does not improve stops the
  run; its parameters no longer move and no episode is counted after."""
  workdir = tmp_path / "stop"
  rl_experiment.train(
    rl_config(patience=1, num_steps=5000, learning_rate=1e-9), str(workdir)
  )
  summary = json.loads((workdir / "summary.json").read_text())
  records = workdir_lib.read_metrics(str(workdir))
  stopped = [r for r in records if r.get("stopped")]
  assert stopped, "a learning rate of 1e-9 cannot keep improving"
  first = stopped[0]["step"]
  assert summary["stopped_at_step"] == 5000
  assert all(r["episodes"] == 0 for r in records if r["step"] > first)


@pytest.mark.parametrize(
  "fields,message",
  [
    (dict(estimator="nope"), "config.estimator must be one of"),
    (dict(estimator="ok", rank=0), "config.rank"),
    (dict(gamma=1.5), r"config.gamma must be in \(0, 1\]"),
    (dict(lambda_core=2.0), r"config.lambda_core must be in \[0, 1\]"),
    (dict(env="NoSuchEnv-v0"), "config.env"),
    (dict(num_envs=3), "config.chunk_steps"),
    (dict(feedback_alignment="yes"), "config.feedback_alignment"),
  ],
)
def test_bad_fields_are_named(fields, message):
  with pytest.raises(ValueError, match=message):
    rl_experiment.make_experiment(rl_config(**fields))
