r"""IMDB sentiment LSTM (Zhang et al. 2021, section VI): embedding, two stacked
LSTM(512), a 2-unit output on the last step.

`--config=configs/imdb.py:PRESET[,small]`, PRESET one of `rls`,
`rls_momentum`, `rls_momentum_l1`, `rls_hybrid`, `rls_hybrid_momentum`,
`rls_hybrid_momentum_l1`, `adam_mse`, `adam_ce` (see `configs/mnist.py`).
Paper settings: batch 128, 100 epochs, clipping 1.0, P0 = I, λ = 1, k = 0.1,
η = 1, α = 0.5, γ = 1e-6. The paper gives neither the embedding width, the
vocabulary nor the review length; ours: 128, 20,000 ids (padding and OOV
included, built from the training reviews), the last 200 tokens of each
review, padded at the front.

  python -m experiments.imdb --config=configs/imdb.py:rls \
    --workdir=runs/imdb_rls
  python -m experiments.imdb --config=configs/imdb.py:rls_hybrid,small \
    --workdir=runs/imdb_hrls_small --config.data_dir=../shared/data/imdb

`small` (a few minutes on 2 CPU cores): vocabulary 5,000, the last 100
tokens, embedding 32, two LSTM(64), 2 epochs on all 25,000 reviews, tested on
a balanced 5,000-review subset of the test set.
"""

from ml_collections import config_dict

from configs import common

PRESETS = common.CLASSIFIER_PRESETS
MODIFIERS = common.CLASSIFIER_MODIFIERS


def get_config(arg: str = "rls") -> config_dict.ConfigDict:
  """Every field the IMDB experiment reads, for `PRESET[,small]` (see the
  docstring)."""
  preset, small = common.classifier_preset("configs/imdb.py", arg)
  config = config_dict.ConfigDict()
  config.preset = preset  # the name of the run (printed, saved)

  # Model: embedding, `num_layers` stacked LSTM(`hidden_size`), a 2-unit
  # output on the last step. "flax" (model.init: lecun_normal, zero biases)
  # or "pytorch" (the paper's PyTorch defaults) initialisation.
  config.embed_dim = 128
  config.hidden_size = 512
  config.num_layers = 2
  config.param_init = "flax"

  # The paper's clipping 1.0 and L1 γ = 1e-6 (its +R variants).
  common.classifier_optimizer_fields(config, preset, clip_norm=1.0, l1=1e-6)
  common.classifier_data_fields(config)
  # The reviews: the vocabulary (ids, padding and OOV included, built from
  # the training reviews) and the tokens kept of each review.
  config.vocab_size = 20_000
  config.max_length = 200
  config.truncate = "pre"  # Keep the last tokens.
  config.pad = "pre"  # Padding first: the last step sees the review end.
  common.classifier_batch_fields(
    config, eval_chunk_size=1000, eval_train_set=False
  )
  common.classifier_run_fields(config)
  if small:
    config.vocab_size = 5000
    config.max_length = 100
    config.embed_dim = 32
    config.hidden_size = 64
    config.epochs = 2
    config.test_limit = 5000
  return config
