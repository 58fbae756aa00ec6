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
from ml_collections import config_dict

PAPER_L1 = 1e-5
PAPER_CLIP_NORM = 5.0

# Preset -> (optimizer, loss, momentum α, L1 γ): the paper's legends (Figs.
# 2, 3): RLS, RLS+M, RLS+M+R, HRLS, HRLS+M, HRLS+M+R, Adam.
PRESETS = {
  "rls": ("rls", "mse", None, None),
  "rls_momentum": ("rls", "mse", 0.5, None),
  "rls_momentum_l1": ("rls", "mse", 0.5, PAPER_L1),
  "rls_hybrid": ("rls_hybrid", "cross_entropy", None, None),
  "rls_hybrid_momentum": ("rls_hybrid", "cross_entropy", 0.5, None),
  "rls_hybrid_momentum_l1": ("rls_hybrid", "cross_entropy", 0.5, PAPER_L1),
  "adam_mse": ("adam", "mse", None, None),
  "adam_ce": ("adam", "cross_entropy", None, None),
}


def get_config(arg: str = "rls") -> ml_collections.ConfigDict:
  """Every field the CIFAR-10 experiment reads, for `PRESET[,small]` (see the
  docstring)."""
  parts = [p.strip() for p in (arg or "rls").split(",") if p.strip()]
  names = [p for p in parts if p != "small"] or ["rls"]
  if len(names) != 1 or names[0] not in PRESETS:
    raise ValueError(
      f"configs/cifar10.py:{arg}: unknown optimiser preset; choose one of "
      f"{tuple(PRESETS)}, optionally followed by ',small'"
    )
  optimizer, loss, momentum, l1 = PRESETS[names[0]]
  config = ml_collections.ConfigDict()
  config.preset = names[0]  # the name of the run (printed, saved)

  # Model: the mini VGG, convolutions (3x3, ReLU; "pool": 2x2 max-pool),
  # then FC `hidden_size` (ReLU) and FC 10. "flax" (model.init:
  # lecun_normal, zero biases) or "pytorch" (the paper's PyTorch defaults)
  # initialisation.
  config.conv_features = (64, 64, "pool", 128, 128, "pool", 256)
  config.pool_after_conv5 = True  # see the docstring
  config.hidden_size = 1024
  config.param_init = "flax"

  # Optimizer: rls | rls_hybrid (RLS on the hidden layers, Adam on the
  # output layer) | adam | muon; the loss: mse | mse_mean | cross_entropy.
  config.optimizer = optimizer
  config.loss = loss
  config.clip_norm = PAPER_CLIP_NORM
  # Adam (PyTorch defaults in the paper): the whole net for `adam`, the
  # output layer for `rls_hybrid`, embeddings always.
  config.learning_rate = 1e-3
  config.embedding_learning_rate = 1e-3
  config.muon_adam_learning_rate = 1e-3  # muon: Adam's, beside Muon's
  # RLS (paper: P0 = I, lambda = 1, k = 0.1, eta = 1; +M: 0.5, +R: gamma).
  config.forgetting_factor = 1.0
  config.ratio = 0.1
  config.gradient_scale = 1.0  # η of the hidden layers.
  config.output_gradient_scale = 1.0  # η^L of the output layer (paper: 1).
  config.init_scale = 1.0
  # Keep P as S Sᵀ (rls.scale_by_rls(square_root=True)): PSD in float32.
  config.square_root = False
  config.momentum = config_dict.placeholder(float)  # None: off.
  config.l1 = config_dict.placeholder(float)  # None: off.
  # What each RLS layer's P accumulates: "mean", the paper's k x̄x̄ᵀ of the
  # minibatch-mean input (eq. 33); "second_moment", the second moment of
  # `input_samples` input rows / conv patches (`rls.second_moment`; `ratio`
  # is then its weight c, 1 = exact least squares).
  config.input_statistics = "mean"
  config.input_samples = 256
  config.second_moment_direction = "eq63"  # Or "updated": η P_s ∇, no h.
  # Sweeps (vmapped runs, see experiments/loop/run_axes.py): a non-empty list
  # replaces the single value; runs = num_seeds x every combination.
  config.learning_rates = ()
  config.ratios = ()
  config.gradient_scales = ()

  # Task.
  config.data_dir = config_dict.placeholder(str)
  config.train_limit = 0  # Use only the first N training examples (0: all).
  config.test_limit = 0  # Evaluate on N test examples (0: all).
  config.batch_size = 128
  # Train on the last n % batch_size examples of each epoch's permutation too
  # (PyTorch's DataLoader default, as in the paper).
  config.keep_partial_batch = True
  config.eval_chunk_size = 500
  config.eval_train_set = False  # Whole-training-set loss per epoch.

  # Run (experiments/loop/; steps are derived from epochs).
  config.epochs = 100
  config.seed = 0
  config.num_seeds = 1  # runs seed, seed + 1, ... in one vmapped program
  config.loss_every = 10  # Steps per point of `train_loss_curve`.
  config.checkpoint_every_epochs = 1
  config.keep_checkpoints = 2
  # The GEMM precision the training chunk is traced under: default (XLA's
  # own) | highest | tensorfloat32 | bfloat16.
  config.matmul_precision = "default"
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

  # The preset's optimiser options.
  config.momentum = momentum
  config.l1 = l1
  if "small" in parts:
    config.conv_features = (16, 16, "pool", 32, 32, "pool", 64)
    config.hidden_size = 256
    config.epochs = 8
    config.train_limit = 4000
  return config
