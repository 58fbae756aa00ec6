"""CIFAR-10 and IMDB experiments end to end.

Default suite: tiny fixture datasets in the standard formats, tiny nets: the
command line writes the workdir, a resumed run equals an uninterrupted one,
a vmapped sweep of k equals the single runs, bad configs fail clearly.

Slow (`-m slow`): the `small` presets on the real data learn (fixed seed 0):
CIFAR-10 RLS on the real 4,000/1,000 subset, IMDB RLS and the hybrid.
"""

import json
import pathlib
import subprocess
import sys

from conftest import dataset_dir_or_skip
from helpers import REPO_ROOT
from helpers import load_config
import numpy as np
import pytest

from experiments import data
from experiments.classifier import experiment
from experiments.classifier import tasks


@pytest.fixture(scope="module")
def tiny_cifar_dir(tmp_path_factory) -> pathlib.Path:
  """256 training / 64 test images: noise plus a class-coded corner."""
  folder = tmp_path_factory.mktemp("tiny_cifar") / data.cifar10.FOLDER
  folder.mkdir()
  rng = np.random.default_rng(0)
  for name, n in (("data_batch_1", 256), ("test_batch", 64)):
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    images[:, 0, :10, 0] = np.where(np.arange(10) == labels[:, None], 255, 0)
    data.cifar10.write_batch(folder / name, images, labels)
  return folder.parent


TINY_VGG = [
  "--config.conv_features=(4, 'pool', 4)",
  "--config.hidden_size=8",
  "--config.batch_size=64",
  "--config.epochs=2",
  "--config.eval_chunk_size=32",
]


def test_cifar10_command_line_writes_the_workdir(tiny_cifar_dir, tmp_path):
  workdir = tmp_path / "run"
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.cifar10",
      "--config=configs/cifar10.py:rls_momentum_l1,small",
      f"--workdir={workdir}",
      f"--config.data_dir={tiny_cifar_dir}",
      *TINY_VGG,
    ],
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    check=False,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "step 8/8 | epoch=2" in result.stdout
  assert "SUBSET" in result.stderr  # 256 of 50,000 images is reported.
  config = json.loads((workdir / "config.json").read_text())
  assert config["momentum"] == 0.5 and config["l1"] == 1e-5
  assert config["clip_norm"] == 5.0 and config["loss"] == "mse"
  records = [
    json.loads(line)
    for line in (workdir / "metrics.jsonl").read_text().splitlines()
  ]
  assert [r["epoch"] for r in records] == [1, 2]
  assert len(records[0]["train_loss_curve"]) == 1  # 4 steps, loss_every 10.
  assert all(np.isfinite(r["test_loss"]) for r in records)
  assert (workdir / "summary.json").is_file()


REVIEWS = {
  "pos": ["a good film", "good good acting", "really good", "good fun"],
  "neg": ["a bad film", "bad bad acting", "really bad", "bad fun"],
}


@pytest.fixture(scope="module")
def tiny_imdb(tmp_path_factory):
  root = tmp_path_factory.mktemp("tiny_imdb") / "aclImdb"
  for split in ("train", "test"):
    for label, texts in REVIEWS.items():
      folder = root / split / label
      folder.mkdir(parents=True)
      for copy in range(8):  # 32 reviews per label and split.
        for i, text in enumerate(texts):
          (folder / f"{copy * 4 + i}_1.txt").write_text(text)
  return data.load_imdb(
    root, vocab_size=12, max_length=4, cache_dir=root.parent / "cache"
  )


def tiny_imdb_config(preset="rls", **overrides):
  settings = dict(
    vocab_size=12,
    max_length=4,
    embed_dim=3,
    hidden_size=4,
    batch_size=16,
    epochs=2,
    eval_chunk_size=16,
  )
  return load_config("imdb", preset, **{**settings, **overrides})


def train_imdb(config, workdir, dataset=None):
  return experiment.train(tasks.IMDB, config, str(workdir), dataset)


def test_imdb_resumed_run_equals_uninterrupted_run(tiny_imdb, tmp_path):
  whole = train_imdb(tiny_imdb_config(), tmp_path / "whole", tiny_imdb)
  train_imdb(tiny_imdb_config(epochs=1), tmp_path / "split", tiny_imdb)
  resumed = train_imdb(tiny_imdb_config(), tmp_path / "split", tiny_imdb)
  assert [r["step"] for r in resumed] == [4, 8]
  for key in ("train_loss", "test_loss", "test_accuracy", "train_loss_curve"):
    assert [r[key] for r in resumed] == [r[key] for r in whole], key


def test_the_partial_batch_is_a_step_of_every_epoch(tiny_imdb, tmp_path):
  """64 reviews in batches of 24: two full batches and one of 16 per epoch
  (PyTorch's default), or two when `keep_partial_batch` is off; every
  review appears once per epoch."""
  kept = train_imdb(
    tiny_imdb_config(batch_size=24, loss_every=1), tmp_path / "kept", tiny_imdb
  )
  dropped = train_imdb(
    tiny_imdb_config(batch_size=24, loss_every=1, keep_partial_batch=False),
    tmp_path / "dropped",
    tiny_imdb,
  )
  assert [r["step"] for r in kept] == [3, 6]
  assert [len(r["train_loss_curve"]) for r in kept] == [3, 3]
  assert [r["step"] for r in dropped] == [2, 4]
  full, partial = experiment.shuffled_batches(
    np.asarray([0, 7], np.uint32), 1, 64, 2, 24, 16
  )
  assert sorted(np.concatenate([np.ravel(full), partial])) == list(range(64))


