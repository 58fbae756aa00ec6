#!/usr/bin/env python
"""The small dense factorisations of r-OK's reduction, batched, per call.

Every r-OK step factorises, per example, three `(r+1, r+1)` matrices: the
two Gram matrices' eigendecompositions (`rtrl.linalg.gram_factor`, by SVD)
and the core's SVD (`rtrl.kronecker.low_rank`). On a GPU each is one
batched library call (cuSOLVER's Jacobi SVD for matrices up to 32 x 32)
whose cost is latency, not FLOPs. This times, side by side in one run, the
candidates for that work on `(B, c, c)` symmetric positive semi-definite
batches (B = examples x runs): `jnp.linalg.svd`, `jnp.linalg.eigh`,
`jnp.linalg.cholesky`, `jnp.linalg.qr` and, on CPU, the one-sided Jacobi
SVD of `rtrl.cpu_kernels.svd` that `rtrl.linalg.small_svd` uses there
("jacobi"), each called `--steps` times in a `lax.scan` whose carry feeds
the next call (so nothing is hoisted), in ms per call.

  python -m scripts.bench_small_linalg --sizes 2,3,9,17 --batches 16,320
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp

from rtrl import cpu_kernels
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import run_timed


def _svd(a):
  u, s, _ = jnp.linalg.svd(a)
  return u * s[..., None, :]


def _eigh(a):
  w, v = jnp.linalg.eigh(a)
  return v * w[..., None, :]


def _cholesky(a):
  c = a.shape[-1]
  return jnp.linalg.cholesky(a + 1e-3 * jnp.eye(c, dtype=a.dtype))


def _qr(a):
  q, r = jnp.linalg.qr(a)
  return q @ r


def _jacobi(a):
  u, s, _ = cpu_kernels.svd(a)
  return u * s[..., None, :]


FACTORISATIONS = {
  "svd": _svd,
  "eigh": _eigh,
  "cholesky": _cholesky,
  "qr": _qr,
  "jacobi": _jacobi,
}


def scanned(factorise, steps):
  """`steps` dependent calls: each input is the previous output's Gram
  matrix, renormalised (stays PSD and O(1))."""

  def body(a, _):
    f = factorise(a)
    g = jnp.einsum("bij,bkj->bik", f, f)
    g = g / jnp.maximum(jnp.max(jnp.abs(g), axis=(1, 2), keepdims=True), 1e-30)
    return g + jnp.eye(a.shape[-1], dtype=a.dtype), None

  return lambda a: jax.lax.scan(body, a, None, length=steps)[0]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="2,3,9,17")
  parser.add_argument("--batches", default="16,320")
  parser.add_argument("--steps", type=int, default=50)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)
  sizes = [int(s) for s in args.sizes.split(",")]
  batches = [int(b) for b in args.batches.split(",")]
  factorisations = dict(FACTORISATIONS)
  if not cpu_kernels.svd_usable(max(sizes), jnp.float32):
    del factorisations["jacobi"]  # not a CPU, or no compiler
  print(
    f"device {jax.devices()[0].device_kind}; ms per batched call "
    f"(min over {args.repeats} runs of {args.steps} dependent calls)"
  )
  header = "  batch     c " + "".join(f"{name:>11s}" for name in factorisations)
  print(header)
  for batch in batches:
    for c in sizes:
      x = jax.random.normal(jax.random.PRNGKey(c), (batch, c, c))
      a = jnp.einsum("bij,bkj->bik", x, x)
      row = f"{batch:7d} {c:5d} "
      for factorise in factorisations.values():
        entry = compiled(scanned(factorise, args.steps), a)
        run_timed(entry)
        best = min(run_timed(entry) for _ in range(args.repeats))
        row += f"{1e3 * best / args.steps:11.4f}"
      print(row, flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
