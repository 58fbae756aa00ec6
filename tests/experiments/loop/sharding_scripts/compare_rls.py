"""Run by tests/experiments/loop/test_sharding.py in a subprocess with 4
forced CPU devices: one epoch of RLS on MNIST batches (float64), on one
device and batch-sharded over 4; prints the largest relative difference of
the P matrices, the parameters and the losses as one JSON line."""

import json
import os
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax

jax.config.update("jax_enable_x64", True)

from differences import relative_difference  # noqa: E402

from experiments.classifier import experiment  # noqa: E402
from experiments.classifier import tasks  # noqa: E402
from experiments.loop import checkpoints  # noqa: E402
from experiments.loop import config_files  # noqa: E402
from experiments.loop import workdir as workdir_lib  # noqa: E402


def train(workdir, preset, **overrides):
  config = config_files.load_config(
    "mnist",
    preset,
    epochs=1,
    train_limit=1024,
    batch_size=128,
    hidden_size=32,
    data_dir=sys.argv[1],
    **overrides,
  )
  experiment.train(tasks.MNIST, config, workdir)
  _, raw = checkpoints.read_latest_checkpoint(workdir)
  return raw["state"], workdir_lib.read_metrics(workdir)


def compare(preset: str) -> dict:
  """The largest relative differences, single device against 4."""
  with tempfile.TemporaryDirectory() as tmp:
    single, single_metrics = train(
      os.path.join(tmp, "single"), preset, num_devices=1
    )
    sharded, sharded_metrics = train(
      os.path.join(tmp, "sharded"), preset, num_devices=4
    )
  errors = jax.tree_util.tree_map(relative_difference, single, sharded)
  flat = jax.tree_util.tree_flatten_with_path(errors)[0]
  p_errors = [
    e for path, e in flat if "inverse_correlation" in jax.tree_util.keystr(path)
  ]
  losses = max(
    relative_difference(a[k], b[k])
    for a, b in zip(single_metrics, sharded_metrics)
    for k in ("train_loss", "test_loss", "test_accuracy")
  )
  return {
    "optimizer": preset,
    "state": max(e for _, e in flat),
    "P": max(p_errors or [0.0]),
    "losses": losses,
    "num_P": len(p_errors),
  }


def main():
  for preset in ("rls", "rls_hybrid"):
    print(json.dumps(compare(preset)), flush=True)


if __name__ == "__main__":
  main()
