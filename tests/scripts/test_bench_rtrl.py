"""Properties of the benchmark's counters and fitter (no timing is checked)."""

import jax
import numpy as np
import pytest

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import estimators
from scripts import bench_rtrl as bench
from scripts.benchlib.timing import fit_exponent


@pytest.mark.parametrize("cell_name", ["rnn", "rhn", "lstm"])
@pytest.mark.parametrize(
  "name",
  [
    "rtrl",
    "uoro",
    "kf",
    "kf_avg",
    "kf_approx",
    "ok",
    "ok_biased",
    "ktp",
    "sk_rtrl",
  ],
)
def test_memory_counter_matches_analytic_size(cell_name, name):
  for n, rank in ((7, 3),):
    cell = cells.make(cell_name, n)
    params = init_params(cell, jax.random.PRNGKey(0), 4, 4)
    rank = rank if name in bench.RANKED else None
    estimator = estimators.make(name, cell, **({"rank": rank} if rank else {}))
    assert bench.tangent_floats(
      estimator, cell, params["cell"]
    ) == bench.analytic_tangent_floats(name, rank, cell, 4)


def test_memory_exponents_follow_table_1_at_large_n():
  """Analytic sizes (which the counter matches) have Table 1's exponents."""
  cell_sizes = [256, 512, 1024]
  for name, (_, mem_exponent) in bench.PAPER.items():
    if name == "tbptt":
      continue
    floats = [
      bench.analytic_tangent_floats(name, 4, cells.make("rhn", n), 4)
      for n in cell_sizes
    ]
    assert abs(fit_exponent(cell_sizes, floats) - mem_exponent) < 0.05


def test_fit_exponent_recovers_known_exponent():
  rng = np.random.default_rng(0)
  ns = [16, 32, 64, 128]
  for exponent in (1.0, 2.0, 3.0, 4.0):
    noisy = [7e-6 * n**exponent * rng.uniform(0.97, 1.03) for n in ns]
    assert abs(fit_exponent(ns, noisy) - exponent) < 0.05
  assert np.isnan(fit_exponent([16], [1.0]))


def test_tbptt_residuals_grow_linearly_with_truncation():
  cell = cells.make("rhn", 6)
  params = init_params(cell, jax.random.PRNGKey(0), 4, 4)["cell"]
  one, four = (bench.tbptt_residual_floats(cell, params, t) for t in (1, 4))
  assert four == 4 * one > 0


@pytest.mark.slow
def test_smoke_tiny_run(tmp_path, capsys):
  out = tmp_path / "bench.json"
  bench.main(
    [
      "--sizes",
      "4",
      "--ranks",
      "1",
      "--estimators",
      "kf_avg,ok,tbptt",
      "--steps",
      "2",
      "--repeats",
      "1",
      "--truncation",
      "2",
      "--breakdown_sizes",
      "4",
      "--json",
      str(out),
    ]
  )
  printed = capsys.readouterr().out
  assert "OK at n=4" in printed and "GFLOP/s" in printed
  assert "roofline floor" in printed and "GB/s" in printed
  assert "fitted exponents" in printed
  assert out.exists()


def test_roofline_floor_is_the_larger_of_flops_and_tangent_traffic():
  """UORO's step is bound by moving its tangent, OK's at n = 128 by its
  GEMMs; TBPTT has no tangent to move."""
  from scripts.benchlib.costs import flop_floor  # pylint: disable=g-import-not-at-top
  from scripts.benchlib.costs import memory_floor_bytes  # pylint: disable=g-import-not-at-top
  from scripts.benchlib.report import roofline_seconds  # pylint: disable=g-import-not-at-top

  cell = cells.RHN(128)

  def floor(name, rank=None):
    return {
      "floor_flops": flop_floor(name, rank, cell, 50, 16),
      "floor_bytes": memory_floor_bytes(name, rank, cell, 50, 16),
    }

  gflops, gbps = 200.0, 10.0
  uoro, ok = floor("uoro"), floor("ok", 16)
  assert uoro["floor_bytes"] == 2 * 4 * 16 * (128 + 179 * 256)
  assert roofline_seconds(uoro, gflops, gbps) == uoro["floor_bytes"] / 1e10
  assert roofline_seconds(ok, gflops, gbps) == ok["floor_flops"] / 2e11
  assert floor("tbptt")["floor_bytes"] == 0.0


def test_bad_estimator_name_is_rejected():
  with pytest.raises(SystemExit):
    bench.main(["--estimators", "nope"])


def test_generic_twins_follow_their_estimators():
  from scripts.benchlib.costs import methods  # pylint: disable=import-outside-toplevel

  assert methods(["uoro", "ok", "snap1"], [2], generic=True) == [
    ("uoro", None),
    ("generic-uoro", None),
    ("ok", 2),
    ("snap1", None),
    ("generic-snap1", None),
  ]
  assert methods(["uoro"], [2]) == [("uoro", None)]


@pytest.mark.slow
def test_smoke_generic_run(capsys):
  bench.main(
    [
      "--sizes",
      "4",
      "--estimators",
      "uoro,snap1",
      "--generic",
      "--cell",
      "gru",
      "--steps",
      "2",
      "--repeats",
      "1",
      "--breakdown_sizes",
      "none",
    ]
  )
  printed = capsys.readouterr().out
  assert "generic-snap1" in printed
  assert "generic (CustomCell, autodiff) / analytic full step" in printed


@pytest.mark.slow
def test_smoke_snap_orders_run(capsys):
  bench.main(
    [
      "--snap_orders",
      "1,2",
      "--sizes",
      "6",
      "--density",
      "0.3",
      "--steps",
      "2",
      "--repeats",
      "1",
      "--batch_size",
      "2",
    ]
  )
  printed = capsys.readouterr().out
  assert "SnAp-n vs exact RTRL" in printed
  assert "snap-2" in printed and "snap-1" in printed and "mem/rtrl" in printed
