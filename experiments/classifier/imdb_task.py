r"""Trains the RLS paper's IMDB sentiment LSTM with RLS, the hybrid, or Adam.

  python -m experiments.imdb --config=configs/imdb.py:rls,small \
    --workdir=runs/imdb_rls_small --config.data_dir=../shared/data/imdb

Model (`classifier_models.SentimentLSTM`: embedding, two stacked
`rls.LSTM`, a 2-unit output on the last step) and data only; the optimiser,
losses, jitted epoch, evaluation and records are `experiments/classifier.py`,
the run loop `experiments/runner.py`. The embedding has no layer input in the
RLS sense, so every optimiser but `adam` trains it with Adam
(`config.embedding_learning_rate`) through `optax.multi_transform`. Reviews
are tokenised, truncated and padded by `experiments/data/imdb.py` (its token
cache makes the second run start in about a second).
"""

from __future__ import annotations

from absl import app

from experiments.classifier import experiment as classifier
from experiments.classifier import models as classifier_models
from experiments.loop import runner
from experiments.data import imdb


def make_model(config) -> classifier_models.SentimentLSTM:
  return classifier_models.SentimentLSTM(
      vocab_size=config.vocab_size, embed_dim=config.embed_dim,
      hidden_size=config.hidden_size, num_layers=config.num_layers)


def load_data(config, data: dict | None = None) -> dict:
  """Token-id arrays and labels (`train_limit` keeps a balanced prefix)."""
  if data is None:
    data = imdb.load_imdb(config.data_dir, config.vocab_size,
                          config.max_length, config.truncate, config.pad)
  train_tokens, train_labels = data["train_tokens"], data["train_labels"]
  if config.train_limit:
    # Reviews are stored neg then pos: take every k-th for a balanced subset.
    stride = max(len(train_labels) // config.train_limit, 1)
    train_tokens = train_tokens[::stride][:config.train_limit]
    train_labels = train_labels[::stride][:config.train_limit]
  test_tokens, test_labels = data["test_tokens"], data["test_labels"]
  if config.test_limit:
    stride = max(len(test_labels) // config.test_limit, 1)
    test_tokens = test_tokens[::stride][:config.test_limit]
    test_labels = test_labels[::stride][:config.test_limit]
  return {"train_inputs": train_tokens, "train_labels": train_labels,
          "test_inputs": test_tokens, "test_labels": test_labels}


def train(config, workdir: str, data: dict | None = None) -> list[dict]:
  """Runs (or resumes) `config.epochs` epochs; returns the records.

  Args:
    config: a `configs/imdb.py` config.
    workdir: run folder.
    data: optional preloaded `load_imdb` dict with the config's vocabulary
      size and length (tests reuse one load).
  """
  imdb.check_sequence_args(config.vocab_size, config.max_length,
                           config.truncate, config.pad)
  arrays = load_data(config, data)
  model = make_model(config)
  name = (f"IMDB embed {config.embed_dim} + {config.num_layers}x LSTM "
          f"{config.hidden_size} | {config.optimizer} ({config.loss}) | "
          f"batch {config.batch_size} | vocab {config.vocab_size}, length "
          f"{config.max_length} | {len(arrays['train_labels'])} reviews")
  return classifier.train(
      config, workdir, model, arrays, name,
      classifier_models.example_input(model, config.max_length))
