"""Sequence tasks that produce `rtrl.online.StepBatch` streams."""
