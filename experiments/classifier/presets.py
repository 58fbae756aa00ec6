"""Config fields and presets shared by the classifier experiments (MNIST,
CIFAR-10, IMDB): the paper's settings, and `PRESET[,small]` parsing for
`configs/{mnist,cifar10,imdb}.py`. No JAX import, so config files stay light.
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from experiments.loop import run_config

OPTIMIZERS = ("rls", "rls_hybrid", "adam", "muon")
LOSS_NAMES = ("mse", "mse_mean", "cross_entropy")


def base_config(optimizer: str, loss: str) -> ml_collections.ConfigDict:
  """Fields every classifier config has, at the paper's settings."""
  config = ml_collections.ConfigDict()
  config.optimizer = optimizer
  config.loss = loss
  config.data_dir = config_dict.placeholder(str)
  config.train_limit = 0  # Use only the first N training examples (0: all).
  config.test_limit = 0  # Evaluate on N test examples (0: all).
  config.batch_size = 128
  # Train on the last n % batch_size examples of each epoch's permutation too
  # (PyTorch's DataLoader default, as in the paper).
  config.keep_partial_batch = True
  config.epochs = 100
  config.seed = 0
  # "flax" (model.init: lecun_normal, zero biases) or "pytorch" (the paper's
  # PyTorch defaults, models.pytorch_default_init).
  config.param_init = "flax"
  config.clip_norm = 5.0
  config.eval_chunk_size = 1000
  config.eval_train_set = False
  config.loss_every = 10  # Steps per point of `train_loss_curve`.
  config.checkpoint_every_epochs = 1
  # Adam (PyTorch defaults in the paper): the whole net for `adam`, the
  # output layer for `rls_hybrid`, embeddings always.
  config.learning_rate = 1e-3
  config.embedding_learning_rate = 1e-3
  # RLS (paper: P0 = I, lambda = 1, k = 0.1, eta = 1; +M: 0.5, +R: gamma).
  config.forgetting_factor = 1.0
  config.ratio = 0.1
  config.gradient_scale = 1.0  # η of the hidden layers.
  config.output_gradient_scale = 1.0  # η^L of the output layer (paper: 1).
  config.init_scale = 1.0
  # Keep P as S Sᵀ (rls.scale_by_rls(square_root=True)): PSD in float32.
  config.square_root = False
  config.momentum = config_dict.placeholder(float)  # None: off.
  # What each RLS layer's P accumulates: "mean", the paper's k x̄x̄ᵀ of the
  # minibatch-mean input (eq. 33); "second_moment", the second moment of
  # `input_samples` input rows / conv patches (`rls.second_moment`; `ratio`
  # is then its weight c, 1 = exact least squares).
  config.input_statistics = "mean"
  config.input_samples = 256
  config.second_moment_direction = "eq63"  # Or "updated": η P_s ∇, no h.
  config.l1 = config_dict.placeholder(float)  # None: off.
  # Sweeps (vmapped runs, see experiments/loop/run_axes.py): a non-empty list
  # replaces the single value; runs = num_seeds x every combination.
  config.learning_rates = ()
  config.ratios = ()
  config.gradient_scales = ()
  return run_config.add_run_fields(config)


# Preset name -> (optimizer, loss, use momentum, use L1): the paper's legends
# (Figs. 2, 3): RLS, RLS+M, RLS+M+R, HRLS, HRLS+M, HRLS+M+R, Adam.
PRESETS = {
  "rls": ("rls", "mse", False, False),
  "rls_momentum": ("rls", "mse", True, False),
  "rls_momentum_l1": ("rls", "mse", True, True),
  "rls_hybrid": ("rls_hybrid", "cross_entropy", False, False),
  "rls_hybrid_momentum": ("rls_hybrid", "cross_entropy", True, False),
  "rls_hybrid_momentum_l1": ("rls_hybrid", "cross_entropy", True, True),
  "adam_mse": ("adam", "mse", False, False),
  "adam_ce": ("adam", "cross_entropy", False, False),
}


def preset_config(arg: str, l1: float, clip_norm: float, where: str):
  """Parses `PRESET[,small]` into `(config, small)` with the paper settings.

  Args:
    arg: the text after `:` in `--config=configs/NAME.py:ARG`.
    l1: the paper's γ for this network.
    clip_norm: the paper's clipping threshold for this network.
    where: `configs/NAME.py`, for error messages.
  """
  parts = [p.strip() for p in (arg or "rls").split(",") if p.strip()]
  small = "small" in parts
  names = [p for p in parts if p != "small"] or ["rls"]
  if len(names) != 1 or names[0] not in PRESETS:
    raise ValueError(
      f"{where}:{arg}: unknown optimiser preset; choose one of "
      f"{tuple(PRESETS)}, optionally followed by ',small'"
    )
  optimizer, loss, momentum, use_l1 = PRESETS[names[0]]
  config = base_config(optimizer, loss)
  config.preset = names[0]
  config.clip_norm = clip_norm
  if momentum:
    config.momentum = 0.5
  if use_l1:
    config.l1 = l1
  return config, small
