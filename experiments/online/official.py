"""What the official OK code (Benzing et al. 2019, TensorFlow 1) runs, in our
config's units. The config files (pure data) write these values out in
their `official` presets; tests/experiments/online/test_official_presets.py
checks that the two agree.

Its logged runs (`shared/data/official_ok_logs/`) are 16-OK on an RHN-128 at
batch 16 on the Copy task and 8-OK on an RHN-256 at batch 32 on char-PTB,
both with TF1's Adam at 10^-3.5 (`config.optimizer = "tf1_adam"`, see
`rtrl/optim.py`), every weight normal(0, 0.01), the cell's gradient clipped
by norm (Copy 1.0, PTB 100), the readout's not, and on char-PTB its own text
layout (`config.text_layout = "official"`, see `rtrl/tasks/ptb.py`).

Units of that clip: its per-step loss is the batch mean, and it divides the
summed per-example cell gradient by the batch size once more before
clipping, so the tensor it clips is 1/B of the batch-mean gradient that our
trainer hands the optimiser. Its threshold c on that tensor is the
threshold c * B on ours: `batch_mean_clip`. Adam is invariant to the scale
except through its epsilon, which is why `tf1_adam` feeds Adam the cell
gradient divided by B, as the official code does.
"""

LEARNING_RATE = 10**-3.5
INIT_STDDEV = 0.01
COPY_CELL_CLIP = 1.0  # in the official code's units
PTB_CELL_CLIP = 100.0  # in the official code's units
PTB_RESET_EVERY = 100  # its streams reset at text positions divisible by it
LOSS_EMA_DECAY = 0.999  # its logged training-loss moving average, from 1 bit


def batch_mean_clip(official_threshold: float, batch_size: int) -> float:
  """The official clip threshold on our batch-mean gradient."""
  return float(official_threshold) * batch_size
