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

from ml_collections import config_dict

from configs import common

PRESETS = common.CLASSIFIER_PRESETS
MODIFIERS = common.CLASSIFIER_MODIFIERS


def get_config(arg: str = "rls") -> config_dict.ConfigDict:
  """Every field the MNIST experiment reads, for `PRESET[,small]` (see the
  docstring)."""
  preset, small = common.classifier_preset("configs/mnist.py", arg)
  config = config_dict.ConfigDict()
  config.preset = preset  # the name of the run (printed, saved)

  # Model: 784-HIDDEN(ReLU)-10. "flax" (model.init: lecun_normal, zero
  # biases) or "pytorch" (the paper's PyTorch defaults,
  # models.pytorch_default_init) initialisation.
  config.hidden_size = 512
  config.model_api = "linen"  # Or "nnx": the same FNN as an nnx.Module.
  config.param_init = "flax"

  # The paper's clipping 5.0 and L1 γ = 1e-5 (its +R variants).
  common.classifier_optimizer_fields(config, preset, clip_norm=5.0, l1=1e-5)
  common.classifier_data_fields(config)
  common.classifier_batch_fields(
    config, eval_chunk_size=10_000, eval_train_set=True
  )
  common.classifier_run_fields(config)
  if small:
    config.train_limit = 10_000
    config.epochs = 3
  return config
