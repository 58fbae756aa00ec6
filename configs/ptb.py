"""Character-level Penn Treebank (Benzing et al. 2019, section 4.1.2).

Paper setting (default): 8-OK on an RHN with 256 units, batch 32, Adam with
learning rate 10^-3.5, 1M steps, state reset with probability 0.01 per step;
weights initialised normal(0, 0.01) and the cell gradient clipped at the
official code's 100, which is 3,200 on our batch-mean gradient (see
experiments/online/official.py). Far too slow for a CPU (see README for
steps/s):

  python -m experiments.ptb --config configs/ptb.py --workdir runs/ptb_8ok

`official` preset: exactly the official code's logged run (the default, with
its fixed reset rule: a stream resets where its position in the text is a
multiple of 100; its text layout; its streams starting at linspace(0, N-1,
B)), evaluated every 10,000 steps as its logs are:

  python -m experiments.ptb --config configs/ptb.py:official --workdir runs/ptb_official

`small` preset: a few minutes on a 2-core CPU, progress printed:

  python -m experiments.ptb --config configs/ptb.py:small --workdir runs/ptb_small

`lru_paper` preset: the official preset's task with the online LRU of
Zucchet et al. 2023 (their Table 1 network and optimiser, 3 seeds x their
6 learning rates; experiments/online/lru_paper.py). GPU work:

  python -m experiments.ptb --config configs/ptb.py:lru_paper --workdir runs/ptb_lru_paper

Other estimators at equal data (Table 2's rows):
  --config.estimator=kf_avg                          (8-KF-AVG)
  --config.estimator=tbptt --config.truncation=5     (TBPTT-5; 25 for TBPTT-25)
"""

import ml_collections

PRESETS = ("small", "official", "lru_paper")


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  """Every field char-PTB reads, at the paper's setting; `preset` (see the
  docstring) overrides some of them."""
  config = ml_collections.ConfigDict()

  # Model (experiments/online/setup.py): `num_layers` layers of `cell`
  # (rnn | leaky_rnn | rhn | lstm | gru | lru), each followed by `head` (identity |
  # lru_block, with `model_size` outputs; 0: the cell's), and a readout.
  config.cell = "rhn"
  config.hidden_size = 256
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
  config.init_stddev = 0.01  # 0: the cell's default 1/sqrt(fan_in) init

  # Estimator: rtrl, uoro, kf, kf_avg, kf_approx, ok, ok_biased, ktp,
  # snap1, snap, sk_rtrl, rflo (trained online), or tbptt.
  config.estimator = "ok"
  config.rank = 8  # kf_avg, kf_approx, ok, ok_biased, ktp, sk_rtrl
  config.order = 2  # snap (SnAp-n's n)
  config.truncation = 25  # tbptt's horizon (divides chunk_steps)
  # > 0: every this many steps, the cell gradient's cosine to exact RTRL's
  # (an exact-RTRL shadow on the same trajectory, exact RTRL's cost), logged
  # as cosine_to_rtrl; 0: off. Online single-cell estimators only.
  config.shadow_every = 0

  # Optimizer. adam (optax, on the batch-mean gradient) | tf1_adam (the
  # official OK code's update: TF1's Adam fed the cell gradient / batch).
  config.optimizer = "adam"
  config.learning_rate = 10**-3.5
  config.learning_rates = ()  # e.g. (10**-3.5, 10**-3); empty: learning_rate
  config.clip_norm = 0.0  # global-norm clipping (0: off)
  # Clip only the cell's gradient (the batch-mean gradient's norm; the
  # readout's stays unclipped; 0: off): the official code's 100 in its
  # units, x batch 32 = 3,200 in ours (experiments/online/official.py).
  config.cell_clip_norm = 3200.0
  config.accumulate_steps = 1  # steps per (mean) update
  # The LRU papers' options (Adam only; off at these values): AdamW decay of
  # every parameter but the LRU's ν, θ, γ, which take this factor times the
  # rate; constant | warmup_cosine (linear warm-up over `warmup_updates`,
  # then a cosine to 0 at the last update).
  config.weight_decay = 0.0
  config.recurrence_learning_rate_factor = 1.0
  config.learning_rate_schedule = "constant"
  config.warmup_updates = 0

  # Task (rtrl/tasks/ptb.py).
  config.batch_size = 32
  config.reset_probability = 0.01  # per step and stream (paper)
  config.reset_every = 0  # > 0: reset at multiples (official code: 100)
  config.eval_batch_size = 32  # streams the valid/test split is cut into
  config.eval_reset_every = 0  # resets during evaluation (0: none)
  config.data_dir = ""  # "": $DATA_DIR/ptb, the cache, or download
  config.verify_md5 = True  # check the files against the canonical md5
  # standard | official: the official OK code's text, a word separator at
  # both ends of every line (2 near-free symbols a line: BPC ~1.7% lower for
  # the same model; the paper's numbers are on it).
  config.text_layout = "standard"
  # even | official: where the B training streams start (`stream_offsets`);
  # "official" is the official code's linspace(0, N-1, B).
  config.stream_offsets = "even"

  # Run (experiments/loop/). Runs trained together as one vmapped program:
  # run j of each learning rate equals the single run with seed + j.
  config.seed = 0
  config.num_seeds = 1
  config.num_steps = 1_000_000
  config.chunk_steps = 100  # steps per jitted chunk
  config.log_every = 1000  # multiple of chunk_steps
  config.eval_every = 10_000  # valid BPC (whole split); multiple of chunk_steps
  config.checkpoint_every = 10_000
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

  if preset == "":
    return config
  if preset == "small":
    config.update(SMALL)
  elif preset == "official":
    config.update(OFFICIAL)
  elif preset == "lru_paper":
    # The official preset's task (batch 32, its text layout and resets, 1M
    # steps, valid BPC every 10,000) with the online LRU paper's network
    # and optimiser.
    config.update(OFFICIAL)
    config.update(LRU_PAPER)
  else:
    raise ValueError(f"unknown preset {preset!r}; known: {PRESETS}")
  return config


# A few minutes on a 2-core CPU, progress printed.
SMALL = dict(
  hidden_size=64,
  learning_rate=10**-2.5,
  init_stddev=0.0,
  num_steps=10_000,
  log_every=500,
  eval_every=2000,
  checkpoint_every=2000,
)

# The official OK code's logged PTB run (experiments/online/official.py):
# 8-OK, RHN-256, batch 32, TF1's Adam at 10^-3.5, every weight
# normal(0, 0.01), the cell gradient clipped at 100 in its units (3,200 in
# ours), its text layout, stream offsets and resets every 100 positions.
OFFICIAL = dict(
  estimator="ok",
  rank=8,
  cell="rhn",
  hidden_size=256,
  batch_size=32,
  learning_rate=10**-3.5,
  optimizer="tf1_adam",
  init_stddev=0.01,
  cell_clip_norm=3200.0,
  clip_norm=0.0,
  reset_probability=0.0,
  text_layout="official",
  stream_offsets="official",
  reset_every=100,
  num_steps=1_000_000,
  log_every=1000,
  eval_every=10_000,
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
