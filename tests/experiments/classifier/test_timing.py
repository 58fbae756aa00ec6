"""The one RLS timing stack (`experiments/classifier/timing.py`, used by
`scripts/bench_rls.py` and the `rls_runtime` target): Table I's formulas on
the paper's FNN, and every timed call runs on every network."""

from helpers import load_config
import numpy as np
import pytest

from experiments.classifier import tasks
from experiments.classifier import timing

TINY = {
  "mnist": dict(hidden_size=8),
  "cifar10": dict(conv_features=(4, "pool", 4), hidden_size=8),
  "imdb": dict(vocab_size=20, max_length=3, embed_dim=2, hidden_size=3),
}


def test_table_one_ratios_of_the_paper_fnn():
  config = load_config("mnist", "rls")  # 784-512-10, batch 128.
  ratios = timing.table_one_ratios(tasks.MNIST, config)
  assert ratios["hidden 784->512: 1 + N_(l-1)/M"] == 1 + 784 / 128
  assert ratios["output 512->10: 1 + N_(l-1)/M"] == 1 + 512 / 128
  sgd = 784 * 128 * 512 + 512 * 128 * 10
  extra = 784**2 * 512 + 512**2 * 10
  assert ratios["whole net, Table I FLOPs"] == pytest.approx(1 + extra / sgd)
  assert ratios["hybrid (RLS on hidden only), over fwd+bwd"] == (
    pytest.approx(1 + 784**2 * 512 / (3 * sgd))
  )
  full = timing.predicted_ratio(tasks.MNIST, config)["ratio"]
  assert (
    1 < timing.predicted_ratio(tasks.MNIST, config, hybrid=True)["ratio"] < full
  )


def test_layer_shapes_count_positions_and_time_steps():
  cifar = load_config("cifar10", "rls", batch_size=2, **TINY["cifar10"])
  assert timing.layer_shapes(tasks.CIFAR10, cifar) == [
    ("conv0", 27, 4, 2 * 32 * 32),
    ("conv1", 36, 4, 2 * 16 * 16),
    ("hidden", 8 * 8 * 4, 8, 2),
    ("output", 8, 10, 2),
  ]
  imdb = load_config("imdb", "rls", batch_size=2, **TINY["imdb"])
  shapes = timing.layer_shapes(tasks.IMDB, imdb)
  assert [rows for *_, rows in shapes] == [6, 6, 6, 6, 2]


# The MNIST FNN compiles in seconds; the conv and LSTM nets take ~30 s each.
@pytest.mark.parametrize(
  "name",
  [
    "mnist",
    pytest.param("cifar10", marks=pytest.mark.slow),
    pytest.param("imdb", marks=pytest.mark.slow),
  ],
)
def test_time_steps_and_breakdown_on_every_network(name):
  task = tasks.BY_NAME[name]
  configs = {
    preset: load_config(name, preset, batch_size=4, **TINY[name])
    for preset in ("rls", "adam_mse")
  }
  seconds = timing.time_steps(task, configs, steps=1, repeats=1)
  assert set(seconds) == {"rls", "adam_mse"}
  parts = timing.time_breakdown(
    task, configs["rls"], steps=1, repeats=1, statistic=np.median
  )
  assert "clip + RLS update (u, h, P∇, P update)" in parts
  assert all(value > 0 for value in [*seconds.values(), *parts.values()])
