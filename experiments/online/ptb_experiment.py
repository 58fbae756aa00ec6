"""Trains a recurrent network on character-level Penn Treebank (OK paper 4.1.2).

  python -m experiments.ptb --config configs/ptb.py:small --workdir runs/ptb_small
  python -m experiments.ptb --config configs/ptb.py --workdir runs/ptb   # paper

Online RTRL approximations (8-OK by default) or TBPTT on B contiguous streams
of the training text (`rtrl/tasks/ptb.py`), one parameter update per step
(per window for TBPTT). Every `eval_every` steps the valid BPC is measured
over the whole valid split with frozen parameters (`rtrl/tasks/ptb_eval.py`);
the parameters with the best valid BPC are kept in the run state (so they are
checkpointed) and the test BPC is computed at them when the run ends.

The workdir gets `config.json`, `metrics.jsonl` (`step`, `train_bpc` (mean
over the steps since the previous record), `steps_per_second`, and
`valid_bpc` at eval steps), checkpoints and `summary.json`
(`best_valid_bpc`, `best_step`, `test_bpc`). The shared run loop
(`experiments/runner.py`) resumes a rerun from the newest valid checkpoint;
with `num_seeds > 1` or a `learning_rates` list the runs train as one
vmapped program and every value becomes a list over runs.

The official code's details are config fields: `init_stddev=0.01` (every
weight normal(0, 0.01)), `cell_clip_norm=100` (the cell gradient only), and
`reset_every=100` for its fixed reset period instead of the paper's
`reset_probability=0.01`.
"""

from __future__ import annotations

from absl import app
import jax
import jax.numpy as jnp

from experiments.data import load_ptb_split
from experiments.online import setup as online_setup
from experiments.loop import runner
from rtrl import estimators
from rtrl.readout import LOG2
from rtrl.tasks import ptb
from rtrl.tasks import ptb_eval

ESTIMATORS = tuple(estimators.names()) + ("tbptt",)


def _is_positive_int(value) -> bool:
  return not isinstance(value, bool) and isinstance(value, int) and value > 0


def validate(config) -> None:
  """Raises ValueError naming the first bad field."""
  for field in ("hidden_size", "batch_size", "num_steps", "chunk_steps",
                "eval_every", "eval_batch_size", "log_every",
                "checkpoint_every"):
    if not _is_positive_int(config[field]):
      raise ValueError(f"config.{field} must be a positive integer, got "
                       f"{config[field]!r}")
  if config.estimator not in ESTIMATORS:
    raise ValueError(f"config.estimator must be one of {ESTIMATORS}, got "
                     f"{config.estimator!r}")
  if config.estimator in online_setup.RANKED_ESTIMATORS and \
      not _is_positive_int(config.rank):
    raise ValueError(f"config.rank must be a positive integer, got "
                     f"{config.rank!r}")
  if config.estimator == "tbptt":
    if not _is_positive_int(config.truncation):
      raise ValueError(f"config.truncation must be a positive integer, got "
                       f"{config.truncation!r}")
    if config.chunk_steps % config.truncation:
      raise ValueError(f"config.chunk_steps ({config.chunk_steps}) must be a "
                       f"multiple of config.truncation ({config.truncation})")
  for field in ("num_steps", "eval_every", "log_every"):
    if config[field] % config.chunk_steps:
      raise ValueError(f"config.{field} ({config[field]}) must be a multiple "
                       f"of config.chunk_steps ({config.chunk_steps})")
  if not 0.0 <= config.reset_probability <= 1.0:
    raise ValueError(f"config.reset_probability must be in [0, 1], got "
                     f"{config.reset_probability!r}")
  for field in ("reset_every", "eval_reset_every"):
    if isinstance(config[field], bool) or not isinstance(
        config[field], int) or config[field] < 0:
      raise ValueError(f"config.{field} must be an integer >= 0 (0: off), "
                       f"got {config[field]!r}")
  for rate in list(config.get("learning_rates") or ()) + [
      config.learning_rate]:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or \
        not rate > 0:
      raise ValueError(f"config.learning_rate(s) must be positive numbers, "
                       f"got {rate!r}")
  if config.init_stddev < 0:
    raise ValueError(f"config.init_stddev must be >= 0, got "
                     f"{config.init_stddev!r}")


def init_params(config, cell, key) -> dict:
  """The cell's default init, or with `init_stddev > 0` every weight (the
  fused `W` with its bias row, the readout's `w` and `b`) drawn
  normal(0, init_stddev), as the OK code does on PTB."""
  params = online_setup.init_params(cell, key, ptb.VOCAB_SIZE, ptb.VOCAB_SIZE)
  if not config.init_stddev:
    return params
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
  return jax.tree_util.tree_unflatten(tree, [
      config.init_stddev * jax.random.normal(k, a.shape, a.dtype)
      for k, a in zip(keys, leaves)])


