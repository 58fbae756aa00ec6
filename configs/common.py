"""The fields and presets several config files share, written once.

Each `configs/NAME.py` lists what is its own and calls these for the rest:
`run_fields` (devices, hosts, precision: every experiment), the
classifiers' (`mnist`, `cifar10`, `imdb`) optimiser, data and run blocks,
the online experiments' (`copy_task`, `ptb`, `seq_cifar`, `suite_task`)
model, estimator, optimiser and run blocks, and the papers' presets (the
official OK code's runs, the online LRU paper's optimiser). A keyword whose
name is a field sets that field; its comment in the config file is the
field's help (`python -m experiments.NAME --help`). Pure data: this module
imports nothing from `experiments/` or the libraries.
"""

import difflib

import ml_collections
from ml_collections import config_dict


def unknown_preset(
  config_file: str, preset: str, known, kind: str = "preset", note: str = ""
) -> ValueError:
  """The error for a preset `config_file` does not take, naming the nearest
  known one (and `note`, how presets combine)."""
  known = tuple(known)
  close = difflib.get_close_matches(preset, known, n=1)
  hint = f"; did you mean {close[0]!r}?" if close else ""
  names = ", ".join(repr(name) for name in known)
  return ValueError(
    f"{config_file}: unknown {kind} {preset!r}{hint} (known: {names}"
    f"{'; ' + note if note else ''})"
  )


def run_fields(config: ml_collections.ConfigDict, matmul_precision: str):
  """The fields every training experiment reads from `experiments/loop/`."""
  # The GEMM precision the training chunk is traced under (rtrl.linalg):
  # default (XLA's own) | highest (true float32) | tensorfloat32 | bfloat16.
  config.matmul_precision = matmul_precision
  # A step whose gradient has a NaN/Inf is skipped instead of stopping.
  config.skip_nonfinite_updates = False
  config.allow_config_change = False  # resume although the config differs
  config.num_devices = 0  # 0: every visible device
  config.mesh_shape = ()  # (data, runs) devices; (): every device on data
  distributed_fields(config)


def distributed_fields(config: ml_collections.ConfigDict):
  """Multi-host runs (experiments/loop/cli.py initialises every main alike)."""
  # Multi-host: jax.distributed.initialize(); coordinator "" auto-detects
  # (SLURM, TPU, JAX_* variables), else host:port of process 0.
  config.distributed = False
  config.coordinator_address = ""
  config.num_processes = 1
  config.process_id = 0


# The classifiers of the RLS paper (Zhang et al. 2021, section VI).

# Optimiser presets -> (optimizer, loss, momentum α, use the paper's L1 γ):
# the paper's legends (Figs. 2, 3): RLS, RLS+M, RLS+M+R, HRLS, HRLS+M,
# HRLS+M+R, Adam.
_CLASSIFIER_PRESETS = {
  "rls": ("rls", "mse", None, False),
  "rls_momentum": ("rls", "mse", 0.5, False),
  "rls_momentum_l1": ("rls", "mse", 0.5, True),
  "rls_hybrid": ("rls_hybrid", "cross_entropy", None, False),
  "rls_hybrid_momentum": ("rls_hybrid", "cross_entropy", 0.5, False),
  "rls_hybrid_momentum_l1": ("rls_hybrid", "cross_entropy", 0.5, True),
  "adam_mse": ("adam", "mse", None, False),
  "adam_ce": ("adam", "cross_entropy", None, False),
}
CLASSIFIER_PRESETS = tuple(_CLASSIFIER_PRESETS)
# A classifier preset may be followed by these (`rls,small`).
CLASSIFIER_MODIFIERS = ("small",)


def classifier_preset(config_file: str, arg: str) -> tuple[str, bool]:
  """`PRESET[,small]` -> (the optimiser preset, whether `small`)."""
  parts = [p.strip() for p in (arg or "rls").split(",") if p.strip()]
  names = [p for p in parts if p not in CLASSIFIER_MODIFIERS] or ["rls"]
  if len(names) != 1 or names[0] not in _CLASSIFIER_PRESETS:
    raise unknown_preset(
      config_file,
      arg,
      CLASSIFIER_PRESETS,
      kind="optimiser preset",
      note="one, optionally followed by ',small'",
    )
  return names[0], "small" in parts


