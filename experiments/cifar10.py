"""Trains the RLS paper's CIFAR-10 mini-VGG with RLS, the hybrid, or Adam.

  python -m experiments.cifar10 --config=configs/cifar10.py:rls,small --workdir=runs/cifar_rls

The experiment: `experiments/classifier/experiment.py`; the dataset and
network: `CIFAR10` in `experiments/classifier/tasks.py`.
"""

import functools

from experiments.classifier import experiment
from experiments.classifier import tasks
from experiments.loop import cli

# `train(config, workdir)`, as every experiment module has (the reproduce
# targets call it).
train = functools.partial(experiment.train, tasks.CIFAR10)

if __name__ == "__main__":
  cli.run(train, None, "Config file, e.g. configs/cifar10.py:rls,small.")
