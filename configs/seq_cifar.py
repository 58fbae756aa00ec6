r"""Sequential CIFAR-10: one pixel (3 channels) a step, 1024 steps an image,
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
18 of 180 epochs then a cosine; `_lru_paper` below). GPU work:

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

from ml_collections import config_dict

from configs import common

PRESETS = ("small", "lru_paper")
PIXELS_PER_IMAGE = 32 * 32
FULL_TRAIN_IMAGES = 50_000


def steps_per_epoch(num_images: int, batch_size: int) -> int:
  """Steps for `num_images` images read by `batch_size` streams (the last
  batch of an epoch spills into the next one)."""
  return -(-num_images // batch_size) * PIXELS_PER_IMAGE


def get_config(preset: str = "") -> config_dict.ConfigDict:
  """Every field sequential CIFAR-10 reads, at the paper-like default;
  `preset` (see the docstring) overrides some of them."""
  config = config_dict.ConfigDict()
  epoch = steps_per_epoch(FULL_TRAIN_IMAGES, 32)  # 1,600,512 at batch 32
  common.online_model_fields(
    config,
    cell="lru",
    hidden_size=128,  # the LRU's state size (complex units)
    init_stddev=0.0,
    lru_r_min=0.9,  # the LRU papers' sCIFAR ring
    lru_r_max=0.999,
    num_layers=4,
    head="lru_block",
    model_size=256,
  )
  common.online_estimator_fields(
    config,
    estimator="rtrl",
    rank=8,
    # tbptt's horizon, dividing 1024: windows are aligned to images; 1024 is
    # full BPTT over each.
    truncation=PIXELS_PER_IMAGE,
    shadow_every=0,  # > 0 divides 1024: the cosine at images' last pixels
  )
  common.online_optimizer_fields(
    config,
    learning_rate=1e-3,
    # The loss comes only at an image's last pixel, so 1024 is one Adam step
    # per batch of images, as TBPTT-1024 does; with an exact estimator on
    # one layer the two are the same algorithm.
    accumulate_steps=PIXELS_PER_IMAGE,
  )

  # Task (rtrl/tasks/seq_images.py).
  config.batch_size = 32
  # channel: (x - mean) / std per channel, from the training images | none
  config.normalization = "channel"
  config.eval_images = 0  # the first this many test images (0: all)
  config.eval_batch_size = 500  # test images evaluated at once
  config.data_dir = ""  # "": $DATA_DIR/cifar10, or the download cache

  common.online_run_fields(
    config,
    num_steps=50 * epoch,
    chunk_steps=PIXELS_PER_IMAGE,  # steps per jitted chunk (images)
    log_every=100 * PIXELS_PER_IMAGE,
    eval_every=epoch,  # test accuracy; multiple of chunk_steps
    checkpoint_every=epoch,
  )
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
    raise common.unknown_preset("configs/seq_cifar.py", preset, PRESETS)
  return config


def _lru_paper() -> dict:
  """Zucchet et al.'s Table-2 sCIFAR run (the paper: configs/common.py):
  4 layers of LRU-128 in blocks of 256, batch 100, 2 seeds x rates {1, 4}
  x 10^-3 (their grid), λ and γ at half the rate, AdamW (decay 0.1, their
  grid: 0.1, 0.5, "Bfast_and_decay") on the rest, a linear warm-up over 18
  epochs and a cosine to 0 at 180 epochs, the |λ| ring 0.9 .. 0.999; one
  update per batch of images."""
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
    recurrence_learning_rate_factor=common.LRU_RECURRENCE_LEARNING_RATE_FACTOR,
    weight_decay=0.1,
    learning_rate_schedule="warmup_cosine",
    warmup_updates=18 * updates_per_epoch,
    accumulate_steps=PIXELS_PER_IMAGE,
    num_steps=180 * epoch,
    eval_every=epoch,
    checkpoint_every=epoch,
  )
