r"""CIFAR-10 "mini VGG" (Zhang et al. 2021, section VI): conv 64, 64, pool,
128, 128, pool, 256 (3x3, ReLU), FC 1024 (ReLU), FC 10.

`--config=configs/cifar10.py:PRESET[,small]`, PRESET one of `rls`,
`rls_momentum`, `rls_momentum_l1`, `rls_hybrid`, `rls_hybrid_momentum`,
`rls_hybrid_momentum_l1`, `adam_mse`, `adam_ce` (see `configs/mnist.py`).
Paper settings: batch 128, 100 epochs, clipping 5.0, P0 = I, λ = 1, k = 0.1,
η = 1, α = 0.5, γ = 1e-5.

  python -m experiments.cifar10 --config=configs/cifar10.py:rls \
    --workdir=runs/cifar10_rls
  python -m experiments.cifar10 --config=configs/cifar10.py:rls,small \
    --workdir=runs/cifar10_rls_small --config.data_dir=../shared/data/cifar10

`pool_after_conv5` (default True): a 2x2 max-pool after the fifth conv, so
FC-1024 has 4x4x256 = 4,096 inputs; False flattens the 8x8x256 maps (16,384
inputs). The paper leaves this open; its RLS/Adam run-time ratio of 1.4x fits
4,096 (see `experiments/classifier/models.py`).

`small` (about 5 minutes on 2 CPU cores with the real 4,000-image subset):
a quarter-width net (conv 16, 16, pool, 32, 32, pool, 64; FC 256), 8 epochs,
at most 4,000 training images.
"""

import ml_collections

from experiments.classifier import presets

PAPER_L1 = 1e-5
PAPER_CLIP_NORM = 5.0


def get_config(arg: str = "rls") -> ml_collections.ConfigDict:
  config, small = presets.preset_config(
    arg, PAPER_L1, PAPER_CLIP_NORM, "configs/cifar10.py"
  )
  config.conv_features = (64, 64, "pool", 128, 128, "pool", 256)
  config.pool_after_conv5 = True
  config.hidden_size = 1024
  config.eval_chunk_size = 500
  if small:
    config.conv_features = (16, 16, "pool", 32, 32, "pool", 64)
    config.hidden_size = 256
    config.epochs = 8
    config.train_limit = 4000
  return config
