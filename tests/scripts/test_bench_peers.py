"""scripts/bench_peers.py's pieces that need no peer installed: the
argument handling, the report, the checks' statistics, and the peers' test
cases restated on ours. The adapters themselves import their peer: each
test of one is skipped with the reason where the peer is absent (they run
in the peer's venv, `scripts/peers/setup_<peer>.sh`)."""

from __future__ import annotations

import argparse

from jax.experimental import sparse
import numpy as np
import pytest

from scripts import bench_peers
from scripts.benchlib import peers_cases
from scripts.benchlib import peers_common
from scripts.benchlib import peers_report


def test_peers_all_expands_and_unknown_is_refused():
  assert bench_peers.parse_args(["--peers", "all"]).peers == list(
    bench_peers.PEERS
  )
  with pytest.raises(SystemExit):
    bench_peers.parse_args(["--peers", "nosuchpeer"])
  with pytest.raises(SystemExit):
    bench_peers.parse_args(["--batches", "0"])


def test_child_argv_drops_only_peers_and_json():
  argv = ["--peers", "all", "--sizes", "32", "--json=x.json", "--repeats", "3"]
  assert bench_peers.child_argv(argv) == ["--sizes", "32", "--repeats", "3"]


def result(theirs_ms, theirs="vmap"):
  return {
    "algorithm": "rflo",
    "cell": "gru",
    "theirs": theirs,
    "n": 64,
    "batch": 16,
    "ours_ms": 1.0,
    "theirs_ms": theirs_ms,
    "ratio_median": theirs_ms,
    "ratio_min": theirs_ms,
    "ours_state_mib": 0.5,
    "theirs_state_mib": 0.4,
    "loss_trajectory_max_rel": 1e-7,
  }


def test_report_keeps_their_fastest_way_and_marks_the_winner():
  rows = peers_report.fastest_theirs([result(2.0), result(0.8, "batched")])
  assert [r["theirs"] for r in rows] == ["batched"]
  report = {
    "peer": "braintrace",
    "versions": {"braintrace": "0.2.8"},
    "checks": [
      {
        "algorithm": "rflo",
        "cell": "gru",
        "ok": True,
        "cell_max_rel": 1e-16,
        "readout_max_rel": 0.0,
      }
    ],
    "results": [result(2.0), result(0.8, "batched")],
    "skipped": [],
    "cases": [{"case": "R001", "passed": True, "detail": "PASS"}],
  }
  args = argparse.Namespace(vocab=50, repeats=5)
  text = peers_report.report_markdown(
    [report, {"peer": "x", "error": "e"}], args
  )
  assert "| rflo | gru | 64 | 16 | 1 | 0.8 (batched) | 0.80 (0.80) |" in text
  assert "**2.00**" not in text  # their slower way is not reported
  assert "| R001 | yes | PASS |" in text
  assert "Not run: e" in text


def test_mean_squared_z_tells_a_bias_from_noise():
  rng = np.random.default_rng(0)
  exact = rng.normal(size=(50,))
  unbiased = exact + rng.normal(size=(16, 50))
  biased = unbiased + 2.0
  assert peers_common.mean_squared_z(unbiased, exact) < 2.0
  assert peers_common.mean_squared_z(biased, exact) > 20.0


def test_compare_steps_is_relative_and_needs_both_parts():
  ours = ({"W": np.ones((3, 2, 2))}, {"w": np.ones((3, 2)), "b": np.ones(3)})
  close = ({"W": np.ones((3, 2, 2)) * (1 + 1e-13)}, {"w": np.ones((3, 2))})
  far = ({"W": np.ones((3, 2, 2))}, {"w": np.ones((3, 2)) * 1.01})
  assert peers_common.compare_steps(ours, close)["ok"]
  assert not peers_common.compare_steps(ours, far)["ok"]


def test_our_snap_mask_on_a_three_unit_graph():
  """Unit 0 reads all three, unit 1 itself, unit 2 units 0 and 2: SnAp-1
  keeps each weight's own unit, SnAp-2 adds the units that unit reaches in
  one step, SnAp-3 and beyond every unit reachable at all."""
  W = sparse.BCOO.fromdense(np.array([[1, 1, 1], [0, 1, 0], [1, 0, 1]]))
  # Columns: W[0,0], W[0,1], W[0,2], W[1,1], W[2,0], W[2,2].
  masks = {
    n: np.asarray(peers_cases.OurSnapMask(W, n).jacobian_mask)
    for n in (1, 2, 3, 4)
  }
  np.testing.assert_array_equal(
    masks[1], [[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 1]]
  )
  np.testing.assert_array_equal(
    masks[2], [[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 0, 0], [1, 1, 1, 0, 1, 1]]
  )
  np.testing.assert_array_equal(masks[3], masks[4])
  np.testing.assert_array_equal(masks[3][2], [1, 1, 1, 1, 1, 1])


def test_jax_rtrl_cases_restated_on_ours_pass():
  cases = peers_cases.jax_rtrl_cases()
  assert len(cases) == 8
  failed = [c for c in cases if not c["passed"]]
  assert not failed, failed


@pytest.mark.parametrize(
  "module,peer",
  [
    ("scripts.benchlib.peers_sketched_rtrl", "skrtrl"),
    ("scripts.benchlib.peers_jax_rtrl", "jax_rtrl"),
    ("scripts.benchlib.peers_snapjax", "snapjax"),
    ("scripts.benchlib.peers_braintrace_pairs", "braintrace"),
  ],
)
def test_adapter_lists_checked_pairs(module, peer):
  pytest.importorskip(
    peer,
    reason=f"{peer} lives in its own venv (scripts/peers/setup_*.sh)",
  )
  adapter = __import__(module, fromlist=["pairs"])
  args = argparse.Namespace(check_n=12, vocab=50)
  pairs = adapter.pairs(args)
  assert pairs and all(callable(p.check) and callable(p.build) for p in pairs)
