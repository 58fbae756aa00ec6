"""A task of the suite (rtrl/tasks/suite.py), trained online; one preset per
task, each at sonaradarcn/sketched-rtrl's setting (the peer whose tables the
suite mirrors; see docs/results/task_suite.md): a tanh RNN of 64 units, batch
8, Adam at 1e-3, exact RTRL, 20,000 steps (15,000 for the chaotic series,
30,000 for rotation recall).

  python -m experiments.suite_task --config configs/suite_task.py:adding --workdir runs/suite_adding
  python -m experiments.suite_task --config configs/suite_task.py:copy_memory --workdir runs/suite_copy_memory
  python -m experiments.suite_task --config configs/suite_task.py:rotation --workdir runs/suite_rotation
  python -m experiments.suite_task --config configs/suite_task.py:rotation_recall --workdir runs/suite_rotation_recall
  python -m experiments.suite_task --config configs/suite_task.py:anbn --workdir runs/suite_anbn
  python -m experiments.suite_task --config configs/suite_task.py:henon --workdir runs/suite_henon
  python -m experiments.suite_task --config configs/suite_task.py:lorenz --workdir runs/suite_lorenz
  python -m experiments.suite_task --config configs/suite_task.py:mackey_glass --workdir runs/suite_mackey_glass

The default (no preset) is `adding`. The task's settings are fields of
`task_settings` (each preset lists all of its task's), e.g. the 40-step
adding problem, Arjovsky et al.'s copying problem, Gers & Schmidhuber's
aⁿbⁿ strings:

  python -m experiments.suite_task --config configs/suite_task.py:adding \
    --workdir runs/suite_adding40 --config.task_settings.length=40
  python -m experiments.suite_task --config configs/suite_task.py:copy_memory \
    --workdir runs/suite_arjovsky --config.task_settings.protocol=arjovsky \
    --config.task_settings.num_recall=10 --config.task_settings.delay=100
  python -m experiments.suite_task --config configs/suite_task.py:anbn \
    --workdir runs/suite_anbn_gs --config.task_settings.start_symbol=True \
    --config.task_settings.n_max=10

Other estimators, as in the other configs: --config.estimator=ok
--config.rank=4; snap1; uoro; rflo (--config.readout=feedback_alignment);
TBPTT-25 (sketched-rtrl's window): --config.estimator=tbptt
--config.truncation=25. The gradient's cosine to exact RTRL's, logged as
`cosine_to_rtrl` every record: --config.shadow_every=10.

Each record has `loss` (mean per weighted step, in the loss's units: ½
squared error or nats) and the task metric under its name (`mse` per output
entry, `accuracy`, or `sequences_solved`); the baseline each metric is set
against is printed when the run starts (adding: 1/6; rotation: 1/8; copy:
chance 1/8; aⁿbⁿ: 1/16 solved; the chaotic series: 1.0, the mean).
"""

import ml_collections

PRESETS = (
  "adding",
  "copy_memory",
  "rotation",
  "rotation_recall",
  "anbn",
  "henon",
  "lorenz",
  "mackey_glass",
)

# Each task's settings at the peer's values (rtrl/tasks/<task>.py).
TASK_SETTINGS = {
  "adding": dict(length=100),
  "copy_memory": dict(num_symbols=8, num_recall=5, delay=40, protocol="recall"),
  "rotation": dict(dim=8, length=64, recall=0, rotation_seed=0),
  "rotation_recall": dict(dim=8, length=64, recall=8, rotation_seed=0),
  "anbn": dict(
    n_min=1, n_max=16, start_symbol=False, metric="sequences_solved"
  ),
  "henon": dict(sequence_length=200),
  "lorenz": dict(sample_every=2, sequence_length=200),
  "mackey_glass": dict(sample_every=10, sequence_length=200),
}
# sketched-rtrl's steps per task (rtrl.tasks.suite.PEER_NUM_STEPS).
NUM_STEPS = {
  "adding": 20_000,
  "copy_memory": 20_000,
  "rotation": 20_000,
  "rotation_recall": 30_000,
  "anbn": 20_000,
  "henon": 15_000,
  "lorenz": 15_000,
  "mackey_glass": 15_000,
}


def get_config(preset: str = "") -> ml_collections.ConfigDict:
  """Every field the suite experiment reads; `preset` names the task."""
  task = preset or "adding"
  if task not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; known: {PRESETS}")
  config = ml_collections.ConfigDict()

  # Task (rtrl/tasks/suite.py).
  config.task = task
  config.task_settings = ml_collections.ConfigDict(TASK_SETTINGS[task])

  # Model (experiments/online/setup.py): `num_layers` layers of `cell`
  # (rnn | leaky_rnn | rhn | lstm | gru | lru), each followed by `head` (identity |
  # lru_block, with `model_size` outputs; 0: the cell's), and a readout.
  config.cell = "rnn"
  config.hidden_size = 64
  config.lru_r_min = 0.0
  config.lru_r_max = 0.99
  # A sparse recurrence: this fraction of W_h kept (1: dense), drawn
  # from mask_seed; leaky_rnn's leak α (h' = (1-α) h + α tanh(z)).
  config.recurrent_density = 1.0
  config.mask_seed = 0
  config.leak = 0.1
  config.num_layers = 1
  config.head = "identity"
  config.model_size = 0
  # linear | feedback_alignment (RFLO's fixed random feedback matrix).
  config.readout = "linear"
  config.init_stddev = 0.0  # > 0: every weight normal(0, it); 0: defaults

  # Estimator: rtrl, uoro, kf, kf_avg, kf_approx, ok, ok_biased, ktp,
  # snap1, snap, sk_rtrl, rflo (trained online), or tbptt.
  config.estimator = "rtrl"
  config.rank = 4  # kf_avg, kf_approx, ok, ok_biased, ktp, sk_rtrl
  config.order = 2  # snap (SnAp-n's n)
  config.truncation = 25  # tbptt's window (divides chunk_steps)
  # > 0: every this many steps, the cell gradient's cosine to exact RTRL's
  # (an exact-RTRL shadow on the same trajectory, exact RTRL's cost), logged
  # as cosine_to_rtrl (and SK-RTRL's certificate); 0: off. Online
  # single-cell estimators only.
  config.shadow_every = 0

  # Optimizer (as configs/copy_task.py).
  config.optimizer = "adam"
  config.learning_rate = 1e-3
  config.learning_rates = ()  # e.g. (1e-3, 3e-3); empty: learning_rate
  config.clip_norm = 0.0
  config.cell_clip_norm = 0.0
  config.accumulate_steps = 1
  config.weight_decay = 0.0
  config.recurrence_learning_rate_factor = 1.0
  config.learning_rate_schedule = "constant"
  config.warmup_updates = 0

  # Run (experiments/loop/).
  config.batch_size = 8
  config.seed = 0
  config.num_seeds = 1
  config.num_steps = NUM_STEPS[task]
  config.chunk_steps = 250
  config.log_every = 1000
  config.checkpoint_every = 5000
  config.keep_checkpoints = 2
  config.matmul_precision = "highest"
  config.skip_nonfinite_updates = False
  config.allow_config_change = False
  config.num_devices = 0
  config.mesh_shape = ()
  config.distributed = False
  config.coordinator_address = ""
  config.num_processes = 1
  config.process_id = 0
  return config
