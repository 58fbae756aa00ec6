"""The run-loop benchmarks (`bench_seeds.py`, `profile_step.py`,
`bench_small_linalg.py`): their arithmetic and trace reading on synthetic
inputs, and tiny end-to-end runs (slow). No timing is checked."""

import importlib
import json

import pytest


def _load(name):
  """`scripts/NAME.py`, imported from the `scripts` package."""
  return importlib.import_module(f"scripts.{name}")


bench_seeds = _load("bench_seeds")
profile_step = _load("profile_step")
small_linalg = _load("bench_small_linalg")


def test_seeds_summary_divides_by_runs_and_steps():
  """20 runs x 100 steps in 2 s wall against 2 single runs x 100 steps in
  0.5 s: 20 ms per program step, 1 ms per run-step vmapped, 2.5 ms per
  single-run step, 2.5x the throughput."""
  summary = bench_seeds.summarize(
    {"vmapped": [2.0, 1.0], "sequential": [0.5, 0.25]},
    num_runs=20,
    sequential_runs=2,
    steps=100,
  )
  assert summary["program_ms_per_step_vmapped"] == pytest.approx(20.0)
  assert summary["ms_per_run_step_vmapped"] == pytest.approx(1.0)
  assert summary["ms_per_step_single"] == pytest.approx(2.5)
  assert summary["run_steps_per_s_vmapped"] == pytest.approx(1000.0)
  assert summary["vmapped_over_sequential_wall"] == pytest.approx(2.5)
  assert summary["vmapped_over_sequential_cpu"] == pytest.approx(2.5)


def test_seeds_flags_are_checked():
  with pytest.raises(SystemExit):
    bench_seeds.parse_args(["--steps", "150", "--chunk_steps", "100"])
  with pytest.raises(SystemExit):
    bench_seeds.parse_args(["--num_seeds", "2", "--sequential_runs", "3"])


@pytest.mark.parametrize(
  "name,kind",
  [
    ("MemcpyD2H", "memcpy DtoH"),
    ("MemcpyH2D", "memcpy HtoD"),
    ("Memcpy DtoH (Device -> Pinned)", "memcpy DtoH"),
    ("MemcpyD2D", "memcpy/memset on the device"),
    (
      "void batched_svd_parallel_jacobi_32x16<float, float>(int)",
      "cuSOLVER (small SVD, eigh, QR)",
    ),
    (
      "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>",
      "GEMM",
    ),
    ("gemm_fusion_dot_general_61", "GEMM"),
    ("input_reduce_fusion_1", "XLA fusion"),
    ("some_custom_kernel", "other kernel"),
  ],
)
def test_kernel_names_are_sorted_into_kinds(name, kind):
  assert profile_step.kind_of(name) == kind


def test_device_summary_counts_per_chunk_and_per_step():
  """Two chunks of 10 steps: per step a GEMM (3 us) and a fusion (1 us),
  per chunk one copy to the host (the metrics)."""
  events, time = [], 0
  for _ in range(2):
    for _ in range(10):
      events += [
        ("sgemm_kernel", time, 3000),
        ("loop_add_fusion", time + 3000, 1000),
      ]
      time += 5000
    events.append(("MemcpyD2H", time, 500))
    time += 1000
  summary = profile_step.summarize_device(events, num_chunks=2, steps=10)
  assert summary["copies_dtoh_per_chunk"] == 1
  assert summary["copies_htod_per_chunk"] == 0
  assert summary["kernels_per_step"] == 2
  assert summary["by_kind_ms_per_step"]["GEMM"] == pytest.approx(0.003)
  assert summary["device_busy_ms_per_step"] == pytest.approx(
    (20 * 4000 + 2 * 500) / 1e6 / 20
  )
  assert summary["top_kernels"][0]["name"] == "sgemm_kernel"


def test_launches_and_fetches_are_counted_per_chunk():
  events = [
    ("python", "CommonPjRtLoadedExecutable::ExecuteHelper", 1),
    ("python", "ArrayImpl.copy_to_host_async", 1),
    ("python", "ArrayImpl.copy_to_host_async", 1),
    ("python", "something else", 1),
  ] * 3
  counts = profile_step.launches_and_fetches(events, num_chunks=3)
  assert counts == {
    "executable_launches_per_chunk": 1.0,
    "host_fetches_per_chunk": 2.0,
  }


