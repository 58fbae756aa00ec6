"""The online LRU (Zucchet et al. 2023) beside the OK family, SnAp-1, UORO
and TBPTT, and what stacking costs the online gradient.

* `compare_lru_cosine`: cosine of the online stack's gradient to BPTT's
  over a chunk of char-PTB text (`rtrl.stack.cosines_to_bptt`), for stacks
  of 1, 2 and 4 LRU layers, untrained and trained online on char-PTB.
* `compare_lru_copy`: Copy-task curriculum length against steps.
* `compare_lru_ptb`: char-PTB valid, test and train BPC.

The training targets run the online LRU (exact element-wise RTRL per
layer, the LRU block as each layer's head) with 1 and 4 layers against an
RHN under 8-OK, SnAp-1 and UORO and TBPTT, at equal steps, one learning
rate at small scale; their tables add each program's milliseconds per step
and each method's online memory per example (floats of its tangent state;
TBPTT: the states it stores over its window).
"""

from __future__ import annotations

from collections.abc import Callable
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from experiments.data import load_ptb_split
from experiments.loop import workdir as workdir_lib
from experiments.online import cosine_tasks
from experiments.online import setup as online_setup
from experiments.reproduce import common
from experiments.reproduce import online_curves
from experiments.reproduce.common import Curve
from experiments.reproduce.cosine_figures import train_single
from experiments.reproduce.online_curves import estimator
from rtrl import stack
from rtrl.tasks import copy_task
from rtrl.tasks import ptb

SMALL_LEARNING_RATE = 10**-2.5
DEPTHS = (1, 2, 4)


def lru_fields(num_layers: int, state_size: int, model_size: int) -> dict:
  """The config fields of an online LRU stack with LRU-block heads."""
  return dict(
    cell="lru",
    estimator="rtrl",
    num_layers=num_layers,
    head="lru_block",
    hidden_size=state_size,
    model_size=model_size,
  )


def _methods(scale: str, rhn_size: int, truncation: int):
  """`(label, config fields)` of every compared method."""
  size = 128 if scale == "paper" else 32
  rhn = dict(cell="rhn", hidden_size=rhn_size)
  return [
    (f"LRU-{size} x1 online", lru_fields(1, size, 2 * size)),
    (f"LRU-{size} x4 online", lru_fields(4, size, 2 * size)),
    (f"8-OK RHN-{rhn_size}", {**rhn, **estimator("ok", 8)}),
    (f"SnAp-1 RHN-{rhn_size}", {**rhn, **estimator("snap1")}),
    (f"UORO RHN-{rhn_size}", {**rhn, **estimator("uoro")}),
    (
      f"TBPTT-{truncation} RHN-{rhn_size}",
      {**rhn, **estimator("tbptt", truncation=truncation)},
    ),
  ]


def memory_per_example(config, vocab: int) -> int:
  """Floats per example the method carries between steps beyond the state:
  the online tangent state, or TBPTT's stored states over its window."""
  cell = online_setup.make_cell(config)
  trainer = online_setup.make_trainer(config, cell)
  params = jax.eval_shape(
    lambda k: online_setup.init_params(cell, k, vocab, vocab),
    jax.random.PRNGKey(0),
  )
  state = jax.eval_shape(
    lambda p, k: trainer.init(p, k, 1), params, jax.random.PRNGKey(0)
  )

  def count(tree):  # floats only (not PRNG keys); a complex entry is two
    return int(
      sum(
        np.prod(x.shape)
        * (2 if jnp.issubdtype(x.dtype, jnp.complexfloating) else 1)
        for x in jax.tree_util.tree_leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
      )
    )

  if config.estimator == "tbptt":
    return count(state.cell_state) * config.truncation
  return count(state.tstate)


def _columns(
  vocab: int, loss: str, train_metric: str = "", mode: common.Mode = common.RUN
):
  def columns(result: common.CurveResult) -> dict:
    config = common.make_config(result.curve, mode=mode)
    row = {}
    if train_metric:
      row[train_metric] = common.mean_std(
        online_curves.last_values(result, train_metric)
      )[0]
    return {
      **row,
      "diverged": online_curves.diverged(result, loss),
      "program_ms_per_step": online_curves.ms_per_step(result),
      "floats_per_example": memory_per_example(config, vocab),
    }

  return columns


