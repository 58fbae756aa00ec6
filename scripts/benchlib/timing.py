"""Timing and reporting helpers for the benchmarks (no RTRL code here).

Timing protocol: AOT-compile (`compiled`), one warm-up call, then best of N
calls with `jax.block_until_ready` (`run_timed`), interleaved across
configurations by the caller so they see the same machine load.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np


def count_floats(tree) -> int:
  """Real numbers held by `tree` (a complex entry counts two)."""
  return int(
    sum(
      np.prod(leaf.shape) * (2 if jnp.iscomplexobj(leaf) else 1)
      for leaf in jax.tree_util.tree_leaves(tree)
    )
  )


def fit_exponent(ns, values) -> float:
  """Slope of log(value) against log(n), least squares; nan if < 2 points."""
  pairs = [(n, v) for n, v in zip(ns, values) if v and v > 0]
  if len(pairs) < 2:
    return float("nan")
  x, y = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
  return float(np.polyfit(x, y, 1)[0])


def scan_steps(body, carry, steps):
  """`body` applied `steps` times in one `lax.scan` (for jit-then-time)."""
  return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=steps)[
    0
  ]


def compiled(fn, *args):
  """AOT-compiles `fn` on `args`; returns (callable, args, compile seconds).

  The seconds are `(wall, process CPU)`. CPU time does not grow with other
  users' load the way wall time does (roughly what a quiet machine spends).
  """
  wall, cpu = time.perf_counter(), time.process_time()
  exe = jax.jit(fn).lower(*args).compile()
  return exe, args, (time.perf_counter() - wall, time.process_time() - cpu)


def run_timed(entry) -> float:
  exe, args, _ = entry
  start = time.perf_counter()
  jax.block_until_ready(exe(*args))
  return time.perf_counter() - start


def matmul_gflops(size: int = 2048, repeats: int = 5) -> float:
  """The machine's large-matmul float32 throughput, GFLOP/s (best of N)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
  entry = compiled(lambda a: jnp.matmul(a, a, precision="highest"), x)
  run_timed(entry)
  best = min(run_timed(entry) for _ in range(repeats))
  return 2 * size**3 / best / 1e9


def memory_gbps(floats: int = 64 * 2**20, repeats: int = 5) -> float:
  """The machine's streaming bandwidth, GB/s: one read and one write of a
  `floats`-long float32 array (256 MiB by default, far beyond the caches)
  by an element-wise op (best of N)."""
  x = jnp.ones((floats,), jnp.float32)
  entry = compiled(lambda a: a * 2.0 + 1.0, x)
  run_timed(entry)
  best = min(run_timed(entry) for _ in range(repeats))
  return 2 * 4 * floats / best / 1e9


def load_average() -> str:
  try:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
  except OSError:
    return "load average n/a"


def fmt_ms(seconds):
  return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def fmt_count(x):
  if x is None:
    return "-"
  for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
    if x >= size:
      return f"{x / size:.3g}{unit}"
  return str(x)
