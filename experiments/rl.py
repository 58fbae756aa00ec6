"""Online recurrent reinforcement learning on memory POMDPs (RTRRL, with
any estimator; PPO and the memoryless linear agent as baselines).

  python -m experiments.rl --config configs/rl.py:small --workdir runs/rl_small
  python -m experiments.rl --config configs/rl.py:memory_chain \
    --config.memory_length=16 --config.estimator=ok --workdir runs/rl_mc16_ok

The experiment: `experiments/online_rl/rl_experiment.py`.
"""

from experiments.loop import cli
from experiments.online_rl.rl_experiment import train

if __name__ == "__main__":
  cli.run(train, "configs/rl.py", "RL config file.")