def test_imdb_sweep_of_k_equals_single_runs(tiny_imdb, tmp_path):
  swept = train_imdb(
    tiny_imdb_config(ratios=(0.1, 1.0), epochs=1), tmp_path / "sweep", tiny_imdb
  )[-1]
  for index, ratio in enumerate((0.1, 1.0)):
    single = train_imdb(
      tiny_imdb_config(ratio=ratio, epochs=1), tmp_path / f"k{ratio}", tiny_imdb
    )[-1]
    np.testing.assert_allclose(
      swept["train_loss"][index], single["train_loss"], rtol=1e-5
    )
    np.testing.assert_allclose(
      swept["test_loss"][index], single["test_loss"], rtol=1e-5
    )
  assert swept["train_loss"][0] != swept["train_loss"][1]


@pytest.mark.parametrize(
  "name,arg",
  [("cifar10", "sgd"), ("imdb", "rls,big"), ("mnist", "rls,adam_ce")],
)
def test_unknown_preset_is_an_error(name, arg):
  with pytest.raises(ValueError, match="unknown optimiser preset"):
    load_config(name, arg)


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_test_limit_keeps_the_first_test_examples(name):
  """`test_limit` (as `reproduce.py --plan` sets it) keeps the first N test
  examples of MNIST and CIFAR-10; 0 keeps all."""
  n_train, n_test = 256, 64
  dataset = {
    "train_images": np.zeros(
      (n_train, 784 if name == "mnist" else 3072), np.float32
    ),
    "train_labels": np.arange(n_train) % 10,
    "test_images": np.arange(n_test * 3, dtype=np.float32).reshape(n_test, 3)
    / 1000,
    "test_labels": np.arange(n_test) % 10,
  }
  if name == "cifar10":
    dataset["train_images"] = dataset["train_images"].reshape(-1, 32, 32, 3)
  task = {"mnist": tasks.MNIST, "cifar10": tasks.CIFAR10}[name]
  for limit, kept in ((16, 16), (0, n_test)):
    config = load_config(name, "rls,small")
    config.test_limit = limit
    arrays, _ = task.arrays(config, dataset)
    assert len(arrays["test_labels"]) == len(arrays["test_inputs"]) == kept
    np.testing.assert_array_equal(
      arrays["test_labels"], dataset["test_labels"][:kept]
    )


def test_negative_test_limit_is_named():
  config = load_config("mnist", "rls,small")
  config.test_limit = -1
  with pytest.raises(ValueError, match="config.test_limit"):
    experiment.validate(config)


def test_imdb_sequence_length_below_one_is_an_error(tmp_path):
  with pytest.raises(ValueError, match="max_length"):
    train_imdb(tiny_imdb_config(max_length=0), tmp_path)


def test_paper_settings_per_network():
  cifar = load_config("cifar10", "rls_momentum_l1")
  imdb = load_config("imdb", "rls_hybrid_momentum_l1")
  assert (cifar.clip_norm, cifar.l1, cifar.momentum) == (5.0, 1e-5, 0.5)
  assert (imdb.clip_norm, imdb.l1, imdb.momentum) == (1.0, 1e-6, 0.5)
  for config in (cifar, imdb):
    assert config.batch_size == 128 and config.epochs == 100
    assert (
      config.forgetting_factor,
      config.ratio,
      config.gradient_scale,
      config.init_scale,
    ) == (1.0, 0.1, 1.0, 1.0)
  assert imdb.optimizer == "rls_hybrid" and imdb.loss == "cross_entropy"
  assert cifar.pool_after_conv5 and cifar.hidden_size == 1024
  assert cifar.output_gradient_scale == 1.0 and cifar.keep_partial_batch
  from experiments.reproduce import rls_paper  # pylint: disable=g-import-not-at-top

  assert rls_paper._scale_overrides("mnist", "paper")[1]["param_init"] == (
    "pytorch"
  )


# Learning on the real data with the `small` presets (seed 0).

CIFAR_SMALL_RLS_ACCURACY = 0.40  # Chance is 0.10.
IMDB_SMALL_ACCURACY = 0.75


@pytest.mark.slow
def test_cifar10_small_rls_learns(tmp_path):
  root = dataset_dir_or_skip("cifar10")
  config = load_config("cifar10", "rls,small", data_dir=str(root))
  record = experiment.train(tasks.CIFAR10, config, str(tmp_path))[-1]
  print(f"\ncifar10 small rls: {record}")
  assert record["test_accuracy"] >= CIFAR_SMALL_RLS_ACCURACY


@pytest.fixture(scope="module")
def imdb_small_data():
  root = dataset_dir_or_skip("imdb")
  config = load_config("imdb", "rls,small")
  return data.load_imdb(root, config.vocab_size, config.max_length)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["rls", "rls_hybrid"])
def test_imdb_small_reaches_75_percent(imdb_small_data, tmp_path, preset):
  config = load_config("imdb", f"{preset},small")
  record = train_imdb(config, tmp_path, imdb_small_data)[-1]
  print(f"\nimdb small {preset}: {record}")
  assert record["test_accuracy"] >= IMDB_SMALL_ACCURACY


@pytest.mark.slow
def test_rls_fig4_target_runs_all_networks(tmp_path, monkeypatch):
  """`scripts/reproduce.py rls_fig4`, shrunk: a vmapped k sweep per network."""
  monkeypatch.setenv("DATA_DIR", str(dataset_dir_or_skip("cifar10").parent))
  from experiments.reproduce import common
  from experiments.reproduce import rls_paper

  result = rls_paper.rls_fig4(
    "small",
    str(tmp_path),
    common.Mode({"epochs": 1, "train_limit": 512, "test_limit": 500}),
  )
  assert len(result.table) == 3 * len(rls_paper.SWEEP_VALUES)
  assert all(0.0 <= row["test_accuracy_mean"] <= 1.0 for row in result.table)
  assert (tmp_path / "rls_fig4" / "figure.png").stat().st_size > 0
