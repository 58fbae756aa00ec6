"""What the official OK code (Benzing et al. 2019, TensorFlow 1) logs, for
the experiments that report its numbers beside ours.

Its runs' settings are presets: the `official` presets of
`configs/copy_task.py` and `configs/ptb.py`, from `configs/common.py`
(`official_ok`, and `official_cell_clip` for the units of its clip).
"""

LOSS_EMA_DECAY = 0.999  # its logged training-loss moving average, from 1 bit
