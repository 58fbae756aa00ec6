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

Run (`:small` names the same default):
  python -m experiments.copy_task --config configs/copy_task.py --workdir runs/copy
  python -m experiments.copy_task --config configs/copy_task.py:small \
    --workdir runs/copy_small

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

PRESETS = ("small", "official", "lru_paper")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  """Every field the Copy task reads, at the small default; `preset` (see
  the docstring) overrides some of them."""
  config = ml_collections.ConfigDict()

  # Model (experiments/online/setup.py): `num_layers` layers of `cell`
  # (rnn | leaky_rnn | rhn | lstm | gru | lru), each followed by `head` (identity |
  # lru_block, with `model_size` outputs; 0: the cell's), and a readout.
  config.cell = "rhn"
  config.hidden_size = 32
  config.lru_r_min = 0.0  # an LRU's |λ| ring at initialisation
  config.lru_r_max = 0.99
  # A sparse recurrence: this fraction of W_h kept (1: dense), drawn
  # from mask_seed; leaky_rnn's leak α (h' = (1-α) h + α tanh(z)).
  config.recurrent_density = 1.0
  config.mask_seed = 0
  config.leak = 0.1
  config.num_layers = 1
  config.head = "identity"
  config.model_size = 0
  # linear | feedback_alignment (RFLO's fixed random feedback matrix).
  config.readout = "linear"
  config.init_stddev = 0.0  # > 0: every weight normal(0, it); 0: defaults

  # Estimator: rtrl, uoro, kf, kf_avg, kf_approx, ok, ok_biased, ktp,
  # snap1, snap, sk_rtrl, rflo (trained online), or tbptt.
  config.estimator = "ok"
  config.rank = 8  # kf_avg, kf_approx, ok, ok_biased, ktp, sk_rtrl
  config.order = 2  # snap (SnAp-n's n)
  config.truncation = 20  # tbptt's horizon (divides chunk_steps)
  # > 0: every this many steps, the cell gradient's cosine to exact RTRL's
  # (an exact-RTRL shadow on the same trajectory, exact RTRL's cost), logged
  # as cosine_to_rtrl; 0: off. Online single-cell estimators only.
  config.shadow_every = 0

  # Optimizer. adam (optax, on the batch-mean gradient) | tf1_adam (the
  # official OK code's update: TF1's Adam fed the cell gradient / batch).
  config.optimizer = "adam"
  config.learning_rate = 10**-2.5
  config.learning_rates = ()  # e.g. (10**-2.5, 1e-3); empty: learning_rate
  config.clip_norm = 0.0  # global-norm clipping of the gradient; 0: off
  # Clip only the cell's gradient (the batch-mean gradient's norm; the
  # readout's stays unclipped); 0: off.
  config.cell_clip_norm = 0.0
  config.accumulate_steps = 1  # steps per (mean) update
  # The LRU papers' options (Adam only; off at these values): AdamW decay of
  # every parameter but the LRU's ν, θ, γ, which take this factor times the
  # rate; constant | warmup_cosine (linear warm-up over `warmup_updates`,
  # then a cosine to 0 at the last update).
  config.weight_decay = 0.0
  config.recurrence_learning_rate_factor = 1.0
  config.learning_rate_schedule = "constant"
  config.warmup_updates = 0

  # Task (rtrl/tasks/copy_task.py).
  config.batch_size = 16
  config.curriculum = "official"  # official | output_only (see above)
  # How a sequence's length is drawn from T: uniform on max(1, T-4)..T, or
  # clipped, max(1, T - k) with k uniform on 0..4 (the official script's;
  # more length-1 sequences while T < 5).
  config.length_rule = "uniform"
  config.max_length = 100  # largest curriculum length the generator supports
  config.error_threshold = 0.15  # bits/char to advance the curriculum

  # Run (experiments/loop/). Runs trained together as one vmapped program:
  # run j of each learning rate equals the single run with seed + j.
  config.seed = 0
  config.num_seeds = 1
  config.num_steps = 20000
  # Steps per jitted chunk (output_only: the curriculum's check period).
  config.chunk_steps = 100
  config.log_every = 500  # steps between records (multiple of chunk_steps)
  config.checkpoint_every = 5000
  config.keep_checkpoints = 2
  # The GEMM precision the training chunk is traced under (rtrl.linalg):
  # highest (true float32) | tensorfloat32 | bfloat16 (GPU/TPU only).
  config.matmul_precision = "highest"
  # A step whose gradient has a NaN/Inf is skipped instead of stopping.
  config.skip_nonfinite_updates = False
  config.allow_config_change = False  # resume although the config differs
  config.num_devices = 0  # 0: every visible device
  config.mesh_shape = ()  # (data, runs) devices; (): every device on data
  # Multi-host: jax.distributed.initialize(); coordinator "" auto-detects
  # (SLURM, TPU, JAX_* variables), else host:port of process 0.
  config.distributed = False
  config.coordinator_address = ""
  config.num_processes = 1
  config.process_id = 0

  if preset in ("", "small"):
    return config
  if preset == "official":
    config.update(OFFICIAL)
  elif preset == "lru_paper":
    config.update(OFFICIAL)  # The task as the official preset runs it.
    config.update(LRU_PAPER)
  else:
    raise ValueError(f"unknown preset {preset!r}; known: {PRESETS}")
  return config


# The official OK code's logged Copy run (experiments/online/official.py):
# 16-OK, RHN-128, batch 16, TF1's Adam at 10^-3.5 on its gradient units,
# every weight normal(0, 0.01), the cell gradient clipped at 1.0 in its units
# (x batch 16 = 16.0 on our batch-mean gradient), its curriculum and length
# draw, logged every 1000 steps as its logs are.
OFFICIAL = dict(
  estimator="ok",
  rank=16,
  cell="rhn",
  hidden_size=128,
  batch_size=16,
  learning_rate=10**-3.5,
  optimizer="tf1_adam",
  init_stddev=0.01,
  cell_clip_norm=16.0,
  clip_norm=0.0,
  curriculum="official",
  length_rule="clipped",
  error_threshold=0.15,
  num_steps=4_000_000,
  chunk_steps=1000,
  log_every=1000,
  checkpoint_every=50_000,
)

# The online LRU paper's Table-1 network and optimiser
# (experiments/online/lru_paper.py): 4 LRU layers of 64 complex units in
# blocks of 128, exact element-wise RTRL, Adam over their rate grid, λ and γ
# at half the rate, a cosine to 0 over the run, 3 seeds; none of the OK
# presets' settings (TF1's Adam, normal(0, 0.01) weights, cell clipping).
LRU_PAPER = dict(
  cell="lru",
  estimator="rtrl",
  num_layers=4,
  head="lru_block",
  model_size=128,
  hidden_size=64,
  optimizer="adam",
  init_stddev=0.0,
  cell_clip_norm=0.0,
  clip_norm=0.0,
  learning_rate=1e-3,
  learning_rates=(1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2),
  num_seeds=3,
  recurrence_learning_rate_factor=0.5,
  learning_rate_schedule="warmup_cosine",
  warmup_updates=0,
  weight_decay=0.0,
  accumulate_steps=1,
)
