"""Run by test_sharding.py in a subprocess with 4 forced CPU devices:
trains the same float64 runs on one device and sharded, and prints one JSON
line per case with the largest relative difference of states and metrics."""

import json
import os
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax

jax.config.update("jax_enable_x64", True)

from differences import relative_difference  # noqa: E402

from experiments.loop import checkpoints  # noqa: E402
from experiments.loop import workdir as workdir_lib  # noqa: E402
from experiments.loop.config_files import load_config  # noqa: E402
from experiments.online import copy_experiment  # noqa: E402

BASE = dict(
  rank=2,
  truncation=10,
  hidden_size=4,
  batch_size=4,
  seed=1,
  num_steps=100,
  chunk_steps=50,
  log_every=50,
  checkpoint_every=100,
  learning_rate=1e-2,
  curriculum="official",
)
CASES = {
  "ok": dict(estimator="ok", mesh_shape=(4, 1)),
  "kf_avg": dict(estimator="kf_avg", mesh_shape=(4, 1)),
  "rtrl": dict(estimator="rtrl", mesh_shape=(4, 1)),
  "uoro": dict(estimator="uoro", mesh_shape=(4, 1)),
  "tbptt": dict(estimator="tbptt", mesh_shape=(4, 1)),
  "kf_avg_runs": dict(
    estimator="kf_avg",
    num_seeds=2,
    learning_rates=(1e-2, 3e-3),
    mesh_shape=(2, 2),
  ),
  "ptb_kf_avg": dict(experiment="ptb", estimator="kf_avg", mesh_shape=(4, 1)),
}
PTB = dict(
  hidden_size=4,
  batch_size=4,
  eval_batch_size=4,
  num_steps=100,
  chunk_steps=50,
  log_every=50,
  eval_every=1000,
  checkpoint_every=100,
  rank=2,
  seed=1,
)


def train(workdir, experiment="copy_task", **overrides):
  if experiment == "ptb":
    from experiments.online import ptb_experiment as ptb  # pylint: disable=g-import-not-at-top

    config = load_config("ptb", "small")
    config.update({**PTB, **overrides})
    ptb.train(config, workdir)
  else:
    config = load_config("copy_task")
    config.update({**BASE, **overrides})
    copy_experiment.train(config, workdir)
  _, raw = checkpoints.read_latest_checkpoint(workdir)
  metrics = [
    {
      k: v
      for k, v in r.items()
      if k not in ("steps_per_second", "examples_per_second")
    }
    for r in workdir_lib.read_metrics(workdir)
  ]
  return raw["state"], metrics


def bad_meshes():
  """The errors of device counts that do not divide the batch or runs."""
  cases = {
    "batch": dict(batch_size=3, mesh_shape=(4, 1)),
    "runs": dict(num_seeds=3, mesh_shape=(2, 2)),
    "shape": dict(mesh_shape=(3, 1)),
    "too_many": dict(num_devices=8),
  }
  for name, overrides in cases.items():
    with tempfile.TemporaryDirectory() as tmp:
      try:
        train(tmp, estimator="kf_avg", **overrides)
        message = None
      except ValueError as e:
        message = str(e)
    print(json.dumps({"bad_mesh": name, "error": message}), flush=True)


def main():
  if sys.argv[1:] == ["bad_meshes"]:
    bad_meshes()
    return
  cases = sys.argv[1:] or list(CASES)
  for name in cases:
    case = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
      single_state, single_metrics = train(
        os.path.join(tmp, "single"),
        num_devices=1,
        **{k: v for k, v in case.items() if k != "mesh_shape"},
      )
      sharded_state, sharded_metrics = train(
        os.path.join(tmp, "sharded"), num_devices=4, **case
      )
    state_error = max(
      jax.tree_util.tree_leaves(
        jax.tree_util.tree_map(relative_difference, single_state, sharded_state)
      )
    )
    metric_error = max(
      relative_difference(a[k], b[k])
      for a, b in zip(single_metrics, sharded_metrics)
      for k in a
      if not isinstance(a[k], str)
    )
    print(
      json.dumps(
        {
          "case": name,
          "state": state_error,
          "metrics": metric_error,
          "records": len(sharded_metrics),
        }
      ),
      flush=True,
    )


if __name__ == "__main__":
  main()
