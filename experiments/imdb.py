"""Trains the RLS paper's IMDB two-layer LSTM with RLS, the hybrid, or Adam.

  python -m experiments.imdb --config=configs/imdb.py:rls_hybrid,small --workdir=runs/imdb_hrls

The experiment: `experiments/classifier/`.
"""

from experiments.loop import cli
from experiments.classifier.imdb_task import train

if __name__ == "__main__":
  cli.run(train, None, "Config file, e.g. configs/imdb.py:rls,small.")
