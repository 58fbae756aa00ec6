"""The online LRU paper's settings (Zucchet, Meier, Schug, Mujika,
Sacramento, "Online learning of long-range dependencies", NeurIPS 2023), in
our config's fields, for the `lru_paper` presets of `configs/copy_task.py`,
`configs/ptb.py` and `configs/seq_cifar.py`, which (pure data) write these
values out; tests/experiments/online/test_lru_paper.py checks that they
agree.

Read from the sweep files of the paper's public code (its `experiments/`
folder; the paper itself is not in `shared/papers`):

* Table 1 / Figure 2 (its Copy task, a padded copy of a 20-token pattern
  classified at every output position, not the OK paper's curriculum):
  4 LRU layers of 64 complex units in blocks of width 128 with a GLU, batch
  50, Adam at a learning rate from {1, 2, 4, 8, 16, 32} x 10^-3, the λ and γ
  parameters at half of it (`lr_factor` 0.5), a cosine decay to 0 over the
  run without warm-up, no weight decay, 25 epochs of 20,000 sequences, r_min
  0, 3 seeds.
* Table 2, sequential CIFAR-10: 4 layers of 128 complex units in blocks of
  256, batch 100, learning rate {1, 4} x 10^-3 (λ, γ at half), AdamW with
  weight decay {0.1, 0.5} on every other parameter (their
  "Bfast_and_decay"), linear warm-up over 18 epochs then a cosine to 0 at
  180 epochs, the |λ| ring 0.9 .. 0.999, 2 seeds.

What we do not take: their dropout (0.1) and their straight-through
cumulative mean pooling (`pool_st`; ours classifies at the last pixel);
r_max 1.0 of their Copy runs (our ring is open at 1: 0.99 there); their
Copy task itself (ours is the OK paper's curriculum, and char-PTB is not
among their tasks: the two presets take their network and optimiser on our
tasks at the task's own batch size and length of run).
"""

RECURRENCE_LEARNING_RATE_FACTOR = 0.5  # their lr_factor

# Table 1 / Figure 2: the 4-layer online LRU.
COPY_NETWORK = dict(
  cell="lru",
  estimator="rtrl",
  num_layers=4,
  head="lru_block",
  model_size=128,
  hidden_size=64,
)
COPY_LEARNING_RATES = (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)
COPY_SEEDS = 3

# Table 2: sequential CIFAR-10.
SCIFAR_NETWORK = dict(
  cell="lru",
  estimator="rtrl",
  num_layers=4,
  head="lru_block",
  model_size=256,
  hidden_size=128,
  lru_r_min=0.9,
  lru_r_max=0.999,
)
SCIFAR_BATCH_SIZE = 100
SCIFAR_LEARNING_RATES = (1e-3, 4e-3)
SCIFAR_WEIGHT_DECAY = 0.1  # their grid: 0.1, 0.5
SCIFAR_EPOCHS = 180
SCIFAR_WARMUP_EPOCHS = 18
SCIFAR_SEEDS = 2


def online_lru_fields(
  learning_rates: tuple, num_steps: int, accumulate_steps: int = 1
) -> dict:
  """The Table-1 network and optimiser, as config fields for one of our
  tasks: the paper's rate grid (the first as `learning_rate`), λ and γ at
  half the rate, a cosine from the rate to 0 over the run's updates, and
  none of the OK presets' settings (TF1's Adam, normal(0, 0.01) weights,
  cell clipping)."""
  return dict(
    **COPY_NETWORK,
    optimizer="adam",
    init_stddev=0.0,
    cell_clip_norm=0.0,
    clip_norm=0.0,
    learning_rate=learning_rates[0],
    learning_rates=tuple(learning_rates),
    num_seeds=COPY_SEEDS,
    recurrence_learning_rate_factor=RECURRENCE_LEARNING_RATE_FACTOR,
    learning_rate_schedule="warmup_cosine",
    warmup_updates=0,
    weight_decay=0.0,
    num_steps=num_steps,
    accumulate_steps=accumulate_steps,
  )
