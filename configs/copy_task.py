"""Copy task, small default: 8-OK on a 32-unit RHN, a few minutes on a CPU.

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
  config.seed = 0
  # Runs trained together as one vmapped program: run j of each learning
  # rate equals the single run with seed + j (see experiments/runner.py).
  config.num_seeds = 1
  config.learning_rates = ()   # e.g. (10**-2.5, 1e-3); empty: learning_rate
  config.num_steps = 20000
  config.chunk_steps = 100     # steps per jitted chunk; curriculum checked per chunk
  config.log_every = 500       # steps between progress lines (multiple of chunk_steps)
  config.checkpoint_every = 5000
  config.max_length = 100      # largest curriculum length the generator supports
  config.error_threshold = 0.15  # bits/char to advance the curriculum
  # Run-loop options (experiments/runner.py).
  config.skip_nonfinite_updates = False  # skip NaN/Inf updates, don't stop
  config.allow_config_change = False     # resume a workdir with a changed config
  config.keep_checkpoints = 2
  return config
