"""Copy task, small default: 8-OK on a 32-unit RHN, a few minutes on a CPU.

`curriculum` (see rtrl/tasks/copy_task.py):
  "official" (default; what the official OK code runs and the paper's
    Figure 1 was made with): the loss covers every position (input-phase
    target: the blank); the error is a moving average (decay 0.999, from 1
    bit) of the per-step batch-mean cross-entropy in bits over all positions,
    checked at every sequence start inside the jitted chunk: below
    `error_threshold`, T += 1 and the average is set to 0.3; lengths uniform
    on max(1, T-4)..T. Logged `loss_bits` averages over all positions.
  "output_only": loss and error on the output phase only (marker and bits);
    the error is the output-phase mean over each `chunk_steps` chunk, checked
    at the chunk's end; lengths uniform on max(1, T-5)..T. About twice as
    hard a threshold, so T grows slower. Logged `loss_bits` is that error.
  Both log `output_error_bits` (the output-phase error) for comparisons.

Run:
  python -m experiments.copy_task --config configs/copy_task.py --workdir runs/copy

`official` preset: exactly the official OK code's logged run (16-OK, RHN-128,
batch 16, TF1's Adam at 10^-3.5 on its gradient units (optimizer=tf1_adam),
every weight normal(0, 0.01), the cell gradient
clipped at 1.0 in its units = 16 on our batch-mean gradient, its
curriculum; see experiments/online/official.py), 4M steps as its longest log:
  python -m experiments.copy_task --config configs/copy_task.py:official \
    --workdir runs/copy_official

`lru_paper` preset: the online LRU of Zucchet et al. 2023 (Table 1: 4 LRU
layers of 64 complex units in blocks of 128, each trained by its exact
element-wise RTRL; Adam over their rate grid 1e-3 .. 3.2e-2, λ and γ at
half the rate, a cosine to 0 over the run; 3 seeds; see
experiments/online/lru_paper.py) on the official preset's task (batch 16,
its curriculum, 4M steps). GPU work:
  python -m experiments.copy_task --config configs/copy_task.py:lru_paper \
    --workdir runs/copy_lru_paper

Override any field, e.g. the paper's Fig. 1 setting at another rate:
  python -m experiments.copy_task --config configs/copy_task.py:official \
    --workdir runs/copy_ok16 --config.learning_rate=1e-3
  TBPTT-50: --config.estimator=tbptt --config.truncation=50
  Exact RTRL: --config.estimator=rtrl
"""

import ml_collections

from experiments.loop import run_config
from experiments.online import lru_paper
from experiments.online import official
from experiments.online import setup as online_setup


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  # estimator, rank, truncation, cell, readout and the stack's fields
  # (experiments/online/setup.py: add_trainer_fields).
  online_setup.add_trainer_fields(
    config, estimator="ok", truncation=20, cell="rhn"
  )
  config.hidden_size = 32
  config.batch_size = 16
  config.learning_rate = 10**-2.5
  config.clip_norm = 0.0  # 0 disables global-norm clipping
  # adam (optax, on the batch-mean gradient) | tf1_adam (the official OK
  # code's update: TF1's Adam fed the cell gradient / batch size).
  config.optimizer = "adam"
  # Clip only the cell's gradient (the batch-mean gradient's norm; the
  # readout's stays unclipped); 0: off.
  config.cell_clip_norm = 0.0
  config.init_stddev = 0.0  # > 0: every weight normal(0, it); 0: defaults
  config.accumulate_steps = 1
  # The GEMM precision the training chunk is traced under (rtrl.linalg):
  # highest (true float32) | tensorfloat32 | bfloat16 (GPU/TPU only).
  config.matmul_precision = "highest"
  config.seed = 0
  # Runs trained together as one vmapped program: run j of each learning
  # rate equals the single run with seed + j (see experiments/loop/run_axes.py).
  config.num_seeds = 1
  config.learning_rates = ()  # e.g. (10**-2.5, 1e-3); empty: learning_rate
  config.num_steps = 20000
  config.curriculum = "official"  # official | output_only (see above)
  # How a sequence's length is drawn from T: uniform on max(1, T-4)..T, or
  # clipped, max(1, T - k) with k uniform on 0..4 (the official script's;
  # more length-1 sequences while T < 5). rtrl/tasks/copy_task.py.
  config.length_rule = "uniform"
  config.chunk_steps = 100  # steps per jitted chunk (output_only: the
  # curriculum's check period)
  config.log_every = (
    500  # steps between progress lines (multiple of chunk_steps)
  )
  config.checkpoint_every = 5000
  config.max_length = 100  # largest curriculum length the generator supports
  config.error_threshold = 0.15  # bits/char to advance the curriculum
  # Run-loop fields (resume, NaN policy, devices): experiments/loop/run_config.py.
  run_config.add_run_fields(config)
  if preset == "official":
    _official(config)
  elif preset == "lru_paper":
    _official(config)  # The task as the official preset runs it.
    config.update(
      lru_paper.online_lru_fields(
        lru_paper.COPY_LEARNING_RATES, num_steps=config.num_steps
      )
    )
  elif preset:
    raise ValueError(
      f"unknown preset {preset!r}; known: 'official', 'lru_paper'"
    )
  return config


def _official(config: ml_collections.ConfigDict) -> None:
  """The official OK code's logged Copy run (experiments/online/official.py):
  16-OK, RHN-128, batch 16, TF1's Adam at 10^-3.5 on its gradient units,
  every weight normal(0, 0.01), the
  cell gradient clipped at 1.0 in its units (16 on our batch-mean gradient),
  its curriculum and its length draw, logged every 1000 steps as its logs
  are."""
  config.update(
    dict(
      estimator="ok",
      rank=16,
      cell="rhn",
      hidden_size=128,
      batch_size=16,
      learning_rate=official.LEARNING_RATE,
      optimizer="tf1_adam",
      init_stddev=official.INIT_STDDEV,
      cell_clip_norm=official.batch_mean_clip(official.COPY_CELL_CLIP, 16),
      clip_norm=0.0,
      curriculum="official",
      length_rule="clipped",
      error_threshold=0.15,
      num_steps=4_000_000,
      chunk_steps=1000,
      log_every=1000,
      checkpoint_every=50_000,
    )
  )
