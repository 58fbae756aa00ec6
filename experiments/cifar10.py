"""Trains the RLS paper's CIFAR-10 mini-VGG with RLS, the hybrid, or Adam.

  python -m experiments.cifar10 --config=configs/cifar10.py:rls,small --workdir=runs/cifar_rls

The experiment: `experiments/classifier/`.
"""

from experiments.loop import cli
from experiments.classifier.cifar10_task import train

if __name__ == "__main__":
  cli.run(train, None, "Config file, e.g. configs/cifar10.py:rls,small.")
