"""Trains a recurrent network online on the Copy task with a curriculum.

  python -m experiments.copy_task --config configs/copy_task.py --workdir runs/copy
  python -m experiments.copy_task --config configs/copy_task.py:official --workdir runs/copy_official

The experiment: `experiments/online/copy_experiment.py`.
"""

from experiments.loop import cli
from experiments.online.copy_experiment import train

if __name__ == "__main__":
  cli.run(train, "configs/copy_task.py", "Copy-task config file.")
