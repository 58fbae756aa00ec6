"""Cosine between each estimator's gradient and exact RTRL's on one trajectory.

  python -m experiments.gradient_cosine --config configs/gradient_cosine.py --workdir runs/cosine

The tool: `experiments/online/cosine_experiment.py`.
"""

from experiments.loop import cli
from experiments.online.cosine_experiment import run as train

if __name__ == "__main__":
  cli.run(train, "configs/gradient_cosine.py", "Gradient-cosine config file.")
