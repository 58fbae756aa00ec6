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

Override any field, e.g. the paper's setting (Benzing et al. 2019, Fig. 1):
  python -m experiments.copy_task --config configs/copy_task.py \
    --workdir runs/copy_ok16 --config.estimator=ok --config.rank=16 \
    --config.hidden_size=128 --config.learning_rate=1e-3 \
    --config.num_steps=1000000
  TBPTT-50: --config.estimator=tbptt --config.truncation=50
  Exact RTRL: --config.estimator=rtrl
"""

import ml_collections

from experiments.loop import run_config


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  # rtrl | uoro | kf | kf_avg | kf_approx | ok | ok_biased | ktp | tbptt
  config.estimator = "ok"
  config.rank = 8              # kf_avg, kf_approx, ok, ok_biased, ktp
  config.truncation = 20       # TBPTT horizon (estimator=tbptt)
  config.cell = "rhn"          # rnn | rhn | lstm
  config.hidden_size = 32
  config.batch_size = 16
  config.learning_rate = 10 ** -2.5
  config.clip_norm = 0.0       # 0 disables global-norm clipping
  config.accumulate_steps = 1
  # The GEMM precision the training chunk is traced under (rtrl.linalg):
  # highest (true float32) | tensorfloat32 | bfloat16 (GPU/TPU only).
  config.matmul_precision = "highest"
  config.seed = 0
  # Runs trained together as one vmapped program: run j of each learning
  # rate equals the single run with seed + j (see experiments/loop/run_axes.py).
  config.num_seeds = 1
  config.learning_rates = ()   # e.g. (10**-2.5, 1e-3); empty: learning_rate
  config.num_steps = 20000
  config.curriculum = "official"  # official | output_only (see above)
  config.chunk_steps = 100     # steps per jitted chunk (output_only: the
                               # curriculum's check period)
  config.log_every = 500       # steps between progress lines (multiple of chunk_steps)
  config.checkpoint_every = 5000
  config.max_length = 100      # largest curriculum length the generator supports
  config.error_threshold = 0.15  # bits/char to advance the curriculum
  # Run-loop fields (resume, NaN policy, devices): experiments/loop/run_config.py.
  run_config.add_run_fields(config)
  return config
