"""Trains a recurrent network online on sequential CIFAR-10 (one pixel a step).

  python -m experiments.seq_cifar --config configs/seq_cifar.py:small --workdir runs/seq_cifar_small
  python -m experiments.seq_cifar --config configs/seq_cifar.py --workdir runs/seq_cifar   # paper-like

The experiment: `experiments/online/seq_image_experiment.py`.
"""

from experiments.loop import cli
from experiments.online.seq_image_experiment import train

if __name__ == "__main__":
  cli.run(train, "configs/seq_cifar.py", "Sequential CIFAR-10 config file.")
