r"""Character-level Penn Treebank (Benzing et al. 2019, section 4.1.2).

Paper setting (default): 8-OK on an RHN with 256 units, batch 32, Adam with
learning rate 10^-3.5, 1M steps, state reset with probability 0.01 per step;
weights initialised normal(0, 0.01) and the cell gradient clipped at the
official code's 100, which is 3,200 on our batch-mean gradient (see
configs/common.py). Far too slow for a CPU (see README for
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
6 learning rates; configs/common.py). GPU work:

  python -m experiments.ptb --config configs/ptb.py:lru_paper --workdir runs/ptb_lru_paper

Other estimators at equal data (Table 2's rows):
  --config.estimator=kf_avg                          (8-KF-AVG)
  --config.estimator=tbptt --config.truncation=5     (TBPTT-5; 25 for TBPTT-25)
"""

from ml_collections import config_dict

from configs import common

PRESETS = ("small", "official", "lru_paper")

# The official code clips the cell gradient at 100 in its units: 3,200 on
# our batch-mean gradient at batch 32 (configs/common.py).
CELL_CLIP_NORM = common.official_cell_clip(100.0, batch_size=32)


def get_config(preset: str = "") -> config_dict.ConfigDict:
  """Every field char-PTB reads, at the paper's setting; `preset` (see the
  docstring) overrides some of them."""
  config = config_dict.ConfigDict()
  common.online_model_fields(
    config,
    cell="rhn",
    hidden_size=256,
    init_stddev=common.OFFICIAL_INIT_STDDEV,
  )
  common.online_estimator_fields(config, estimator="ok", rank=8, truncation=25)
  common.online_optimizer_fields(
    config,
    learning_rate=common.OFFICIAL_LEARNING_RATE,
    cell_clip_norm=CELL_CLIP_NORM,  # the official code's 100 (see above)
  )

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

  common.online_run_fields(
    config,
    num_steps=1_000_000,
    chunk_steps=100,
    log_every=1000,
    eval_every=10_000,  # valid BPC (whole split); multiple of chunk_steps
    checkpoint_every=10_000,
  )
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
    config.update(common.LRU_PAPER_TABLE_1)
  else:
    raise common.unknown_preset("configs/ptb.py", preset, PRESETS)
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

# The official OK code's logged PTB run (configs/common.py): 8-OK, RHN-256,
# batch 32, TF1's Adam at 10^-3.5, every weight normal(0, 0.01), the cell
# gradient clipped at 100 in its units (3,200 in ours), its text layout,
# stream offsets and resets every 100 positions.
OFFICIAL = dict(
  **common.official_ok(rank=8, hidden_size=256, batch_size=32, cell_clip=100.0),
  reset_probability=0.0,
  text_layout="official",
  stream_offsets="official",
  reset_every=100,
  num_steps=1_000_000,
  log_every=1000,
  eval_every=10_000,
)
