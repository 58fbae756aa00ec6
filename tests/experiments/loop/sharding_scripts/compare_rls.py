"""Run by test_sharding.py in a subprocess with 4 forced CPU devices:
one epoch of RLS on MNIST batches (float64), on one device and batch-sharded
over 4; prints the largest relative difference of the P matrices, the
parameters and the losses as one JSON line."""

import json
import os
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import numpy as np  # noqa: E402

from differences import relative_difference  # noqa: E402

from experiments.classifier import mnist_task as mnist  # noqa: E402
from experiments.loop import checkpoints  # noqa: E402
from experiments.loop import workdir as workdir_lib  # noqa: E402
from experiments.loop.config_files import load_config  # noqa: E402


def train(workdir, optimizer, **overrides):
  config = load_config("mnist", optimizer)
  config.update(dict(epochs=1, train_limit=1024, batch_size=128,
                     hidden_size=32, data_dir=sys.argv[1], **overrides))
  mnist.train(config, workdir)
  _, raw = checkpoints.read_latest_checkpoint(workdir)
  return raw["state"], workdir_lib.read_metrics(workdir)


def main():
  for optimizer in ("rls", "rls_hybrid"):
    with tempfile.TemporaryDirectory() as tmp:
      single, single_metrics = train(os.path.join(tmp, "single"), optimizer,
                                     num_devices=1)
      sharded, sharded_metrics = train(os.path.join(tmp, "sharded"),
                                       optimizer, num_devices=4)
    errors = jax.tree_util.tree_map(relative_difference, single, sharded)
    flat = jax.tree_util.tree_flatten_with_path(errors)[0]
    p_error = max([e for path, e in flat if "inverse_correlation" in jax.tree_util.keystr(path)]
                  or [0.0])
    losses = max(relative_difference(a[k], b[k])
                 for a, b in zip(single_metrics, sharded_metrics)
                 for k in ("train_loss", "test_loss", "test_accuracy"))
    print(json.dumps({"optimizer": optimizer, "state": max(
        e for _, e in flat), "P": p_error, "losses": losses,
        "num_P": sum("inverse_correlation" in jax.tree_util.keystr(p) for p, _ in flat)}),
          flush=True)


if __name__ == "__main__":
  main()