def classifier_optimizer_fields(
  config: ml_collections.ConfigDict, preset: str, clip_norm: float, l1: float
):
  """The optimiser `preset` (see `_CLASSIFIER_PRESETS`) with the paper's
  gradient clipping `clip_norm` and L1 weight `l1` (its +R variants)."""
  optimizer, loss, momentum, uses_l1 = _CLASSIFIER_PRESETS[preset]
  # Optimizer: rls | rls_hybrid (RLS on the hidden layers, Adam on the
  # output layer) | adam | muon; the loss: mse | mse_mean | cross_entropy.
  config.optimizer = optimizer
  config.loss = loss
  config.clip_norm = clip_norm
  # Adam (PyTorch defaults in the paper): the whole net for `adam`, the
  # output layer for `rls_hybrid`, embeddings always.
  config.learning_rate = 1e-3
  config.embedding_learning_rate = 1e-3
  config.muon_adam_learning_rate = 1e-3  # muon: Adam's, beside Muon's
  # RLS (paper: P0 = I, lambda = 1, k = 0.1, eta = 1; +M: 0.5, +R: gamma).
  config.forgetting_factor = 1.0
  config.ratio = 0.1
  config.gradient_scale = 1.0  # η of the hidden layers.
  config.output_gradient_scale = 1.0  # η^L of the output layer (paper: 1).
  config.init_scale = 1.0
  # Keep P as S Sᵀ (rls.scale_by_rls(square_root=True)): PSD in float32.
  config.square_root = False
  config.momentum = config_dict.placeholder(float)  # None: off.
  config.l1 = config_dict.placeholder(float)  # None: off.
  config.momentum = momentum
  config.l1 = l1 if uses_l1 else None
  # What each RLS layer's P accumulates: "mean", the paper's k x̄x̄ᵀ of the
  # minibatch-mean input (eq. 33); "second_moment", the second moment of
  # `input_samples` input rows / conv patches (`rls.second_moment`; `ratio`
  # is then its weight c, 1 = exact least squares).
  config.input_statistics = "mean"
  config.input_samples = 256
  config.second_moment_direction = "eq63"  # Or "updated": η P_s ∇, no h.
  # Sweeps (vmapped runs, see experiments/loop/run_axes.py): a non-empty list
  # replaces the single value; runs = num_seeds x every combination.
  config.learning_rates = ()
  config.ratios = ()
  config.gradient_scales = ()


def classifier_data_fields(config: ml_collections.ConfigDict):
  """Where the dataset is and how much of it a run reads."""
  # The dataset's folder; None: $DATA_DIR/NAME, or downloaded into the cache.
  config.data_dir = config_dict.placeholder(str)
  config.train_limit = 0  # Use only the first N training examples (0: all).
  config.test_limit = 0  # Evaluate on N test examples (0: all).


def classifier_batch_fields(
  config: ml_collections.ConfigDict,
  eval_chunk_size: int,
  eval_train_set: bool,
):
  """Batches and evaluation."""
  config.batch_size = 128  # Examples per step (the paper's).
  # Train on the last n % batch_size examples of each epoch's permutation too
  # (PyTorch's DataLoader default, as in the paper).
  config.keep_partial_batch = True
  config.eval_chunk_size = eval_chunk_size  # Examples evaluated at once.
  config.eval_train_set = eval_train_set  # Whole-training-set loss per epoch.


def classifier_run_fields(config: ml_collections.ConfigDict):
  """The run: the paper's 100 epochs, checkpoints, devices."""
  # Run (experiments/loop/; steps are derived from epochs).
  config.epochs = 100
  config.seed = 0
  config.num_seeds = 1  # runs seed, seed + 1, ... in one vmapped program
  config.loss_every = 10  # Steps per point of `train_loss_curve`.
  config.checkpoint_every_epochs = 1
  config.keep_checkpoints = 2
  run_fields(config, matmul_precision="default")


# The online experiments: a stack of recurrent cells trained online.


