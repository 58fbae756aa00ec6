"""Trains the RLS paper's MNIST FNN with RLS, the hybrid, or Adam.

  python -m experiments.mnist --config=configs/mnist.py:rls --workdir=runs/mnist_rls

The experiment: `experiments/classifier/experiment.py`; the dataset and
network: `MNIST` in `experiments/classifier/tasks.py`.
"""

import functools

from experiments.classifier import experiment
from experiments.classifier import tasks
from experiments.loop import cli

# `train(config, workdir)`, as every experiment module has (the reproduce
# targets call it).
train = functools.partial(experiment.train, tasks.MNIST)

if __name__ == "__main__":
  cli.run(train, None, "Config file, e.g. configs/mnist.py:rls.")
