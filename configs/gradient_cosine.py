r"""Gradient quality: cosine of each estimator's dL_t/dW to exact RTRL's.

Default: an untrained RHN-32 on random one-hot inputs (paper Fig. 6/9 setting,
scaled down), 200 steps, 5 repetitions, about a minute on CPU:

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py \
    --workdir runs/cosine_rhn32

Paper Figure 6 (untrained RHN-256, Char-PTB-like inputs, 20 random networks;
exact RTRL at n = 256 needs a GPU and a smaller chunk):

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py \
    --workdir runs/cosine_fig6 --config.hidden_size=256 \
    --config.num_steps=10000 --config.repetitions=20 \
    --config.params_per_repetition=True --config.chunk_steps=50 \
    --config.estimators=ok:1,ok:2,ok:8,kf_avg:2,kf_avg:8,kf

Paper Figure 7 (a trained Copy-task network; cell and size come from the
checkpoint, the sequence length from its curriculum when 0):

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py \
    --workdir runs/cosine_fig7 --config.checkpoint_dir=runs/copy_ok16 \
    --config.task=copy --config.sequence_length=0 \
    --config.estimators=ok:1,ok:2,ok:16,kf_avg:16,kf

Paper Figure 3 (an RHN trained on char-PTB, then frozen, on PTB text with
resets of probability 0.01; the cell comes from the PTB workdir):

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py \
    --workdir runs/cosine_fig3 --config.checkpoint_dir=runs/ptb_8ok \
    --config.task=ptb --config.reset_probability=0.01 \
    --config.num_steps=1000 --config.repetitions=20 --config.chunk_steps=50 \
    --config.estimators=ok:8,kf_avg:8

Untrained on PTB text (Figure 6 with real inputs): --config.task=ptb without
checkpoint_dir.
"""

from ml_collections import config_dict

from configs import common


def get_config() -> config_dict.ConfigDict:
  """Every field the gradient-cosine experiment reads."""
  config = config_dict.ConfigDict()

  # Model: a fresh network, or the cell of `checkpoint_dir`'s run.
  config.cell = "rhn"  # rnn|rhn|lstm|gru (ignored with a checkpoint)
  config.hidden_size = 32  # (ignored with a checkpoint)
  config.checkpoint_dir = ""  # a Copy or PTB workdir; "" = fresh parameters
  config.params_per_repetition = False  # fresh: a new network per repetition

  # Estimators compared with exact RTRL: comma-separated `name[:rank]`
  # entries; names as rtrl.estimators.make.
  config.estimators = "ok:1,ok:2,ok:8,kf_avg:8,kf,uoro"

  # Task: the inputs the network reads.
  config.task = "random"  # random | copy | ptb
  config.vocab_size = 50  # random task: one-hot inputs and targets
  config.reset_probability = 0.0  # random, ptb tasks: per-step state reset
  config.sequence_length = 10  # copy task T; 0 = the checkpoint's curriculum
  config.ptb_split = "valid"  # ptb task: text the streams read
  config.data_dir = ""  # ptb task: as experiments/ptb.py ("" = default)
  config.verify_md5 = True  # ptb task: check the files' md5

  # Run.
  config.seed = 0
  config.num_steps = 200
  config.repetitions = 5
  config.chunk_steps = 100  # steps per jitted call (bounds memory)
  config.min_gradient_norm = 1e-4  # steps with |true gradient| below: dropped
  config.allow_config_change = False  # rerun a workdir with another config
  common.distributed_fields(config)
  return config
