"""Gradient quality: cosine between estimated and exact RTRL gradients.

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py \
    --workdir runs/cosine_rhn32

With the weights frozen (fresh, or restored from a Copy-task or char-PTB
checkpoint), on random inputs, the Copy task or char-PTB text
(`cosine_tasks.py`), runs exact RTRL and every estimator in
`config.estimators` (`cosine_specs.py`) on the same trajectory
(`cosine_compute.py`) and records, at every step and for every repetition (an
independent data stream and estimator PRNG stream), the cosine between the
estimate of `dL_t/dW` and the exact one (Benzing et al. 2019, section 4.2,
Figures 3, 6, 7, 9). Steps whose exact gradient norm is below
`config.min_gradient_norm` are dropped (null in `metrics.jsonl`), as in the
paper's appendix figures.

Writes into the workdir: `config.json` (the effective config), `metrics.jsonl`
(one record per step: `step`, `num_dropped`, and per estimator label
`<label>/mean_cosine`, `<label>/std_cosine`, `<label>/num_valid`),
`summary.json` (per label: `mean_cosine`, the mean over steps of the
per-step mean, plus `final_mean_cosine` and counts; `cosine_records.py`) and
`cosine.png` (`cosine_plot.py`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from experiments.loop import checks
from experiments.loop import workdir as workdir_lib
from experiments.online import cosine_compute
from experiments.online import cosine_plot
from experiments.online import cosine_records
from experiments.online import cosine_specs
from experiments.online import cosine_tasks
from experiments.online import setup as online_setup
from rtrl import cells

SUMMARY_FILE = "summary.json"
PLOT_FILE = "cosine.png"


def validate(config) -> None:
  """Checks the config's fields; raises ValueError with the field's name."""
  checks.positive_ints(
    config, "num_steps", "repetitions", "chunk_steps", "vocab_size"
  )
  if config.num_steps % min(config.chunk_steps, config.num_steps):
    raise ValueError(
      f"config.num_steps ({config.num_steps}) must be a "
      f"multiple of config.chunk_steps ({config.chunk_steps})"
    )
  cosine_tasks.validate_task(config)
  if not 0.0 <= config.reset_probability <= 1.0:
    raise ValueError("config.reset_probability must be in [0, 1]")
  if config.min_gradient_norm < 0:
    raise ValueError("config.min_gradient_norm must be >= 0")
  if config.checkpoint_dir and config.params_per_repetition:
    raise ValueError(
      "config.params_per_repetition needs fresh parameters "
      "(config.checkpoint_dir must be empty)"
    )
  cosine_specs.parse_estimators(config.estimators)


def take_checkpoint_fields(config, info: dict) -> None:
  """Sets, in place, the fields a checkpoint fixes (cell, size, vocabulary,
  Copy length when 0, the checkpoint's step and curriculum length)."""
  for field in ("cell", "hidden_size"):
    if config[field] != info[field]:
      print(
        f"Note: config.{field}={config[field]!r} replaced by the "
        f"checkpoint's {info[field]!r}."
      )
    config[field] = info[field]
  # The checkpoint's readout and input weights fix the vocabulary.
  if config.task != "random" and config.task != info["task"]:
    raise ValueError(
      f"config.task={config.task!r}, but "
      f"{config.checkpoint_dir} is a {info['task']} run "
      f"(vocabulary {info['vocab_size']}); use "
      f"config.task={info['task']!r} or 'random'"
    )
  config.vocab_size = info["vocab_size"]
  if config.task == "copy" and config.sequence_length == 0:
    config.sequence_length = max(1, info["curriculum_length"])
  config.checkpoint_step = info["step"]
  config.checkpoint_curriculum_length = info["curriculum_length"]


def fresh_params(config):
  """Initial parameters from `config.seed`, one set per repetition (leading
  axis R) if `config.params_per_repetition`."""
  cell = cells.make(config.cell, config.hidden_size)
  init = lambda k: online_setup.init_params(
    cell, k, config.vocab_size, config.vocab_size
  )
  params_key = jax.random.PRNGKey(config.seed)
  if config.params_per_repetition:
    return jax.vmap(init)(jax.random.split(params_key, config.repetitions))
  return init(params_key)


def resolve(config) -> tuple[ml_collections.ConfigDict, Any]:
  """The effective config (cell, size, vocab, T from a checkpoint when set)
  and the parameters (a leading repetition axis if `params_per_repetition`)."""
  config = ml_collections.ConfigDict(config.to_dict())
  validate(config)
  if config.checkpoint_dir:
    params, info = cosine_tasks.restore_params(config.checkpoint_dir)
    take_checkpoint_fields(config, info)
    return config, params
  config.vocab_size = cosine_tasks.TASK_VOCAB.get(
    config.task, config.vocab_size
  )
  return config, fresh_params(config)


def describe(config) -> str:
  task = {
    "copy": f"copy T={config.sequence_length}",
    "ptb": f"char-PTB {config.ptb_split} text",
  }.get(config.task, f"random inputs (vocab {config.vocab_size})")
  source = (
    f"checkpoint step {config.checkpoint_step}"
    if config.checkpoint_dir
    else "untrained"
  )
  return (
    f"{config.cell.upper()}-{config.hidden_size} | {task} | {source} | "
    f"{config.repetitions} repetitions"
  )


def make_chunk_writer(config, workdir: str):
  """`on_chunk(step, cosines, true_norm)` for `compute_cosines`: appends the
  chunk's records to `metrics.jsonl` (a fresh one: the tool does not resume)
  and prints progress."""
  metrics_path = os.path.join(workdir, workdir_lib.METRICS_FILE)
  if os.path.exists(metrics_path):
    os.remove(metrics_path)
  writer = workdir_lib.MetricsWriter(workdir)
  progress = workdir_lib.Progress(config.num_steps)

  def on_chunk(step, cosines, true_norm):
    first = step - true_norm.shape[0] + 1
    for record in cosine_records.metrics_records(first, cosines):
      writer.write(record)
    means = {
      k: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
      for k, v in cosines.items()
    }
    progress.report(
      step, dropped=int(np.isnan(next(iter(cosines.values()))).sum()), **means
    )

  return on_chunk


def run(config, workdir: str) -> dict:
  """Runs the tool into `workdir`; returns the summary."""
  config, params = resolve(config)
  workdir_lib.prepare(workdir, config, allow_change=config.allow_config_change)
  title = describe(config)
  print(
    f"Gradient cosine | {title} | {config.num_steps} steps | "
    f"{config.estimators}"
  )
  result = cosine_compute.compute_cosines(
    config, params, make_chunk_writer(config, workdir)
  )
  summary = {
    "estimators": cosine_records.summarize(result),
    "num_steps": config.num_steps,
    "repetitions": config.repetitions,
    "min_gradient_norm": config.min_gradient_norm,
    "title": title,
  }
  with open(os.path.join(workdir, SUMMARY_FILE), "w") as f:
    json.dump(summary, f, indent=2)
  cosine_plot.plot(result, title, os.path.join(workdir, PLOT_FILE))
  for label, stats in summary["estimators"].items():
    print(f"{label:>12}: mean cosine {stats['mean_cosine']}")
  return summary
