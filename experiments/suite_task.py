"""Trains a recurrent network online on a task of the suite (adding,
copy_memory, rotation, rotation_recall, anbn, henon, lorenz, mackey_glass).

  python -m experiments.suite_task --config configs/suite_task.py:adding --workdir runs/suite_adding
  python -m experiments.suite_task --config configs/suite_task.py:henon --workdir runs/suite_henon --config.estimator=ok --config.rank=4

The experiment: `experiments/online/suite_experiment.py`; the tasks:
`rtrl/tasks/suite.py`.
"""

from experiments.loop import cli
from experiments.online.suite_experiment import train

if __name__ == "__main__":
  cli.run(train, "configs/suite_task.py", "Suite-task config file.")
