r"""Copy task, small default: 8-OK on a 32-unit RHN, a few minutes on a CPU.

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
curriculum; see configs/common.py), 4M steps as its longest log:
  python -m experiments.copy_task --config configs/copy_task.py:official \
    --workdir runs/copy_official

`lru_paper` preset: the online LRU of Zucchet et al. 2023 (Table 1: 4 LRU
layers of 64 complex units in blocks of 128, each trained by its exact
element-wise RTRL; Adam over their rate grid 1e-3 .. 3.2e-2, λ and γ at
half the rate, a cosine to 0 over the run; 3 seeds; see
configs/common.py) on the official preset's task (batch 16,
its curriculum, 4M steps). GPU work:
  python -m experiments.copy_task --config configs/copy_task.py:lru_paper \
    --workdir runs/copy_lru_paper

Override any field, e.g. the paper's Fig. 1 setting at another rate:
  python -m experiments.copy_task --config configs/copy_task.py:official \
    --workdir runs/copy_ok16 --config.learning_rate=1e-3
  TBPTT-50: --config.estimator=tbptt --config.truncation=50
  Exact RTRL: --config.estimator=rtrl
"""

from ml_collections import config_dict

from configs import common

PRESETS = ("small", "official", "lru_paper")


def get_config(preset: str = "") -> config_dict.ConfigDict:
  """Every field the Copy task reads, at the small default; `preset` (see
  the docstring) overrides some of them."""
  config = config_dict.ConfigDict()
  common.online_model_fields(
    config, cell="rhn", hidden_size=32, init_stddev=0.0
  )
  common.online_estimator_fields(config, estimator="ok", rank=8, truncation=20)
  common.online_optimizer_fields(config, learning_rate=10**-2.5)

  # Task (rtrl/tasks/copy_task.py).
  config.batch_size = 16
  config.curriculum = "official"  # official | output_only (see above)
  # How a sequence's length is drawn from T: uniform on max(1, T-4)..T, or
  # clipped, max(1, T - k) with k uniform on 0..4 (the official script's;
  # more length-1 sequences while T < 5).
  config.length_rule = "uniform"
  config.max_length = 100  # largest curriculum length the generator supports
  config.error_threshold = 0.15  # bits/char to advance the curriculum

  common.online_run_fields(
    config,
    num_steps=20000,
    chunk_steps=100,  # steps per jitted chunk; output_only: its check period
    log_every=500,
    checkpoint_every=5000,
  )
  if preset in ("", "small"):
    return config
  if preset == "official":
    config.update(OFFICIAL)
  elif preset == "lru_paper":
    config.update(OFFICIAL)  # The task as the official preset runs it.
    config.update(common.LRU_PAPER_TABLE_1)
  else:
    raise common.unknown_preset("configs/copy_task.py", preset, PRESETS)
  return config


# The official OK code's logged Copy run (configs/common.py): 16-OK,
# RHN-128, batch 16, TF1's Adam at 10^-3.5 on its gradient units, every
# weight normal(0, 0.01), the cell gradient clipped at 1.0 in its units
# (x batch 16 = 16.0 on our batch-mean gradient), its curriculum and length
# draw, logged every 1000 steps as its logs are.
OFFICIAL = dict(
  **common.official_ok(rank=16, hidden_size=128, batch_size=16, cell_clip=1.0),
  curriculum="official",
  length_rule="clipped",
  error_threshold=0.15,
  num_steps=4_000_000,
  chunk_steps=1000,
  log_every=1000,
  checkpoint_every=50_000,
)