def online_model_fields(
  config: ml_collections.ConfigDict,
  cell: str,
  hidden_size: int,
  init_stddev: float,
  lru_r_min: float = 0.0,
  lru_r_max: float = 0.99,
  num_layers: int = 1,
  head: str = "identity",
  model_size: int = 0,
):
  """The network (experiments/online/setup.py)."""
  # Model (experiments/online/setup.py): `num_layers` layers of `cell`
  # (rnn | leaky_rnn | rhn | lstm | gru | lru), each followed by `head`
  # (identity | lru_block, with `model_size` outputs; 0: the cell's), and a
  # readout.
  config.cell = cell
  config.hidden_size = hidden_size
  config.lru_r_min = lru_r_min  # an LRU's |λ| ring at initialisation
  config.lru_r_max = lru_r_max
  # A sparse recurrence: this fraction of W_h kept (1: dense), drawn
  # from mask_seed; leaky_rnn's leak α (h' = (1-α) h + α tanh(z)).
  config.recurrent_density = 1.0
  config.mask_seed = 0
  config.leak = 0.1
  config.num_layers = num_layers  # layers of `cell`, stacked
  config.head = head  # identity | lru_block, after each layer
  config.model_size = model_size  # the head's outputs; 0: the cell's
  # linear | feedback_alignment (RFLO's fixed random feedback matrix).
  config.readout = "linear"
  # > 0: every weight normal(0, it); 0: the cells' default initialisation.
  config.init_stddev = init_stddev


def online_estimator_fields(
  config: ml_collections.ConfigDict,
  estimator: str,
  rank: int,
  truncation: int,
  shadow_every: int = 0,
):
  """The gradient estimator (rtrl.estimators.make) or TBPTT."""
  # Estimator: rtrl, uoro, kf, kf_avg, kf_approx, ok, ok_biased, ktp,
  # snap1, snap, sk_rtrl, rflo (trained online), or tbptt.
  config.estimator = estimator
  config.rank = rank  # kf_avg, kf_approx, ok, ok_biased, ktp, sk_rtrl
  config.order = 2  # snap (SnAp-n's n)
  # sk_rtrl's pre-projection of each step's new mass: subspace_iteration |
  # svd, its width c, its iterations; None: the factory's default
  # (subspace iteration, c = max(4, ceil(rank / 4)), 2 iterations).
  config.preprojection = config_dict.placeholder(str)
  config.preprojection_rank = config_dict.placeholder(int)
  config.subspace_iterations = config_dict.placeholder(int)
  config.truncation = truncation  # tbptt's horizon (divides chunk_steps)
  # > 0: every this many steps, the cell gradient's cosine to exact RTRL's
  # (an exact-RTRL shadow on the same trajectory, exact RTRL's cost), logged
  # as cosine_to_rtrl; 0: off. Online single-cell estimators only.
  config.shadow_every = shadow_every


def online_optimizer_fields(
  config: ml_collections.ConfigDict,
  learning_rate: float,
  cell_clip_norm: float = 0.0,
  accumulate_steps: int = 1,
):
  """The optimiser (experiments/online/setup.py's make_optimizer)."""
  # Optimizer. adam (optax, on the batch-mean gradient) | tf1_adam (the
  # official OK code's update: TF1's Adam fed the cell gradient / batch).
  config.optimizer = "adam"
  config.learning_rate = learning_rate
  config.learning_rates = ()  # e.g. (1e-3, 3e-3); empty: learning_rate
  config.clip_norm = 0.0  # global-norm clipping of the gradient; 0: off
  # Clip only the cell's gradient (the batch-mean gradient's norm; the
  # readout's stays unclipped); 0: off.
  config.cell_clip_norm = cell_clip_norm
  config.accumulate_steps = accumulate_steps  # steps per (mean) update
  # The LRU papers' options (Adam only; off at these values): AdamW decay of
  # every parameter but the LRU's ν, θ, γ, which take this factor times the
  # rate; constant | warmup_cosine (linear warm-up over `warmup_updates`,
  # then a cosine to 0 at the last update).
  config.weight_decay = 0.0
  config.recurrence_learning_rate_factor = 1.0
  config.learning_rate_schedule = "constant"
  config.warmup_updates = 0


