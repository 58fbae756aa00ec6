"""Trains a recurrent network online on character-level Penn Treebank.

  python -m experiments.ptb --config configs/ptb.py:small --workdir runs/ptb_small
  python -m experiments.ptb --config configs/ptb.py --workdir runs/ptb   # paper

The experiment: `experiments/online/ptb_experiment.py`.
"""

from experiments.loop import cli
from experiments.online.ptb_experiment import train

if __name__ == "__main__":
  cli.run(train, "configs/ptb.py", "char-PTB config file.")
