"""Trains the RLS paper's IMDB two-layer LSTM with RLS, the hybrid, or Adam.

  python -m experiments.imdb --config=configs/imdb.py:rls_hybrid,small --workdir=runs/imdb_hrls

The experiment: `experiments/classifier/experiment.py`; the dataset and
network: `IMDB` in `experiments/classifier/tasks.py`.
"""

import functools

from experiments.classifier import experiment
from experiments.classifier import tasks
from experiments.loop import cli

# `train(config, workdir)`, as every experiment module has (the reproduce
# targets call it).
train = functools.partial(experiment.train, tasks.IMDB)

if __name__ == "__main__":
  cli.run(train, None, "Config file, e.g. configs/imdb.py:rls,small.")
