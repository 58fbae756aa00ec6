"""A run saved by an earlier version resumes: its `config.json` lacks fields
that the config files list today (added since, at the value that reproduces
what it computed: the experiment's `Experiment.resume_defaults`, or
bookkeeping fields),
and the run goes on from its checkpoint."""

import json

from helpers import load_config
import pytest

from experiments.loop import workdir as workdir_lib
from experiments.online.copy_experiment import train

# Fields today's Copy config lists that runs saved before them lack.
ADDED_SINCE = (
  "lru_r_min",  # listed since configs became pure data
  "lru_r_max",
  "num_layers",
  "head",
  "model_size",
  "readout",
  "optimizer",
  "init_stddev",
  "cell_clip_norm",
  "length_rule",
  "weight_decay",
  "recurrence_learning_rate_factor",
  "learning_rate_schedule",
  "warmup_updates",
  "matmul_precision",  # bookkeeping
)


def tiny(num_steps: int):
  return load_config(
    "copy_task",
    hidden_size=4,
    num_steps=num_steps,
    chunk_steps=10,
    log_every=10,
    checkpoint_every=10,
  )


def test_run_saved_without_later_fields_resumes(tmp_path):
  train(tiny(20), str(tmp_path))
  path = tmp_path / workdir_lib.CONFIG_FILE
  saved = json.loads(path.read_text())
  assert set(ADDED_SINCE) <= set(saved)
  old = {k: v for k, v in saved.items() if k not in ADDED_SINCE}
  path.write_text(json.dumps(old))

  train(tiny(40), str(tmp_path))
  records = workdir_lib.read_metrics(str(tmp_path))
  assert [r["step"] for r in records] == [10, 20, 30, 40]
  assert json.loads(path.read_text())["lru_r_min"] == 0.0  # Now saved.


def test_old_run_with_another_value_is_refused(tmp_path):
  """An absent field counts as its old value only: a saved run that
  differs from today's config in a real field still stops the resume."""
  train(tiny(20), str(tmp_path))
  path = tmp_path / workdir_lib.CONFIG_FILE
  saved = json.loads(path.read_text())
  path.write_text(json.dumps({**saved, "rank": saved["rank"] + 1}))
  with pytest.raises(workdir_lib.ConfigMismatchError, match="rank"):
    train(tiny(40), str(tmp_path))


def test_each_experiment_declares_its_resume_defaults():
  """The run loop keeps no table of other experiments' fields: each
  experiment passes its own (issue 52: one source for each fact)."""
  from experiments.classifier import experiment as classifier  # pylint: disable=g-import-not-at-top
  from experiments.online import copy_experiment  # pylint: disable=g-import-not-at-top
  from experiments.online import ptb_experiment  # pylint: disable=g-import-not-at-top
  from experiments.online import setup as online_setup  # pylint: disable=g-import-not-at-top

  assert not hasattr(workdir_lib, "ADDED_FIELD_DEFAULTS")
  experiment = copy_experiment.make_experiment(tiny(20))
  assert experiment.resume_defaults is copy_experiment.RESUME_DEFAULTS
  assert experiment.resume_defaults["length_rule"] == "uniform"
  assert ptb_experiment.RESUME_DEFAULTS["text_layout"] == "standard"
  assert online_setup.RESUME_DEFAULTS.items() <= (
    ptb_experiment.RESUME_DEFAULTS.items()
  )
  assert "optimizer" not in classifier.RESUME_DEFAULTS  # Always saved there.
  # Each declared field is one its config file lists.
  for name, defaults in (
    ("copy_task", copy_experiment.RESUME_DEFAULTS),
    ("ptb", ptb_experiment.RESUME_DEFAULTS),
  ):
    assert set(defaults) <= set(load_config(name)), name
  mnist, imdb = load_config("mnist"), load_config("imdb")
  assert set(classifier.RESUME_DEFAULTS) <= set(mnist) | set(imdb)