@pytest.mark.slow
def test_seeds_tiny_run(tmp_path, capsys):
  out = tmp_path / "seeds.json"
  assert (
    bench_seeds.main(
      [
        "--num_seeds",
        "2",
        "--steps",
        "4",
        "--chunk_steps",
        "2",
        "--hidden_size",
        "4",
        "--rank",
        "1",
        "--repeats",
        "1",
        "--sequential_runs",
        "1",
        "--json",
        str(out),
      ]
    )
    == 0
  )
  assert "vmapped / sequential throughput" in capsys.readouterr().out
  record = json.loads(out.read_text())
  assert record["runs"] == 2 and record["sequential_runs"] == 1
  assert record["ms_per_step_single"] > 0


@pytest.mark.slow
def test_profile_tiny_run_finds_one_launch_per_chunk(tmp_path, capsys):
  """On the CPU: the traced chunk is one executable launch whatever its
  length, so nothing is launched per step."""
  out = tmp_path / "profile.json"
  assert (
    profile_step.main(
      [
        "--set",
        "hidden_size=4",
        "rank=1",
        "--chunk_steps",
        "3",
        "--json",
        str(out),
      ]
    )
    == 0
  )
  record = json.loads(out.read_text())
  assert record["short"]["executable_launches_per_chunk"] == 1
  assert record["long"]["executable_launches_per_chunk"] == 1
  assert record["per_step_growth"]["launches"] == 0
  assert "per step, from the two chunk lengths" in capsys.readouterr().out


def test_small_linalg_candidates_compute_what_they_replace(x64):
  """Each timed factorisation of a symmetric PSD batch is a factorisation:
  the SVD's and eigh's `U diag(s)` square to `a @ a`, Cholesky's factor to
  `a` plus its shift, QR's product is `a`."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 5))
  a = np.asarray(x @ np.swapaxes(x, 1, 2))
  square = lambda f: np.asarray(f @ np.swapaxes(f, 1, 2))
  np.testing.assert_allclose(square(small_linalg._svd(a)), a @ a, atol=1e-10)
  np.testing.assert_allclose(square(small_linalg._eigh(a)), a @ a, atol=1e-10)
  np.testing.assert_allclose(
    square(small_linalg._cholesky(a)), a + 1e-3 * np.eye(5), atol=1e-10
  )
  np.testing.assert_allclose(small_linalg._qr(a), a, atol=1e-10)
  if small_linalg.cpu_kernels.svd_usable(5, np.float64):
    np.testing.assert_allclose(
      square(small_linalg._jacobi(a)), a @ a, atol=1e-10
    )


bench_official = _load("bench_official")


def test_official_intervals_are_the_lone_numbers_it_prints():
  """The official script prints a status line of several numbers, then the
  block's elapsed seconds alone, then another line of several."""
  output = "\n".join(
    [
      "OFFICIAL_START",
      "0 12 999 1000 1 0.52 3.1 0.4",
      "228.25",
      "0.1 0.2 0.3 0.4 0.5",
      "CLEARED",
      "0 9 1999 1000 1 0.3 2.0 0.5",
      "227.5",
      "0.1 0.2 0.3 0.4 0.5",
    ]
  )
  assert bench_official.official_intervals(output) == [228.25, 227.5]


def test_official_needs_two_intervals_and_the_script(tmp_path):
  with pytest.raises(SystemExit):
    bench_official.main(
      [
        "--official_script",
        str(tmp_path / "x.py"),
        "--tf_python",
        "python",
        "--steps",
        "100",
        "--every",
        "100",
      ]
    )
  with pytest.raises(SystemExit, match="no such file"):
    bench_official.run_official(
      type(
        "Args",
        (),
        {
          "official_script": str(tmp_path / "missing.py"),
          "tf_python": "python",
          "steps": 200,
          "every": 100,
        },
      )()
    )


def test_cpu_kernels_tiny_run(capsys):
  """Both tables print, with a ratio per configuration (no timing is
  checked). Skipped where the kernels cannot be built."""
  import jax.numpy as jnp

  from rtrl import cpu_kernels

  if not cpu_kernels.usable(4, jnp.float32):
    pytest.skip("rtrl.cpu_kernels not built here")
  bench = _load("bench_cpu_kernels")
  assert (
    bench.main(
      [
        "--sizes",
        "6",
        "--ranks",
        "4",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--estimators",
        "ok",
      ]
    )
    == 0
  )
  out = capsys.readouterr().out
  assert "The products alone" in out and "4-ok rhn-6" in out
  # The three forms are three routings, the library's untouched.
  routings = {bench.step_routing(*r) for r in bench.STEP_FORMS.values()}
  assert len(routings) == 3
  assert bench.step_routing(True, True).cpu_kernel_svd
  assert not bench.step_routing(False, False).cpu_kernel_products