def describe(config) -> str:
  return (f"char-PTB | {online_setup.describe(config)} | {config.cell}-"
          f"{config.hidden_size} | batch {config.batch_size} | lr "
          f"{config.learning_rate:.3g}")


def batch_axes(state: dict) -> dict:
  """`online_setup.batch_axes`, with the stream's reset key replicated."""
  axes = online_setup.batch_axes(state)
  axes["stream"] = axes["stream"]._replace(key=None)
  return axes


def make_experiment(config) -> runner.Experiment:
  """The PTB pieces for `runner.run` (loads the data once, here).

  The training text and the valid streams are the run loop's `data` (a jit
  argument, never checkpointed); `learning_rate` may be swept
  (`config.learning_rates`) and `num_seeds` > 1 stacks runs.
  """
  validate(config)
  cell = online_setup.make_cell(config)
  verify = config.get("verify_md5", True)
  train_ids = load_ptb_split("train", config.data_dir, verify)
  valid_ids = load_ptb_split("valid", config.data_dir, verify)
  data = {"train": jnp.asarray(train_ids),
          "valid": ptb_eval.make_eval_streams(
              valid_ids, config.eval_batch_size, config.eval_reset_every)}
  num_symbols = train_ids.size
  dtype = jnp.asarray(0.0).dtype

  def init(key, hparams):
    params_key, trainer_key, data_key = jax.random.split(key, 3)
    params = init_params(config, cell, params_key)
    trainer = online_setup.make_trainer(config, cell, **hparams)
    return {
        "trainer": trainer.init(params, trainer_key, config.batch_size),
        "stream": ptb.stream_init(data_key, num_symbols, config.batch_size),
        "step": jnp.zeros((), jnp.int32),
        "best_params": params,
        "best_valid_bpc": jnp.full((), jnp.inf, dtype),
        "best_step": jnp.zeros((), jnp.int32),
        "hparams": hparams,
    }

  def train_chunk(state, data):
    trainer = online_setup.make_trainer(config, cell, **state["hparams"])
    stream, chunk = ptb.stream_chunk(
        data["train"], state["stream"], config.chunk_steps,
        config.reset_probability, config.reset_every)
    trainer_state, metrics = trainer.run(state["trainer"], chunk)
    state = {**state, "trainer": trainer_state, "stream": stream,
             "step": state["step"] + config.chunk_steps}
    return state, {"loss_sum": metrics.loss_sum.sum(),
                   "weight_sum": metrics.weight_sum.sum()}

  def summarize(window):
    loss = sum(float(m["loss_sum"]) for m in window)
    weight = sum(float(m["weight_sum"]) for m in window)
    return {"train_bpc": loss / max(weight, 1.0) / LOG2}

  def evaluate(state, data):
    params = state["trainer"].params
    bits, count = ptb_eval.bits_sums(cell, params, data["valid"])
    valid_bpc = bits / count
    better = valid_bpc < state["best_valid_bpc"]
    keep = lambda new, old: jnp.where(better, new, old)
    state = {**state,
             "best_params": jax.tree_util.tree_map(keep, params,
                                                   state["best_params"]),
             "best_valid_bpc": keep(valid_bpc, state["best_valid_bpc"]),
             "best_step": keep(state["step"], state["best_step"])}
    return state, {"valid_bpc": valid_bpc}

  def summarize_eval(metrics):
    return {"valid_bpc": float(metrics["valid_bpc"])}

  test_streams = []  # built on first use, shared by the runs

  def finish(state, workdir):
    del workdir
    best_step = int(state["best_step"])
    summary = {"best_valid_bpc": float(state["best_valid_bpc"]),
               "best_step": best_step, "test_bpc": None}
    if best_step > 0:
      if not test_streams:
        test_ids = load_ptb_split("test", config.data_dir, verify)
        test_streams.append(ptb_eval.make_eval_streams(
            test_ids, config.eval_batch_size, config.eval_reset_every))
      summary["test_bpc"] = ptb_eval.bpc(cell, state["best_params"],
                                         test_streams[0])
    print(f"Best valid BPC {summary['best_valid_bpc']:.4f} at step "
          f"{best_step}; test BPC there: {summary['test_bpc']}")
    return summary

  return runner.Experiment(
      name=describe(config), init=init, train_chunk=train_chunk,
      chunk_steps=config.chunk_steps, summarize=summarize,
      evaluate=evaluate, summarize_eval=summarize_eval, finish=finish,
      progress_fields=("train_bpc", "valid_bpc"),
      examples_per_step=config.batch_size, data=data,
      swept_hparams=("learning_rate",), batch_axes=batch_axes,
      batch_size=config.batch_size)


def train(config, workdir: str) -> list[dict]:
  """Runs (or resumes) one PTB run; returns all metrics records."""
  return runner.run(config, workdir, make_experiment(config))
