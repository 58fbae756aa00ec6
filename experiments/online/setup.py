"""Builds the pieces of an online-RTRL or TBPTT run from a config.

Shared by the Copy task and the gradient tools; holds no algorithm, only the
mapping from config fields to library objects.
"""

from __future__ import annotations

import jax
import optax

from rtrl import bptt, cells, estimators, online, readout

# Config fields each estimator reads besides the common ones.
RANKED_ESTIMATORS = ("kf_avg", "ok", "ok_biased", "ktp", "kf_approx")


def make_cell(config) -> cells.Cell:
  return cells.make(config.cell, config.hidden_size)


def init_params(cell: cells.Cell, key, input_size: int, num_outputs: int):
  cell_key, readout_key = jax.random.split(key)
  return {"cell": cell.init(cell_key, input_size),
          "readout": readout.init(readout_key, cell.hidden_size, num_outputs)}


def estimator_hparams(config) -> dict:
  return {"rank": config.rank} if config.estimator in RANKED_ESTIMATORS else {}


def make_estimator(config, cell):
  return estimators.make(config.estimator, cell, **estimator_hparams(config))


def make_trainer(config, cell: cells.Cell,
                 learning_rate=None) -> online.Trainer:
  """TBPTT if `config.estimator == 'tbptt'`, else the online trainer.

  `learning_rate` (default `config.learning_rate`) may be a traced scalar, so
  a run axis can vmap over learning rates.
  """
  if learning_rate is None:
    learning_rate = config.learning_rate
  optimizer = optax.adam(learning_rate)
  if config.get("clip_norm"):
    optimizer = optax.chain(optax.clip_by_global_norm(config.clip_norm),
                            optimizer)
  if config.get("cell_clip_norm"):
    # Only the cell gradient, the readout's unclipped (the OK code on PTB).
    optimizer = optax.chain(
        optax.masked(optax.clip_by_global_norm(config.cell_clip_norm),
                     {"cell": True, "readout": False}), optimizer)
  if config.get("skip_nonfinite_updates"):
    # A step whose gradient holds a NaN/Inf leaves parameters and optimiser
    # moments unchanged (long runs survive a rare bad step).
    optimizer = optax.apply_if_finite(optimizer, max_consecutive_errors=1000)
  if config.estimator == "tbptt":
    return bptt.make_tbptt_trainer(cell, optimizer, config.truncation)
  return online.make_online_trainer(
      cell, make_estimator(config, cell), optimizer,
      accumulate_steps=config.get("accumulate_steps", 1))


def describe(config) -> str:
  """A short name like '16-ok', 'tbptt-50' or 'rtrl' for logs and legends."""
  if config.estimator == "tbptt":
    return f"tbptt-{config.truncation}"
  if config.estimator in RANKED_ESTIMATORS:
    return f"{config.rank}-{config.estimator}"
  return config.estimator


def batch_axes(state: dict) -> dict:
  """Batch axes of an online experiment's run state, for the `data` mesh
  axis (`experiments/sharding.py`).

  `state` is a dict whose `'trainer'` entry is the trainer state (its
  `cell_state` and `tstate` hold one row per example) and whose `'stream'`
  entry, if any, is the per-example data stream; every other entry
  (parameters, optimiser state, curriculum, best parameters, ...) is
  replicated. Only the structure of `state` is read.
  """
  replicate = lambda tree: jax.tree_util.tree_map(lambda _: None, tree)
  per_example = lambda tree: jax.tree_util.tree_map(lambda _: 0, tree)
  axes = {}
  for key, value in state.items():
    if key == "trainer":
      axes[key] = type(value)(**{
          field: (per_example if field in ("cell_state", "tstate")
                  else replicate)(getattr(value, field))
          for field in value._fields})
    elif key == "stream":
      axes[key] = per_example(value)
    else:
      axes[key] = replicate(value)
  return axes
