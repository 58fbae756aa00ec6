"""Soak test (slow set): 100,000 float32 online steps on the Copy task.

8-OK and KTP (rank 8) train an RHN-16 online with the Copy-task curriculum,
batch 16, Adam 10^-2.5 (the quick-start setting with a smaller net), built
from the library directly (`experiments.online.setup`, `rtrl.tasks.copy_task`,
`Trainer.run`) in jitted chunks of `CHUNK` steps, each chunk one program:
stream generation, the trainer's scan and the curriculum update.

Checked after every chunk: the parameters, optimiser state, tangents, cell
state and the chunk's loss are finite. Memory: the process RSS is read after
the first chunk (so compilation and the first allocations are done) and after
the last; the growth must stay below `RSS_GROWTH_BOUND_MIB`. A leak of even
one chunk's worth of buffers per chunk (about 1 MiB: the chunk's StepBatch
plus per-step metrics) would add about 100 MiB over the 100 chunks, so the
bound catches leaks of buffers, of retraced programs (a retrace per chunk
costs well over 0.5 MiB each) and of host-side records.

Run alone (it takes minutes per estimator on 2 CPU cores):
  .venv/bin/python -m pytest tests/experiments/loop/test_soak.py -m slow -q -s -n 0
or, for the numbers only:
  .venv/bin/python tests/experiments/loop/test_soak.py [ok|ktp] [num_steps]
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import ml_collections
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
if str(REPO_ROOT) not in sys.path:  # for the script entry point
  sys.path.insert(0, str(REPO_ROOT))

from experiments.loop import run_axes  # noqa: E402
from experiments.loop.config_files import load_config  # noqa: E402
from experiments.online import setup as online_setup  # noqa: E402
from rtrl.readout import LOG2  # noqa: E402
from rtrl.tasks import copy_task  # noqa: E402

NUM_STEPS = 100_000
CHUNK = 1_000
HIDDEN = 16
RANK = 8
BATCH = 16
LEARNING_RATE = 10**-2.5
ERROR_THRESHOLD = 0.15  # bits/char, the Copy task's curriculum threshold
MAX_LENGTH = 100
RSS_GROWTH_BOUND_MIB = 64.0


def rss_mib() -> float:
  """Current resident set size of this process in MiB (Linux /proc)."""
  with open("/proc/self/status") as status:
    for line in status:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024.0
  raise RuntimeError("VmRSS not found in /proc/self/status")


def soak_config(estimator: str) -> ml_collections.ConfigDict:
  """The Copy task's config with the quick-start values (RHN-16 instead of
  RHN-32)."""
  return load_config(
    "copy_task",
    estimator=estimator,
    rank=RANK,
    cell="rhn",
    hidden_size=HIDDEN,
    learning_rate=LEARNING_RATE,
    clip_norm=0.0,
    accumulate_steps=1,
  )


def soak(estimator: str, num_steps: int = NUM_STEPS, seed: int = 0) -> dict:
  """Runs `num_steps` online steps; returns timings, RSS and errors.

  Raises AssertionError at the first chunk with a non-finite value.
  """
  assert jnp.asarray(0.0).dtype == jnp.float32, "soak runs in float32"
  if num_steps % CHUNK:
    raise ValueError(
      f"num_steps must be a multiple of {CHUNK}, got {num_steps}"
    )
  config = soak_config(estimator)
  cell = online_setup.make_cell(config)
  trainer = online_setup.make_trainer(config, cell)
  params_key, trainer_key, data_key = jax.random.split(
    jax.random.PRNGKey(seed), 3
  )
  params = online_setup.init_params(
    cell, params_key, copy_task.VOCAB_SIZE, copy_task.VOCAB_SIZE
  )
  state = (
    trainer.init(params, trainer_key, BATCH),
    copy_task.stream_init(data_key, BATCH, MAX_LENGTH),
    jnp.ones((), jnp.int32),
  )

  @jax.jit
  def chunk_fn(state):
    trainer_state, stream, length = state
    stream, batch = copy_task.generate(stream, length, CHUNK)
    trainer_state, metrics = trainer.run(trainer_state, batch)
    error = (
      metrics.loss_sum.sum() / jnp.maximum(metrics.weight_sum.sum(), 1.0) / LOG2
    )
    length = jnp.minimum(
      copy_task.curriculum_update(length, error, ERROR_THRESHOLD), MAX_LENGTH
    ).astype(jnp.int32)
    return (trainer_state, stream, length), error

  start = time.perf_counter()
  errors, lengths = [], []
  rss_start = None
  rss_samples = []
  for index in range(num_steps // CHUNK):
    state, error = chunk_fn(state)
    trainer_state, _, length = state
    bad = run_axes.nonfinite_leaves(
      (
        trainer_state.params,
        trainer_state.opt_state,
        trainer_state.tstate,
        trainer_state.cell_state,
        error,
      )
    )
    assert not bad, (
      f"{estimator}: non-finite values after step {(index + 1) * CHUNK}: {bad}"
    )
    errors.append(float(error))
    lengths.append(int(length))
    if index == 0:
      rss_start = rss_mib()
      compile_seconds = time.perf_counter() - start
      loop_start = time.perf_counter()
    if (index + 1) % max(1, num_steps // CHUNK // 10) == 0:
      rss_samples.append(round(rss_mib(), 1))
  rss_end = rss_mib()
  assert int(trainer_state.step) == num_steps
  chunks = num_steps // CHUNK
  loop_seconds = time.perf_counter() - loop_start
  return {
    "estimator": f"{RANK}-{estimator}",
    "num_steps": num_steps,
    "first_chunk_seconds": compile_seconds,
    "steps_per_second": (chunks - 1) * CHUNK / max(loop_seconds, 1e-9),
    "total_seconds": time.perf_counter() - start,
    "rss_start_mib": rss_start,
    "rss_end_mib": rss_end,
    "rss_growth_mib": rss_end - rss_start,
    "rss_samples_mib": rss_samples,
    "final_error_bits": errors[-1],
    "final_curriculum_length": lengths[-1],
    "max_curriculum_length": max(lengths),
  }


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["ok", "ktp"])
def test_soak_100k_online_steps_finite_without_memory_growth(estimator):
  result = soak(estimator)
  print(result)
  assert result["rss_growth_mib"] < RSS_GROWTH_BOUND_MIB, result


if __name__ == "__main__":
  names = sys.argv[1:2] or ["ok", "ktp"]
  steps = int(sys.argv[2]) if len(sys.argv) > 2 else NUM_STEPS
  os.environ.setdefault("PYTHONUNBUFFERED", "1")
  for name in names:
    print(soak(name, steps), flush=True)
