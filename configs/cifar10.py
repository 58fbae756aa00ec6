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

from ml_collections import config_dict

from configs import common

PRESETS = common.CLASSIFIER_PRESETS
MODIFIERS = common.CLASSIFIER_MODIFIERS


def get_config(arg: str = "rls") -> config_dict.ConfigDict:
  """Every field the CIFAR-10 experiment reads, for `PRESET[,small]` (see the
  docstring)."""
  preset, small = common.classifier_preset("configs/cifar10.py", arg)
  config = config_dict.ConfigDict()
  config.preset = preset  # the name of the run (printed, saved)

  # Model: the mini VGG, convolutions (3x3, ReLU; "pool": 2x2 max-pool),
  # then FC `hidden_size` (ReLU) and FC 10. "flax" (model.init:
  # lecun_normal, zero biases) or "pytorch" (the paper's PyTorch defaults)
  # initialisation.
  config.conv_features = (64, 64, "pool", 128, 128, "pool", 256)
  config.pool_after_conv5 = True  # see the docstring
  config.hidden_size = 1024
  config.param_init = "flax"

  # The paper's clipping 5.0 and L1 γ = 1e-5 (its +R variants).
  common.classifier_optimizer_fields(config, preset, clip_norm=5.0, l1=1e-5)
  common.classifier_data_fields(config)
  common.classifier_batch_fields(
    config, eval_chunk_size=500, eval_train_set=False
  )
  common.classifier_run_fields(config)
  if small:
    config.conv_features = (16, 16, "pool", 32, 32, "pool", 64)
    config.hidden_size = 256
    config.epochs = 8
    config.train_limit = 4000
  return config
