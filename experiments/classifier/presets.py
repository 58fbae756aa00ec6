"""The names the classifier experiments (MNIST, CIFAR-10, IMDB) accept for
`config.optimizer` and `config.loss`. The fields themselves, their paper
values and the `PRESET[,small]` presets are in
`configs/{mnist,cifar10,imdb}.py`.
"""

from __future__ import annotations

OPTIMIZERS = ("rls", "rls_hybrid", "adam", "muon")
LOSS_NAMES = ("mse", "mse_mean", "cross_entropy")