def online_run_fields(
  config: ml_collections.ConfigDict,
  num_steps: int,
  chunk_steps: int,
  log_every: int,
  checkpoint_every: int,
  eval_every: int | None = None,
):
  """The run (experiments/loop/): steps, records, checkpoints, devices."""
  # Run (experiments/loop/). Runs trained together as one vmapped program:
  # run j of each learning rate equals the single run with seed + j.
  config.seed = 0
  config.num_seeds = 1
  config.num_steps = num_steps
  config.chunk_steps = chunk_steps  # steps per jitted chunk
  config.log_every = log_every  # steps between records (multiple of chunk)
  if eval_every is not None:
    config.eval_every = eval_every  # steps between evaluations (of chunk)
  config.checkpoint_every = checkpoint_every
  config.keep_checkpoints = 2
  run_fields(config, matmul_precision="highest")


# The official OK code (Benzing et al. 2019, TensorFlow 1), in our config's
# units. Its logged runs (`shared/data/official_ok_logs/`): 16-OK on an
# RHN-128 at batch 16 on the Copy task and 8-OK on an RHN-256 at batch 32 on
# char-PTB, both with TF1's Adam at 10^-3.5 (`optimizer="tf1_adam"`, see
# `rtrl/optim.py`), every weight normal(0, 0.01), the cell's gradient
# clipped by norm (Copy 1.0, PTB 100 in its units), the readout's not.
OFFICIAL_LEARNING_RATE = 10**-3.5
OFFICIAL_INIT_STDDEV = 0.01


def official_cell_clip(official_threshold: float, batch_size: int) -> float:
  """The official code's cell-gradient clip on our batch-mean gradient.

  Its per-step loss is the batch mean, and it divides the summed
  per-example cell gradient by the batch size once more before clipping,
  so the tensor it clips is 1/B of the batch-mean gradient our trainer
  hands the optimiser: its threshold c is c * B on ours. (Adam is invariant
  to that scale except through its epsilon, which is why `tf1_adam` feeds
  Adam the cell gradient divided by B, as the official code does.)"""
  return float(official_threshold) * batch_size


def official_ok(
  rank: int, hidden_size: int, batch_size: int, cell_clip: float
) -> dict:
  """The official code's network and optimiser: `rank`-OK on an
  RHN-`hidden_size` at `batch_size`, its cell clip `cell_clip` in its
  units."""
  return dict(
    estimator="ok",
    rank=rank,
    cell="rhn",
    hidden_size=hidden_size,
    batch_size=batch_size,
    learning_rate=OFFICIAL_LEARNING_RATE,
    optimizer="tf1_adam",
    init_stddev=OFFICIAL_INIT_STDDEV,
    cell_clip_norm=official_cell_clip(cell_clip, batch_size),
    clip_norm=0.0,
  )


# The online LRU paper (Zucchet, Meier, Schug, Mujika, Sacramento, "Online
# learning of long-range dependencies", NeurIPS 2023), read from the sweep
# files of its public code (its `experiments/` folder). Table 1 / Figure 2:
# 4 LRU layers of 64 complex units in blocks of width 128 with a GLU, Adam
# at a rate from {1, 2, 4, 8, 16, 32} x 10^-3, λ and γ at half of it
# (`lr_factor` 0.5), a cosine to 0 over the run without warm-up, no weight
# decay, r_min 0, 3 seeds (their batch 50 and 25 epochs of their padded
# Copy task are not taken: the presets run it on our tasks, at the task's
# own batch size and length of run). Table 2 (sequential CIFAR-10):
# `configs/seq_cifar.py`. Not taken anywhere: their dropout (0.1), their
# cumulative mean pooling (`pool_st`; ours classifies at the last step),
# r_max 1.0 of their Copy runs (our ring is open at 1: 0.99 there).
LRU_RECURRENCE_LEARNING_RATE_FACTOR = 0.5  # their lr_factor
LRU_PAPER_TABLE_1 = dict(
  cell="lru",
  estimator="rtrl",
  num_layers=4,
  head="lru_block",
  model_size=128,
  hidden_size=64,
  # None of the OK presets' settings (TF1's Adam, normal(0, 0.01) weights,
  # cell clipping).
  optimizer="adam",
  init_stddev=0.0,
  cell_clip_norm=0.0,
  clip_norm=0.0,
  learning_rate=1e-3,
  learning_rates=(1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2),
  num_seeds=3,
  recurrence_learning_rate_factor=LRU_RECURRENCE_LEARNING_RATE_FACTOR,
  learning_rate_schedule="warmup_cosine",
  warmup_updates=0,
  weight_decay=0.0,
  accumulate_steps=1,
)
