"""Sequential CIFAR-10: one pixel (3 channels) a step, 1024 steps an image,
the class predicted at the last pixel (Zucchet et al. 2023; Orvieto et al.
2023, the LRU). See experiments/online/seq_image_experiment.py.

Default, paper-like: the online LRU of Zucchet et al., 4 layers of LRU-128
(state size; the readout sees [Re h, Im h]) in LRU blocks of width 256, each
layer trained by its exact element-wise RTRL, batch 32, Adam at 1e-3 with one
update per batch of images (the gradient of an image's loss at its last
pixel, as the papers' once-a-sequence update), evaluated on the test set
once an epoch (50,000 images). Far too slow for a CPU:

  python -m experiments.seq_cifar --config configs/seq_cifar.py --workdir runs/seq_cifar

`lru_paper` preset: the paper's sCIFAR run as its public configs give it
(batch 100, rates {1, 4} x 10^-3 with λ, γ at half, AdamW decay 0.1, warm-up
18 of 180 epochs then a cosine; experiments/online/lru_paper.py). GPU work:

  python -m experiments.seq_cifar --config configs/seq_cifar.py:lru_paper --workdir runs/seq_cifar_lru_paper

The |λ| ring is the papers' (r_min 0.9, r_max 0.999; the `small` preset
keeps the cell's 0 .. 0.99). Not in this default: the papers' weight
decay, schedule, batch 100 and 180 epochs (the `lru_paper` preset below has
them); in neither: their mean pooling over time (ours: the last pixel) and
dropout.

The same network by full BPTT over each image (TBPTT with one window an
image; `truncation` must divide 1024):
  --config.estimator=tbptt --config.truncation=1024

`small` preset: LRU-32, LRU blocks of 64, 2 layers, batch 16, 2 epochs of the
4,000-image subset in ../shared/data (512,000 steps), test accuracy on its
1,000 test images every 128,000 steps; a few minutes on a 2-core CPU:

  DATA_DIR=../shared/data python -m experiments.seq_cifar \
    --config configs/seq_cifar.py:small --workdir runs/seq_cifar_small
  DATA_DIR=../shared/data python -m experiments.seq_cifar \
    --config configs/seq_cifar.py:small --workdir runs/seq_cifar_small_bptt \
    --config.estimator=tbptt --config.truncation=1024

Measured (seed 0, 2-core CPU): online, 224 s wall at ~2,500 steps/s, final
test accuracy 0.189 (best eval 0.207); TBPTT-1024, 158 s at ~3,500 steps/s,
0.195 (best 0.219); chance 0.10. The default runs at ~55 steps/s there.

Other estimators: --config.estimator=snap1 (the same as rtrl on an LRU),
uoro; a plain cell: --config.cell=gru --config.num_layers=1
--config.head=identity --config.estimator=snap1.
"""

import ml_collections

PRESETS = ("small", "lru_paper")
PIXELS_PER_IMAGE = 32 * 32
FULL_TRAIN_IMAGES = 50_000


