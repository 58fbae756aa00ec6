r"""MNIST FNN 784-512(ReLU)-10 trained by RLS, RLS+Adam or Adam (Zhang et al.
2021, section VI). The part after `:` picks the optimiser.

Full RLS (identity output, MSE loss, eq. 57), one epoch:

  python -m experiments.mnist --config=configs/mnist.py:rls \
    --workdir=runs/mnist_rls --config.epochs=1 \
    --config.data_dir=../shared/data/mnist

The hybrid (softmax cross-entropy; RLS on the hidden layer, Adam on the
output layer), with the paper's momentum and L1 options ("HRLS+M+R"):

  python -m experiments.mnist --config=configs/mnist.py:rls_hybrid \
    --workdir=runs/mnist_hrls_mr --config.momentum=0.5 --config.l1=1e-5

Adam on the same MSE loss (the fair baseline for `rls`), or on
cross-entropy (the baseline for `rls_hybrid`):

  python -m experiments.mnist --config=configs/mnist.py:adam \
    --workdir=runs/mnist_adam_mse
  python -m experiments.mnist --config=configs/mnist.py:adam \
    --workdir=runs/mnist_adam_ce --config.loss=cross_entropy

Without `--config.data_dir`, the data come from `$DATA_DIR/mnist` or are
downloaded into `~/.cache/rtrl_rls/mnist` (md5-checked). The paper's setting
is 100 epochs (the default); `--config.train_limit=10000` makes a quick run.
A run restarted with the same `--workdir` resumes from its last checkpoint.
"""

import ml_collections
from ml_collections import config_dict

OPTIMIZERS = ("rls", "rls_hybrid", "adam")
LOSSES = ("mse", "cross_entropy")

# Loss that the paper pairs with each optimiser (section VI-A).
DEFAULT_LOSS = {"rls": "mse", "rls_hybrid": "cross_entropy", "adam": "mse"}


def get_config(optimizer: str = "rls") -> ml_collections.ConfigDict:
  """Returns the paper's MNIST setting for `optimizer` (rls|rls_hybrid|adam)."""
  optimizer = optimizer or "rls"
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"configs/mnist.py:{optimizer}: unknown optimiser; "
                     f"choose one of {OPTIMIZERS}")
  config = ml_collections.ConfigDict()
  config.optimizer = optimizer
  config.loss = DEFAULT_LOSS[optimizer]

  # Data and model.
  config.data_dir = config_dict.placeholder(str)  # None: $DATA_DIR or cache.
  config.train_limit = 0  # Use only the first N training images (0: all).
  config.hidden_size = 512

  # Training loop (paper: batch 128, 100 epochs, clip the L2 norm at 5.0).
  config.batch_size = 128
  config.epochs = 100
  config.seed = 0
  config.clip_norm = 5.0  # 0 turns clipping off.
  config.eval_chunk_size = 10_000  # Examples per evaluation forward pass.

  # Adam (PyTorch defaults in the paper): the whole net for `adam`, the
  # output layer for `rls_hybrid`.
  config.learning_rate = 1e-3

  # RLS (paper: P0 = I, lambda = 1, k = 0.1, eta = 1; +M: 0.5, +R: 1e-5).
  config.forgetting_factor = 1.0
  config.ratio = 0.1
  config.gradient_scale = 1.0
  config.init_scale = 1.0
  config.momentum = config_dict.placeholder(float)  # None: off.
  config.l1 = config_dict.placeholder(float)  # None: off.
  return config