def compare_lru_copy(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Copy task: the online LRU (exact element-wise RTRL per layer, LRU-block
  heads) with 1 and 4 layers against 8-OK, SnAp-1, UORO and TBPTT on an
  RHN, batch 16, official curriculum, equal steps. Small: LRU-32 (model
  size 64), RHN-64, TBPTT-20, 2 seeds, 30k steps, ONE learning rate
  10^-2.5. Paper: LRU-128 (model 256), the official preset's RHN-128,
  TBPTT-50, 5 seeds, 4M steps, the paper's rate grid."""
  base = online_curves.copy_base(scale, 16)
  truncation = 50 if scale == "paper" else 20
  rhn_size = 128 if scale == "paper" else 64
  if scale != "paper":
    base.update(
      learning_rates=(SMALL_LEARNING_RATE,),
      num_steps=30_000,
      log_every=2000,
      checkpoint_every=10_000,
    )
  curves = [
    online_curves.copy_curve(label, scale, {**base, **fields})
    for label, fields in _methods(scale, rhn_size, truncation)
  ]
  return online_curves.copy_figure(
    "compare_lru_copy",
    curves,
    workdir,
    "Copy task, online LRU stacks vs RHN estimators, batch 16",
    scale,
    _columns(copy_task.VOCAB_SIZE, "loss_bits", mode=mode),
    mode=mode,
  )


def compare_lru_ptb(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Char-PTB: the online LRU with 1 and 4 layers against 8-OK, SnAp-1,
  UORO and TBPTT-25 on an RHN, equal steps. Small: the `small` preset
  (RHN-64, batch 16), LRU-32 (model 64), 2 seeds, 6k steps, ONE learning
  rate 10^-2.5. Paper: the official preset's RHN-256 at batch 32, LRU-128
  (model 256), 5 seeds, 1M steps, the paper's rate grid."""
  base, preset = online_curves.ptb_base(scale, 32)
  if scale != "paper":
    base["learning_rates"] = (SMALL_LEARNING_RATE,)
  rhn_size = 256 if scale == "paper" else 64
  curves = [
    Curve(label, "ptb", {**base, **fields}, preset)
    for label, fields in _methods(scale, rhn_size, 25)
  ]
  config = common.make_config(curves[-1], mode=mode)
  setting = (
    f"online LRU stacks vs RHN estimators, batch "
    f"{config.batch_size} ({scale} scale)"
  )
  return online_curves.ptb_table(
    "compare_lru_ptb",
    curves,
    workdir,
    setting,
    _columns(ptb.VOCAB_SIZE, "train_bpc", "train_bpc", mode=mode),
    mode=mode,
  )


def _text_chunks(num_chunks: int, steps: int, batch: int, seed: int):
  """`num_chunks` StepBatches of `steps` x `batch` from the valid split,
  streams at evenly spaced offsets shifted by a seed-drawn amount per chunk,
  no resets (both gradients start from the initial state)."""
  ids = load_ptb_split("valid")
  text = jnp.asarray(ids)
  shifts = np.random.default_rng(seed).integers(0, ids.size, num_chunks)
  for shift in shifts:
    stream = ptb.stream_init(jax.random.PRNGKey(0), ids.size, batch)
    stream = stream._replace(position=(stream.position + int(shift)) % ids.size)
    yield ptb.stream_chunk(text, stream, steps)[1]


def compare_lru_cosine(
  scale: str, workdir: str, mode: common.Mode = common.RUN
) -> common.Result:
  """Cosine of the online stack's gradient (each LRU layer by exact
  element-wise RTRL, errors passed down through the layers' instantaneous
  Jacobians) to BPTT's over a chunk of char-PTB valid text, for 1, 2 and 4
  layers, untrained and trained online on char-PTB (lr 10^-2.5): over all
  parameters and per layer (1 for one layer and for the top layer; below
  it, the paths through upper layers' later states are dropped). Small:
  LRU-32 (model 64), trained 3k steps, chunks of 100 steps x 8 streams, 5
  chunks. Paper: LRU-128 (model 256), trained 100k steps, 500 steps x 16
  streams, 20 chunks."""
  out = os.path.join(workdir, "compare_lru_cosine")
  os.makedirs(out, exist_ok=True)
  if scale == "paper":
    size, train_steps, steps, batch, chunks = 128, 100_000, 500, 16, 20
  else:
    size, train_steps, steps, batch, chunks = 32, 3000, 100, 8, 5
  rows = []
  for depth in DEPTHS:
    fields = lru_fields(depth, size, 2 * size)
    trained = train_single(
      out,
      f"LRU-{size} x{depth} PTB",
      "ptb",
      dict(
        fields,
        learning_rate=SMALL_LEARNING_RATE,
        num_steps=train_steps,
        chunk_steps=100,
        log_every=1000,
        eval_every=train_steps,
        checkpoint_every=train_steps,
      ),
      "small",
      mode=mode,
    )
    if mode.planning:
      continue  # `--plan` prices the training; the cosines take seconds.
    # The trained run's own config (what `--set` changed included).
    with open(os.path.join(trained, workdir_lib.CONFIG_FILE)) as f:
      layers = online_setup.make_cell(
        ml_collections.ConfigDict(json.load(f))
      ).layers
    fresh = stack.init_params(
      layers, jax.random.PRNGKey(0), ptb.VOCAB_SIZE, ptb.VOCAB_SIZE
    )
    measure = jax.jit(
      lambda p, c: stack.cosines_to_bptt(layers, p, c, jax.random.PRNGKey(1))
    )
    for condition, params in (
      ("untrained", fresh),
      (f"trained {train_steps} steps", cosine_tasks.restore_params(trained)[0]),
    ):
      values = [
        jax.device_get(measure(params, chunk))
        for chunk in _text_chunks(chunks, steps, batch, depth)
      ]
      row = {"layers": depth, "network": condition}
      for key in ["all"] + [f"layer_{i}" for i in range(depth)]:
        mean, std = common.mean_std([float(v[key]) for v in values])
        row[f"cos_{key}"] = mean
        row[f"cos_{key}_std"] = std
      rows.append(row)
  if mode.planning:  # Nothing ran (--plan, a launcher's listing).
    return common.Result("compare_lru_cosine", [], [])
  files = common.write_table(
    rows,
    os.path.join(out, "table"),
    f"Online LRU stack vs BPTT: gradient cosine over {steps}-step chunks "
    f"of char-PTB ({scale} scale)",
  )
  return common.Result("compare_lru_cosine", files, rows)


TARGETS: dict[str, Callable[..., common.Result]] = {
  "compare_lru_cosine": compare_lru_cosine,
  "compare_lru_copy": compare_lru_copy,
  "compare_lru_ptb": compare_lru_ptb,
}
