r"""A task of the suite (rtrl/tasks/suite.py), trained online; one preset per
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

from ml_collections import config_dict

from configs import common

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
# sketched-rtrl's steps per task: Table 3's 20,000 (diagnostic tasks), Table
# 6's 15,000 (chaotic series); rotation recall appears only in its
# certificate runs (30,000 steps, recurrent spectral norm clipped at 0.9).
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


def get_config(preset: str = "") -> config_dict.ConfigDict:
  """Every field the suite experiment reads; `preset` names the task."""
  task = preset or "adding"
  if task not in PRESETS:
    raise common.unknown_preset("configs/suite_task.py", preset, PRESETS)
  config = config_dict.ConfigDict()

  # Task (rtrl/tasks/suite.py).
  config.task = task
  # The task's settings (each preset lists all of its task's).
  config.task_settings = config_dict.ConfigDict(TASK_SETTINGS[task])

  # sketched-rtrl's protocol (run_m3.py's defaults, the commands of its
  # README): a tanh RNN of 64 units, a linear readout, batch 8, Adam at 1e-3
  # with one update a step, TBPTT's window 25.
  common.online_model_fields(
    config, cell="rnn", hidden_size=64, init_stddev=0.0
  )
  common.online_estimator_fields(
    config,
    estimator="rtrl",
    rank=4,
    truncation=25,
    shadow_every=0,  # also logs SK-RTRL's certificate (see above)
  )
  common.online_optimizer_fields(config, learning_rate=1e-3)
  config.batch_size = 8
  common.online_run_fields(
    config,
    num_steps=NUM_STEPS[task],
    chunk_steps=250,
    log_every=1000,
    checkpoint_every=5000,
  )
  return config
