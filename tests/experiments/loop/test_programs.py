"""The context the run loop's programs are traced and called under
(`experiments/loop/programs.py`): `config.matmul_precision` reaches
`rtrl.linalg` through `jax.default_matmul_precision`, and nothing stays set
after the run."""

import jax
import jax.numpy as jnp
import ml_collections
import pytest

from experiments.loop import runner
from rtrl import linalg

# The run loop's fields (every experiment's config lists them), at the
# configs' values.
RUN_FIELDS = dict(
  num_seeds=1,
  keep_checkpoints=2,
  matmul_precision="highest",
  skip_nonfinite_updates=False,
  allow_config_change=False,
  num_devices=0,
  mesh_shape=(),
  distributed=False,
  coordinator_address="",
  num_processes=1,
  process_id=0,
)


def probe(tmp_path, **fields) -> list:
  """Runs a two-step experiment whose chunk records, when traced, the
  precision `rtrl.linalg` would use; returns the records."""
  seen = []

  def train_chunk(state):
    seen.append(linalg.matmul_precision())
    return state + 1, {"state": state}

  experiment = runner.Experiment(
    name="probe",
    init=lambda key: jnp.zeros(()),
    train_chunk=train_chunk,
    chunk_steps=1,
    summarize=lambda window: {},
  )
  config = ml_collections.ConfigDict(
    dict(
      seed=0,
      num_steps=2,
      log_every=1,
      checkpoint_every=2,
      **{**RUN_FIELDS, **fields},
    )
  )
  runner.run(config, str(tmp_path), experiment, log=lambda message: None)
  return seen


def test_chunk_is_traced_under_the_configs_matmul_precision(tmp_path):
  seen = probe(tmp_path / "bf16", matmul_precision="bfloat16")
  assert seen and set(seen) == {jax.lax.Precision.DEFAULT}
  assert linalg.matmul_precision() == jax.lax.Precision.HIGHEST
  assert set(probe(tmp_path / "none")) == {jax.lax.Precision.HIGHEST}


def test_unknown_matmul_precision_names_the_field(tmp_path):
  with pytest.raises(ValueError, match="config.matmul_precision.*'fp8'"):
    probe(tmp_path, matmul_precision="fp8")
  assert not tmp_path.exists() or not any(tmp_path.iterdir())
