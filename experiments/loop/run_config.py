"""The config fields of the shared run loop, added to every experiment's
config by `add_run_fields` (no JAX import, so config files stay light).

  skip_nonfinite_updates  skip a step whose gradient has a NaN/Inf instead of
                          stopping the run (`optax.apply_if_finite`)
  allow_config_change     resume a workdir although its config differs
  keep_checkpoints        how many checkpoints to keep
  num_seeds               runs with seeds seed, seed+1, ... in one program
  num_devices             0: every visible device; 1: a single device
  mesh_shape              (data, runs) devices; (): every device on `data`
  distributed             call jax.distributed.initialize() (multi-host)
  coordinator_address     "" to auto-detect (SLURM, TPU, JAX_* variables),
                          else host:port of process 0, with
  num_processes, process_id
"""

from __future__ import annotations


def add_run_fields(config, **defaults):
  """Adds the run-loop fields (those absent from `config`) and returns it."""
  fields = dict(
    skip_nonfinite_updates=False,
    allow_config_change=False,
    keep_checkpoints=2,
    num_seeds=1,
    num_devices=0,
    mesh_shape=(),
    distributed=False,
    coordinator_address="",
    num_processes=1,
    process_id=0,
  )
  fields.update(defaults)
  for name, value in fields.items():
    if name not in config:
      setattr(config, name, value)
  return config
