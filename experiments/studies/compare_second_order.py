r"""Second-order optimisers side by side on the RLS paper's MNIST FNN and the
small CIFAR-10 mini-VGG: Adam, Muon, every RLS form, the damped
second-moment RLS (`rls.damped_second_moment`, "RLS-D") and kfac-jax's
K-FAC, training loss per epoch and per wall-second, 3 seeds.

  # every optax optimiser (the project's environment):
  DATA_DIR=/work/shared/data .venv/bin/python -m experiments.studies.compare_second_order \
    --workdir runs/second_order
  # K-FAC, in an environment of its own (kfac-jax is no dependency):
  python3 -m venv /work/venvs/kfac && /work/venvs/kfac/bin/pip install \
    kfac-jax jax==0.10.2 optax==0.2.8 flax==0.12.8 ml_collections
  DATA_DIR=/work/shared/data PYTHONPATH=. /work/venvs/kfac/bin/python \
    -m experiments.studies.compare_second_order --workdir runs/second_order \
    --variants K-FAC --no-report
  # kfac-jax's conv2d blocks against the runs' repeated-dense ones:
  DATA_DIR=/work/shared/data PYTHONPATH=. /work/venvs/kfac/bin/python \
    -m experiments.studies.compare_second_order --check-kfac-conv-blocks 3
  # then the table and figure from every finished run:
  .venv/bin/python -m experiments.studies.compare_second_order --workdir \
    runs/second_order --report-only

Same networks, data, loss (eq. 57's MSE, identity output), batch size (128)
and initialisation as `experiments/studies/compare_rls_second_moment.py`; its optax
variants keep their configs (RLS-SM tuned per task), RLS-D has one setting
(`DAMPED`) for both tasks. Every run is one seed in its own loop (a jitted
`lax.scan` per epoch for optax; kfac-jax's own jitted step per minibatch),
full minibatches only, and is timed by the wall clock per epoch (compilation
excluded), so the per-second curves include everything an optimiser does.
A finished run (`WORKDIR/TASK/VARIANT/seed_N.json`) is reused.

K-FAC is `kfac_jax.Optimizer` as in kfac-jax's README example: adaptive
learning rate, momentum and damping, ``initial_damping=1``, no weight decay;
the loss is registered with `kfac_jax.register_squared_error_loss` (weight
0.5: eq. 57), layers by kfac-jax's automatic graph matcher, whose tags are
printed and stored. The CIFAR net's convolutions reach it as the same
unfolded-patch matmuls the others train, with kernels stored ``(9 * in,
out)`` (`MiniVGG(conv_impl='patches_flat_kernel')`, same initial weights) so
that the matcher tags each as a dense layer repeated over positions; their
unmasked `RepeatedDenseKroneckerFactored` blocks are the KFC factorisation
(Grosse & Martens, 2016) of kfac-jax's conv2d block, whose first step they
match to 1e-9 in float64 at ~50x its speed on this CPU (``nn.Conv``: 45
s/step).
"""

from __future__ import annotations

import argparse
import json
import os

import jax

from experiments.studies.second_order import kfac_runs
from experiments.studies.second_order import optax_runs
from experiments.studies.second_order.common import EPOCHS
from experiments.studies.second_order.common import REPO
from experiments.studies.second_order.common import VARIANTS
from experiments.studies.second_order.common import slug
from experiments.studies.second_order.report import report


def run(task_name, label, seed, epochs, workdir) -> dict:
  """Runs (or reads the finished) seed; its JSON dict."""
  path = os.path.join(workdir, task_name, slug(label), f"seed_{seed}.json")
  if os.path.exists(path):
    with open(path) as f:
      result = json.load(f)
    if len(result["records"]) >= epochs:
      return result
  print(f"== {task_name} {label} seed {seed}", flush=True)
  if label == "K-FAC":
    records, extra = kfac_runs.run_kfac(task_name, seed, epochs)
  else:
    records, extra = optax_runs.run_optax(task_name, label, seed, epochs)
  result = dict(extra, label=label, task=task_name, seed=seed, records=records)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f)
  return result


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument(
    "--workdir", default=os.path.join(REPO, "runs", "second_order")
  )
  parser.add_argument("--tasks", default="mnist,cifar10")
  parser.add_argument("--variants", default=",".join(VARIANTS))
  parser.add_argument("--num-seeds", type=int, default=3)
  parser.add_argument("--no-report", action="store_true")
  parser.add_argument("--report-only", action="store_true")
  parser.add_argument(
    "--table", default=os.path.join(REPO, "runs", "second_order_table.md")
  )
  parser.add_argument(
    "--figure",
    default=os.path.join(REPO, "docs", "figures", "second_order.png"),
  )
  parser.add_argument(
    "--kfac-timing-workdir",
    help="K-FAC's time per step from the runs here (e.g. one seed run "
    "alone on the machine) instead of from --workdir's",
  )
  parser.add_argument(
    "--check-kfac-conv-blocks",
    type=int,
    default=0,
    metavar="STEPS",
    help="only compare kfac-jax's conv2d blocks with the runs' "
    "repeated-dense ones over CIFAR-10's first STEPS K-FAC steps, float64",
  )
  args = parser.parse_args(argv)
  if args.check_kfac_conv_blocks:
    jax.config.update("jax_enable_x64", True)
    result = kfac_runs.compare_conv_blocks(args.check_kfac_conv_blocks)
    print(json.dumps(result, indent=1))
    return
  task_names = [t for t in args.tasks.split(",") if t]
  labels = [v for v in args.variants.split(",") if v]
  unknown = set(labels) - set(VARIANTS)
  if unknown:
    parser.error(
      f"unknown --variants {sorted(unknown)}; choose from {VARIANTS}"
    )
  if not args.report_only:
    for task_name in task_names:
      for label in labels:
        for seed in range(args.num_seeds):
          run(task_name, label, seed, EPOCHS[task_name], args.workdir)
  if not args.no_report:
    report(
      args.workdir,
      task_names,
      labels,
      args.num_seeds,
      args.table,
      args.figure,
      args.kfac_timing_workdir,
    )


if __name__ == "__main__":
  main()
