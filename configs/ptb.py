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

from experiments.loop import run_config
from experiments.online import lru_paper
from experiments.online import official
from experiments.online import setup as online_setup


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  # estimator, rank, truncation, cell, readout and the stack's fields
  # (experiments/online/setup.py: add_trainer_fields).
  online_setup.add_trainer_fields(
    config, estimator="ok", truncation=25, cell="rhn"
  )
  config.hidden_size = 256
  config.batch_size = 32
  config.learning_rate = 10**-3.5
  config.init_stddev = 0.01  # 0: the cell's default 1/sqrt(fan_in) init
  # Clip only the cell's gradient (the batch-mean gradient's norm; the
  # readout's stays unclipped; 0: off): the official 100 in our units.
  config.cell_clip_norm = official.batch_mean_clip(official.PTB_CELL_CLIP, 32)
  config.clip_norm = 0.0  # global-norm clipping (0: off)
  # adam (optax, on the batch-mean gradient) | tf1_adam (the official OK
  # code's update: TF1's Adam fed the cell gradient / batch size).
  config.optimizer = "adam"
  config.accumulate_steps = 1
  # The GEMM precision the training chunk is traced under (rtrl.linalg):
  # highest (true float32) | tensorfloat32 | bfloat16 (GPU/TPU only).
  config.matmul_precision = "highest"
  config.reset_probability = 0.01  # per step and stream (paper)
  config.reset_every = 0  # > 0: reset at multiples (official code: 100)
  config.seed = 0
  # Runs trained together as one vmapped program: run j of each learning
  # rate equals the single run with seed + j (see experiments/loop/run_axes.py).
  config.num_seeds = 1
  config.learning_rates = ()  # e.g. (10**-3.5, 10**-3); empty: learning_rate
  config.num_steps = 1_000_000
  config.chunk_steps = 100  # steps per jitted chunk
  config.log_every = 1000  # multiple of chunk_steps
  config.eval_every = 10_000  # valid BPC (whole split); multiple of chunk_steps
  config.eval_batch_size = 32  # streams the valid/test split is cut into
  config.eval_reset_every = 0  # resets during evaluation (0: none)
  config.checkpoint_every = 10_000
  config.data_dir = ""  # "": $DATA_DIR/ptb, the cache, or download
  config.verify_md5 = True  # check the files against the canonical md5
  # standard | official: the official OK code's text, a word separator at
  # both ends of every line (2 near-free symbols a line: BPC ~1.7% lower for
  # the same model; the paper's numbers are on it). See rtrl/tasks/ptb.py.
  config.text_layout = "standard"
  # even | official: where the B training streams start (rtrl/tasks/ptb.py,
  # `stream_offsets`); "official" is the official code's linspace(0, N-1, B).
  config.stream_offsets = "even"
  # Run-loop fields (resume, NaN policy, devices): experiments/loop/run_config.py.
  run_config.add_run_fields(config)
  if preset == "small":
    config.hidden_size = 64
    config.learning_rate = 10**-2.5
    config.init_stddev = 0.0
    config.num_steps = 10_000
    config.log_every = 500
    config.eval_every = 2000
    config.checkpoint_every = 2000
  elif preset == "official":
    config.update(
      dict(
        estimator="ok",
        rank=8,
        cell="rhn",
        hidden_size=256,
        batch_size=32,
        learning_rate=official.LEARNING_RATE,
        optimizer="tf1_adam",
        init_stddev=official.INIT_STDDEV,
        cell_clip_norm=official.batch_mean_clip(official.PTB_CELL_CLIP, 32),
        clip_norm=0.0,
        reset_probability=0.0,
        text_layout="official",
        stream_offsets="official",
        reset_every=official.PTB_RESET_EVERY,
        num_steps=1_000_000,
        log_every=1000,
        eval_every=10_000,
      )
    )
  elif preset == "lru_paper":
    # The official preset's task (batch 32, its text layout and resets,
    # 1M steps, valid BPC every 10,000) with the online LRU paper's network
    # and optimiser.
    config.update(get_config("official").to_dict())
    config.update(
      lru_paper.online_lru_fields(
        lru_paper.COPY_LEARNING_RATES, num_steps=config.num_steps
      )
    )
  elif preset:
    raise ValueError(
      f"unknown preset {preset!r}; known: 'small', 'official', 'lru_paper'"
    )
  return config
