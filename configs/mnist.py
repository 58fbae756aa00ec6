r"""MNIST FNN 784-512(ReLU)-10 trained by RLS, RLS+Adam or Adam (Zhang et al.
2021, section VI). The part after `:` picks the optimiser preset, optionally
followed by `,small`.

Presets (the paper's legends): `rls` (RLS, identity output, MSE loss of eq.
57), `rls_momentum` (RLS+M, α=0.5), `rls_momentum_l1` (RLS+M+R, γ=1e-5),
`rls_hybrid` (HRLS: RLS on the hidden layer, Adam on the output layer,
softmax cross-entropy), `rls_hybrid_momentum`, `rls_hybrid_momentum_l1`,
`adam_mse`, `adam_ce`.

  python -m experiments.mnist --config=configs/mnist.py:rls \
    --workdir=runs/mnist_rls --config.epochs=1 \
    --config.data_dir=../shared/data/mnist
  python -m experiments.mnist --config=configs/mnist.py:rls_hybrid_momentum_l1 \
    --workdir=runs/mnist_hrls_mr
  python -m experiments.mnist --config=configs/mnist.py:adam_ce \
    --workdir=runs/mnist_adam_ce

`small`: 3 epochs on the first 10,000 training images (about a minute on 2
CPU cores). Without `--config.data_dir`, the data come from `$DATA_DIR/mnist`
or are downloaded into `~/.cache/rtrl_rls/mnist` (md5-checked). The paper's
setting is 100 epochs (the default). A run restarted with the same
`--workdir` resumes from its last checkpoint.
"""

import ml_collections

from experiments.classifier import presets

PAPER_L1 = 1e-5
PAPER_CLIP_NORM = 5.0


def get_config(arg: str = "rls") -> ml_collections.ConfigDict:
  """The paper's MNIST setting for `PRESET[,small]` (see the docstring)."""
  config, small = presets.preset_config(
    arg, PAPER_L1, PAPER_CLIP_NORM, "configs/mnist.py"
  )
  config.hidden_size = 512
  config.model_api = "linen"  # Or "nnx": the same FNN as an nnx.Module.
  config.eval_chunk_size = 10_000
  config.eval_train_set = True  # Whole-training-set loss after each epoch.
  if small:
    config.train_limit = 10_000
    config.epochs = 3
  return config
