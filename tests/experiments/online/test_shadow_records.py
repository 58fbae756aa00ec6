"""`config.shadow_every` in the Copy, char-PTB and sequential-CIFAR experiments: an exact-RTRL
shadow on the same trajectory adds `cosine_to_rtrl` to each record
(`experiments/online/shadow_records.py`) and changes nothing the run trains:
the records' training numbers equal those of the run without it. Exact RTRL
against its own shadow logs a cosine of 1; TBPTT with a shadow is a clear
error."""

import json

from conftest import dataset_dir_or_skip
from helpers import load_config
from helpers import write_fake_cifar
import pytest

from experiments.online import copy_experiment
from experiments.online import ptb_experiment
from experiments.online import seq_image_experiment

SHADOW_FIELDS = ("cosine_to_rtrl",)
TIMING_FIELDS = ("steps_per_second", "examples_per_second")


def tiny_copy(**overrides):
  config = load_config(
    "copy_task",
    "small",
    hidden_size=8,
    rank=2,
    num_steps=60,
    chunk_steps=20,
    log_every=20,
    checkpoint_every=60,
  )
  config.update(overrides)
  return config


def tiny_ptb(**overrides):
  config = load_config(
    "ptb",
    "small",
    hidden_size=8,
    rank=2,
    batch_size=4,
    num_steps=40,
    chunk_steps=20,
    log_every=20,
    eval_every=40,
    checkpoint_every=40,
    eval_batch_size=256,
    data_dir=str(dataset_dir_or_skip("ptb")),
  )
  config.update(overrides)
  return config


def tiny_seq_cifar(data_dir: str, **overrides):
  """One GRU-4 layer on 8 random images, 2 streams, 4 images a stream."""
  config = load_config(
    "seq_cifar",
    "small",
    cell="gru",
    num_layers=1,
    head="identity",
    hidden_size=4,
    batch_size=2,
    estimator="uoro",
    data_dir=data_dir,
    chunk_steps=1024,
    log_every=2048,
    eval_every=4096,
    checkpoint_every=4096,
    num_steps=4096,
    eval_batch_size=4,
  )
  config.update(overrides)
  return config


def read_records(workdir):
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  return [json.loads(line) for line in lines]


def assert_same_training(on, off):
  """The records agree in every field but the shadow's and the timings'
  (floats to rounding: the shadow's program may fuse differently)."""
  drop = SHADOW_FIELDS + TIMING_FIELDS
  assert len(on) == len(off)
  for a, b in zip(on, off):
    a = {k: v for k, v in a.items() if k not in drop}
    b = {k: v for k, v in b.items() if k not in drop}
    assert a.keys() == b.keys()
    for key in a:
      if isinstance(a[key], str):
        assert a[key] == b[key], key
      else:
        assert a[key] == pytest.approx(b[key], rel=1e-6), key


@pytest.mark.parametrize("curriculum", ["official", "output_only"])
def test_copy_shadow_logs_cosine_and_changes_no_training_number(
  tmp_path, curriculum
):
  copy_experiment.train(
    tiny_copy(curriculum=curriculum, shadow_every=5), str(tmp_path / "on")
  )
  copy_experiment.train(tiny_copy(curriculum=curriculum), str(tmp_path / "off"))
  on, off = read_records(tmp_path / "on"), read_records(tmp_path / "off")
  assert [r["step"] for r in on] == [20, 40, 60]
  assert all(-1.0 <= r["cosine_to_rtrl"] <= 1.0 for r in on)
  assert all("cosine_to_rtrl" not in r for r in off)
  assert_same_training(on, off)


def test_copy_exact_rtrl_shadow_logs_cosine_one_per_run(tmp_path):
  record = copy_experiment.train(
    tiny_copy(estimator="rtrl", num_seeds=2, shadow_every=3),
    str(tmp_path / "run"),
  )
  assert record["cosine_to_rtrl"] == pytest.approx([1.0, 1.0], abs=1e-5)


@pytest.mark.slow  # Default suite time; `scripts/test.sh --slow` runs it.
def test_ptb_shadow_logs_cosine_and_changes_no_training_number(tmp_path):
  on = ptb_experiment.train(tiny_ptb(shadow_every=4), str(tmp_path / "on"))
  off = ptb_experiment.train(tiny_ptb(), str(tmp_path / "off"))
  assert [r["step"] for r in on] == [20, 40]
  assert all(-1.0 <= r["cosine_to_rtrl"] <= 1.0 for r in on)
  assert_same_training(on, off)
  exact = ptb_experiment.train(
    tiny_ptb(estimator="rtrl", shadow_every=2, num_steps=20, eval_every=20),
    str(tmp_path / "exact"),
  )
  assert exact[-1]["cosine_to_rtrl"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
  "overrides",
  [dict(shadow_every=-1), dict(shadow_every=1, estimator="tbptt")],
)
def test_copy_bad_shadow_every_is_a_clear_error(tmp_path, overrides):
  with pytest.raises(ValueError, match="config.shadow_every"):
    copy_experiment.train(tiny_copy(**overrides), str(tmp_path / "run"))
  assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.slow  # Default suite time; `scripts/test.sh --slow` runs it.
def test_seq_cifar_shadow_logs_cosine_at_last_pixels(tmp_path):
  """The cosine is taken at each image's last pixel (the only step with a
  loss), so every reported window has one; training is unchanged, and
  exact RTRL against its shadow logs 1."""
  data_dir = write_fake_cifar(tmp_path / "cifar")
  on = seq_image_experiment.train(
    tiny_seq_cifar(data_dir, shadow_every=256), str(tmp_path / "on")
  )
  off = seq_image_experiment.train(
    tiny_seq_cifar(data_dir), str(tmp_path / "off")
  )
  assert [r["step"] for r in on] == [2048, 4096]
  assert all(-1.0 <= r["cosine_to_rtrl"] <= 1.0 for r in on)
  assert all("cosine_to_rtrl" not in r for r in off)
  assert_same_training(on, off)
  exact = seq_image_experiment.train(
    tiny_seq_cifar(data_dir, estimator="rtrl", shadow_every=1024, num_seeds=2),
    str(tmp_path / "exact"),
  )
  assert exact[-1]["cosine_to_rtrl"] == pytest.approx([1.0, 1.0], abs=1e-5)


@pytest.mark.parametrize(
  "overrides,message",
  [
    (dict(shadow_every=100), "divide the 1024 pixels"),
    (dict(shadow_every=1024, estimator="tbptt"), "TBPTT and stacks"),
    (dict(shadow_every=1024, num_layers=2), "TBPTT and stacks"),
  ],
)
def test_seq_cifar_bad_shadow_every_is_a_clear_error(overrides, message):
  """Named before any data is read."""
  with pytest.raises(ValueError, match=f"config.shadow_every.*{message}"):
    seq_image_experiment.make_experiment(tiny_seq_cifar("", **overrides))
