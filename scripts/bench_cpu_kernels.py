#!/usr/bin/env python
"""r-OK's Gram matrix, mixing and small SVDs: XLA and LAPACK against
`rtrl.cpu_kernels`.

Two tables, every entry measured side by side in one run (the forms of
each program compiled once and timed alternately, best of `--repeats`):

1. The two products alone on a batch of tall `(M, r)` factors, each
   applied `--steps` times in a `lax.scan` whose carry feeds the next call
   (ms per call, and the rate at which it reads and writes the factors).
2. Full online training steps (`make_online_trainer(...).run`, Adam,
   Copy-task inputs, batch `--batch`) of the estimators that use them
   (r-OK and r-B-OK) in three forms, each an estimator built with its own
   `rtrl.routing.Routing`: "XLA" (XLA's GEMMs, LAPACK's SVDs), "products"
   (the tall-skinny kernels, LAPACK's SVDs) and "+svd" (both kernels, the
   library's default on CPU, `Routing.auto()`: the products from rank
   `cpu_kernel_products_min_rank`, set to 1 here; the Jacobi SVD for the
   `(r + 1)`-square factorisations), with r-KF-AVG at the same rank for
   the overhead ratio the performance issue tracks (it uses neither, so it
   is timed once, with `Routing.auto()`).

  python -m scripts.bench_cpu_kernels                        # RHN-64/128, ranks 12, 16
  python -m scripts.bench_cpu_kernels --skip_ops --ranks 2,4,8 --estimators ok
  python -m scripts.bench_cpu_kernels --cells rhn,gru,lstm --sizes 128 --ranks 16
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys

import jax
import jax.numpy as jnp
import optax

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import cpu_kernels
from rtrl import estimators
from rtrl import online
from rtrl.routing import Routing
from rtrl.tasks import copy_task
from scripts.benchlib.timing import compiled
from scripts.benchlib.timing import load_average
from scripts.benchlib.timing import run_timed

FORMS = ("xla", "kernels")
# Full steps: (products on the kernels, SVDs on the kernel) per form.
STEP_FORMS = {
  "XLA": (False, False),
  "products": (True, False),
  "+svd": (True, True),
}


def step_routing(products: bool, svd: bool) -> Routing:
  """The CPU routes of `Routing.auto()` with r-OK's products on the kernels
  at every rank or on XLA's GEMMs, and its small SVDs on the Jacobi kernel
  or on LAPACK."""
  auto = Routing.auto("cpu")
  return dataclasses.replace(
    auto,
    cpu_kernel_products=products,
    cpu_kernel_products_min_rank=1,
    cpu_kernel_svd=svd,
  )


def _products(form):
  """(Gram matrix, mix) of `(B, M, r)` factors in `form`."""
  if form == "kernels":
    return cpu_kernels.gram_of_columns, cpu_kernels.mix_columns
  gram = lambda x: jnp.einsum("bmi,bmj->bij", x, x, precision="highest")
  mix = lambda x, c: jnp.einsum("bmi,bji->bmj", x, c, precision="highest")
  return gram, mix


def _best_alternating(entries, steps, repeats, warm_up=False):
  """Seconds per step of each compiled entry: best of `repeats` rounds, in
  each round every entry once (so a slower minute hits all of them)."""
  if warm_up:
    for entry in entries.values():
      run_timed(entry)
  best = {key: float("inf") for key in entries}
  for _ in range(repeats):
    for key, entry in entries.items():
      best[key] = min(best[key], run_timed(entry) / steps)
  return best


def op_table(batch, rows_list, ranks, steps, repeats):
  print(
    f"\nThe products alone: batch {batch}, ms per call (GB/s of factor "
    f"traffic: the Gram matrix reads them, the mix reads and writes)"
  )
  print(
    f"{'rows':>8s} {'r':>3s} | {'Gram XLA':>14s} {'Gram kernel':>14s} |"
    f" {'mix XLA':>14s} {'mix kernel':>14s}"
  )
  for rows, rank in itertools.product(rows_list, ranks):
    x = jax.random.normal(jax.random.PRNGKey(rank), (batch, rows, rank))
    x = x / jnp.sqrt(rows * rank)
    coef = jnp.eye(rank)[None] + 0.01 * jax.random.normal(
      jax.random.PRNGKey(1), (batch, rank, rank)
    )
    entries = {}
    for form in FORMS:
      gram, mix = _products(form)

      def gram_chain(x, gram=gram):
        def body(x, _):
          g = gram(x)
          return x * (1.0 + 1e-6 * jnp.trace(g, axis1=1, axis2=2))[
            :, None, None
          ], None

        return jax.lax.scan(body, x, None, length=steps)[0]

      def mix_chain(x, mix=mix):
        return jax.lax.scan(
          lambda x, _: (mix(x, coef), None), x, None, length=steps
        )[0]

      entries[("gram", form)] = compiled(gram_chain, x)
      entries[("mix", form)] = compiled(mix_chain, x)
    best = _best_alternating(entries, steps, repeats)
    size = 4 * batch * rows * rank
    cells_out = []
    for key in [
      ("gram", "xla"),
      ("gram", "kernels"),
      ("mix", "xla"),
      ("mix", "kernels"),
    ]:
      traffic = size * (1 if key[0] == "gram" else 2)
      cells_out.append(
        f"{best[key] * 1e3:7.3f} ({traffic / best[key] / 1e9:4.1f})"
      )
    print(
      f"{rows:8d} {rank:3d} | "
      + " ".join(f"{c:>14s}" for c in cells_out[:2])
      + " | "
      + " ".join(f"{c:>14s}" for c in cells_out[2:]),
      flush=True,
    )


def _trainer_entry(
  cell_name, hidden_size, name, rank, batch, steps, routing=None
):
  cell = cells.make(cell_name, hidden_size)
  vocab = copy_task.VOCAB_SIZE
  params = init_params(cell, jax.random.PRNGKey(0), vocab, vocab)
  estimator = estimators.make(name, cell, rank=rank, routing=routing)
  trainer = online.make_online_trainer(cell, estimator, optax.adam(1e-3))
  state = trainer.init(params, jax.random.PRNGKey(1), batch)
  key = jax.random.PRNGKey(2)
  chunk = online.StepBatch(
    inputs=jax.nn.one_hot(
      jax.random.randint(key, (steps, batch), 0, vocab), vocab
    ),
    targets=jax.random.randint(key, (steps, batch), 0, vocab),
    weights=jnp.ones((steps, batch)),
    resets=jnp.zeros((steps, batch), bool),
  )
  return compiled(trainer.run, state, chunk)


def step_table(
  cell_names, sizes, ranks, estimator_names, batch, steps, repeats
):
  print(
    f"\nFull training steps: batch {batch}, ms per step; ratio = XLA / "
    f"+svd; overhead = +svd step / r-KF-AVG step"
  )
  print(
    f"{'config':>22s} "
    + "".join(f"{form:>9s} " for form in STEP_FORMS)
    + f"{'ratio':>6s} {'KF-AVG':>8s} {'overhead':>8s}"
  )
  for cell_name, n, rank in itertools.product(cell_names, sizes, ranks):
    entries = {}
    for name in estimator_names:
      for form, routes in STEP_FORMS.items():
        entries[(name, form)] = _trainer_entry(
          cell_name, n, name, rank, batch, steps, step_routing(*routes)
        )
    entries[("kf_avg", "XLA")] = _trainer_entry(
      cell_name, n, "kf_avg", rank, batch, steps
    )
    best = _best_alternating(entries, steps, repeats, warm_up=True)
    kf_avg = best[("kf_avg", "XLA")]
    for name in estimator_names:
      times = [best[(name, form)] for form in STEP_FORMS]
      label = f"{rank}-{name} {cell_name}-{n}"
      print(
        f"{label:>22s} "
        + "".join(f"{t * 1e3:9.3f} " for t in times)
        + f"{times[0] / times[-1]:6.2f} {kf_avg * 1e3:8.3f} "
        f"{times[-1] / kf_avg:8.2f}",
        flush=True,
      )


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cells", default="rhn")
  parser.add_argument("--sizes", default="64,128")
  parser.add_argument("--ranks", default="12,16")
  parser.add_argument("--estimators", default="ok,ok_biased")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument(
    "--skip_ops", action="store_true", help="only the full-step table"
  )
  args = parser.parse_args(argv)
  if jax.default_backend() != "cpu" or not cpu_kernels.available():
    print(
      "rtrl.cpu_kernels is not available here (no C++ compiler, "
      "RTRL_CPU_KERNELS=0, or not a CPU backend): nothing to compare."
    )
    return 1
  sizes = [int(s) for s in args.sizes.split(",")]
  ranks = [int(r) for r in args.ranks.split(",")]
  print(f"device {jax.devices()[0].device_kind}; {load_average()}")
  if not args.skip_ops:
    # The tall factors of RHN-n: (S n K n) rows, K = 2.
    op_table(
      args.batch, [2 * n * n for n in sizes], ranks, args.steps, args.repeats
    )
  step_table(
    args.cells.split(","),
    sizes,
    ranks,
    args.estimators.split(","),
    args.batch,
    args.steps,
    args.repeats,
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
