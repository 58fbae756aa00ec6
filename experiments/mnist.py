"""Trains the RLS paper's MNIST FNN with RLS, the hybrid, or Adam.

  python -m experiments.mnist --config=configs/mnist.py:rls --workdir=runs/mnist_rls

The experiment: `experiments/classifier/`.
"""

from experiments.loop import cli
from experiments.classifier.mnist_task import train

if __name__ == "__main__":
  cli.run(train, None, "Config file, e.g. configs/mnist.py:rls.")
