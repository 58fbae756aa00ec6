"""The gradient-cosine tool's tasks: input streams and trained parameters.

Tasks (`config.task`):
* `random`: one-hot random inputs and targets over `config.vocab_size`
  symbols, state reset with `config.reset_probability` per step;
* `copy`: the Copy task at sequence length `config.sequence_length`;
* `ptb`: character-level Penn Treebank text (`config.ptb_split`, found via
  `config.data_dir` as in `experiments/data/ptb.py`), one stream per
  repetition at evenly spaced offsets shifted by a seed-dependent amount,
  state reset with `config.reset_probability` per step (the paper's 0.01).

`restore_params` reads the parameters of a Copy-task or PTB workdir (made by
`experiments/copy_task.py` or `experiments/ptb.py`).
"""

from __future__ import annotations

import json
import os

import flax.serialization
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments import data
from experiments.loop import checkpoints
from experiments.loop import checks
from experiments.loop import workdir as workdir_lib
from experiments.online import setup as online_setup
from rtrl import online
from rtrl.tasks import copy_task
from rtrl.tasks import ptb

TASKS = ("random", "copy", "ptb")
# Vocabulary of each task that fixes it (the random task's is configurable).
TASK_VOCAB = {"copy": copy_task.VOCAB_SIZE, "ptb": ptb.VOCAB_SIZE}


def validate_task(config) -> None:
  """Checks `config.task` and its fields; raises ValueError naming them."""
  if config.task not in TASKS:
    raise ValueError(f"config.task must be one of {TASKS}, got {config.task!r}")
  if config.task == "copy" and config.checkpoint_dir:
    checks.nonnegative_ints(
      config, "sequence_length", zero_means="the checkpoint's curriculum length"
    )
  elif config.task == "copy":
    checks.positive_ints(config, "sequence_length")
  if config.task == "ptb" and config.ptb_split not in data.ptb.SPLITS:
    raise ValueError(
      f"config.ptb_split must be one of {data.ptb.SPLITS}, got "
      f"{config.ptb_split!r}"
    )


def task_of_run(run_config: dict) -> str:
  """'ptb' or 'copy': which experiment wrote a workdir's config.json."""
  return "ptb" if "eval_batch_size" in run_config else "copy"


def restore_params(checkpoint_dir: str) -> tuple[dict, dict]:
  """`(params, info)` from a Copy-task or PTB workdir's newest checkpoint.

  Read without a full template, so that a checkpoint of any trainer (online
  with any estimator and optimiser, or TBPTT) restores: only `trainer.params`
  (the latest parameters) is taken, checked against a fresh init of the cell
  in the workdir's `config.json`. `info` has task, vocab_size, cell,
  hidden_size, step, curriculum_length (0 for PTB).
  """
  config_path = os.path.join(checkpoint_dir, workdir_lib.CONFIG_FILE)
  if not os.path.exists(config_path):
    raise FileNotFoundError(
      f"{config_path} not found: config.checkpoint_dir "
      "must be a Copy-task or PTB workdir"
    )
  with open(config_path) as f:
    run_config = json.load(f)
  task = task_of_run(run_config)
  vocab = TASK_VOCAB[task]
  found = checkpoints.read_latest_checkpoint(checkpoint_dir)
  if found is None:
    raise FileNotFoundError(f"no checkpoint_*.msgpack in {checkpoint_dir}")
  step, raw = found
  path = checkpoints.checkpoint_path(checkpoint_dir, step)
  raw = raw.get("state", raw)  # The run loop nests the experiment's state.
  try:
    raw_params = raw["trainer"]["params"]
  except (KeyError, TypeError) as e:
    raise ValueError(
      f"{path} holds no trainer.params; is it a Copy-task or PTB checkpoint?"
    ) from e
  # The saved run's config, with the fields added since at the values that
  # reproduce what it ran (a run saved before them still restores).
  saved_config = ml_collections.ConfigDict(
    {**online_setup.RESUME_DEFAULTS, **run_config}
  )
  cell = online_setup.make_cell(saved_config)
  template = online_setup.init_params(cell, jax.random.PRNGKey(0), vocab, vocab)
  params = flax.serialization.from_state_dict(template, raw_params)
  shapes, expected = (
    jax.tree_util.tree_map(np.shape, t) for t in (params, template)
  )
  if shapes != expected:
    raise ValueError(
      f"{path} has params of shapes {shapes}, expected "
      f"{expected} for {cell!r} on the {task} task"
    )
  params = jax.tree_util.tree_map(
    lambda w, g: jnp.asarray(g, w.dtype), template, params
  )
  info = {
    "task": task,
    "vocab_size": vocab,
    "cell": run_config["cell"],
    "hidden_size": run_config["hidden_size"],
    "step": step,
    "curriculum_length": int(np.asarray(raw.get("curriculum_length", 0))),
  }
  return params, info


def make_data(config):
  """`(state0, next_chunk)`: `next_chunk(state) -> (state, StepBatch)` with
  time-major `(chunk, repetitions, ...)` leaves, one stream per repetition."""
  reps, chunk = config.repetitions, min(config.chunk_steps, config.num_steps)
  key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)
  dtype = jnp.asarray(0.0).dtype
  p_reset = config.reset_probability
  if config.task == "copy":
    length = config.sequence_length
    stream = copy_task.stream_init(key, reps, length)
    return stream, jax.jit(lambda s: copy_task.generate(s, length, chunk))
  if config.task == "ptb":
    ids = data.load_ptb_split(
      config.ptb_split,
      config.data_dir,
      config.verify_md5,
    )
    text = jnp.asarray(ids)
    shift_key, stream_key = jax.random.split(key)
    stream = ptb.stream_init(stream_key, ids.size, reps)
    shift = jax.random.randint(shift_key, (), 0, ids.size)
    stream = stream._replace(position=(stream.position + shift) % ids.size)
    return stream, jax.jit(
      lambda s: ptb.stream_chunk(text, s, chunk, p_reset, 0, dtype)
    )

  vocab = config.vocab_size

  @jax.jit
  def next_random(key):
    key, k_in, k_out, k_reset = jax.random.split(key, 4)
    tokens = jax.random.randint(k_in, (chunk, reps), 0, vocab)
    batch = online.StepBatch(
      inputs=jax.nn.one_hot(tokens, vocab, dtype=dtype),
      targets=jax.random.randint(k_out, (chunk, reps), 0, vocab),
      weights=jnp.ones((chunk, reps), dtype),
      resets=jax.random.bernoulli(k_reset, p_reset, (chunk, reps)),
    )
    return key, batch

  return key, next_random
