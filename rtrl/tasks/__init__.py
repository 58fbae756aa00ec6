"""Sequence tasks as they run inside jit: `rtrl.online.StepBatch` streams,
curricula and PTB's BPC. No file I/O: datasets are read by
`experiments/data/`."""