def steps_per_epoch(num_images: int, batch_size: int) -> int:
  """Steps for `num_images` images read by `batch_size` streams (the last
  batch of an epoch spills into the next one)."""
  return -(-num_images // batch_size) * PIXELS_PER_IMAGE


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  """Every field sequential CIFAR-10 reads, at the paper-like default;
  `preset` (see the docstring) overrides some of them."""
  config = ml_collections.ConfigDict()
  epoch = steps_per_epoch(FULL_TRAIN_IMAGES, 32)  # 1,600,512 at batch 32

  # Model (experiments/online/setup.py): `num_layers` layers of `cell`
  # (rnn | leaky_rnn | rhn | lstm | gru | lru), each followed by `head` (identity |
  # lru_block, with `model_size` outputs; 0: the cell's), and a readout.
  config.cell = "lru"
  config.hidden_size = 128  # the LRU's state size (complex units)
  # The LRU's |λ| ring at initialisation: the LRU papers' sCIFAR values.
  config.lru_r_min = 0.9
  config.lru_r_max = 0.999
  # A sparse recurrence: this fraction of W_h kept (1: dense), drawn
  # from mask_seed; leaky_rnn's leak α (h' = (1-α) h + α tanh(z)).
  config.recurrent_density = 1.0
  config.mask_seed = 0
  config.leak = 0.1
  config.num_layers = 4
  config.head = "lru_block"
  config.model_size = 256
  # linear | feedback_alignment (RFLO's fixed random feedback matrix).
  config.readout = "linear"
  config.init_stddev = 0.0  # 0: the cells' default initialisation

  # Estimator: rtrl, uoro, kf, kf_avg, kf_approx, ok, ok_biased, ktp,
  # snap1, snap, sk_rtrl, rflo (trained online), or tbptt. The TBPTT horizon divides 1024:
  # windows are aligned to images; 1024 is full BPTT over each.
  config.estimator = "rtrl"
  config.rank = 8  # kf_avg, kf_approx, ok, ok_biased, ktp, sk_rtrl
  config.order = 2  # snap (SnAp-n's n)
  config.truncation = PIXELS_PER_IMAGE
  # > 0 (dividing 1024): every this many steps, the cell gradient's cosine
  # to exact RTRL's (an exact-RTRL shadow on the same trajectory, exact
  # RTRL's cost), taken at images' last pixels, logged as cosine_to_rtrl;
  # 0: off. Online single-cell estimators only.
  config.shadow_every = 0

  # Optimizer: adam | tf1_adam.
  config.optimizer = "adam"
  config.learning_rate = 1e-3
  config.learning_rates = ()  # e.g. (1e-3, 4e-3); empty: learning_rate
  config.clip_norm = 0.0  # global-norm clipping (0: off)
  config.cell_clip_norm = 0.0  # the cell gradient only (0: off)
  # One (mean) update every this many steps. The loss comes only at an
  # image's last pixel, so 1024 is one Adam step per batch of images, as
  # TBPTT-1024 does; with an exact estimator on one layer the two are the
  # same algorithm.
  config.accumulate_steps = PIXELS_PER_IMAGE
  # The LRU papers' options (Adam only; off at these values): AdamW decay of
  # every parameter but the LRU's ν, θ, γ, which take this factor times the
  # rate; constant | warmup_cosine (linear warm-up over `warmup_updates`,
  # then a cosine to 0 at the last update).
  config.weight_decay = 0.0
  config.recurrence_learning_rate_factor = 1.0
  config.learning_rate_schedule = "constant"
  config.warmup_updates = 0

  # Task (rtrl/tasks/seq_images.py).
  config.batch_size = 32
  # channel: (x - mean) / std per channel, from the training images | none
  config.normalization = "channel"
  config.eval_images = 0  # the first this many test images (0: all)
  config.eval_batch_size = 500  # test images evaluated at once
  config.data_dir = ""  # "": $DATA_DIR/cifar10, or the download cache

  # Run (experiments/loop/). Runs trained together as one vmapped program:
  # run j of each learning rate equals the single run with seed + j.
  config.seed = 0
  config.num_seeds = 1
  config.num_steps = 50 * epoch
  config.chunk_steps = PIXELS_PER_IMAGE  # steps per jitted chunk (images)
  config.log_every = 100 * PIXELS_PER_IMAGE  # multiple of chunk_steps
  config.eval_every = epoch  # test accuracy; multiple of chunk_steps
  config.checkpoint_every = epoch
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
    config.update(
      dict(
        num_layers=2,
        hidden_size=32,
        model_size=64,
        batch_size=16,
        lru_r_min=0.0,
        lru_r_max=0.99,
        learning_rate=3e-3,
        num_steps=2 * steps_per_epoch(4000, 16),
        log_every=50 * PIXELS_PER_IMAGE,
        eval_every=125 * PIXELS_PER_IMAGE,
        checkpoint_every=125 * PIXELS_PER_IMAGE,
        eval_batch_size=250,
      )
    )
  elif preset == "lru_paper":
    config.update(_lru_paper())
  else:
    raise ValueError(f"unknown preset {preset!r}; known: {PRESETS}")
  return config


def _lru_paper() -> dict:
  """Zucchet et al.'s Table-2 sCIFAR run (experiments/online/lru_paper.py):
  4 layers of LRU-128 in blocks of 256, batch 100, 2 seeds x rates {1, 4}
  x 10^-3, λ and γ at half the rate, AdamW (decay 0.1) on the rest, a
  linear warm-up over 18 epochs and a cosine to 0 at 180 epochs; one update
  per batch of images."""
  batch_size = 100
  epoch = steps_per_epoch(FULL_TRAIN_IMAGES, batch_size)
  updates_per_epoch = epoch // PIXELS_PER_IMAGE
  return dict(
    cell="lru",
    estimator="rtrl",
    num_layers=4,
    head="lru_block",
    model_size=256,
    hidden_size=128,
    lru_r_min=0.9,
    lru_r_max=0.999,
    batch_size=batch_size,
    learning_rate=1e-3,
    learning_rates=(1e-3, 4e-3),
    num_seeds=2,
    recurrence_learning_rate_factor=0.5,
    weight_decay=0.1,
    learning_rate_schedule="warmup_cosine",
    warmup_updates=18 * updates_per_epoch,
    accumulate_steps=PIXELS_PER_IMAGE,
    num_steps=180 * epoch,
    eval_every=epoch,
    checkpoint_every=epoch,
  )
