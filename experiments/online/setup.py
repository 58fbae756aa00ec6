"""Builds the pieces of an online-RTRL or TBPTT run from a config.

Shared by the Copy task, char-PTB and sequential CIFAR-10; holds no
algorithm, only the mapping from config fields to library objects. The
fields (every one listed in `configs/{copy_task,ptb,seq_cifar}.py`):

* `estimator`: a registered estimator (rtrl, uoro, kf, kf_avg, kf_approx,
  ok, ok_biased, ktp, snap1, snap, sk_rtrl, rflo) trained online, or tbptt;
  its hyper-parameters from the fields of their names (`ESTIMATOR_FIELDS`:
  `rank`, `order` (snap's), SK-RTRL's `preprojection_rank`, ...);
  `truncation`: the TBPTT horizon;
* `cell` (rnn, leaky_rnn, rhn, lstm, gru or lru) with `hidden_size` units,
  an LRU's |λ| ring `lru_r_min` .. `lru_r_max`, a sparse recurrence
  (`recurrent_density`, 1: dense; `mask_seed`), a leaky_rnn's `leak`; `readout`: linear, or
  feedback_alignment (RFLO's random feedback);
* the stack: `num_layers` layers (`rtrl.stack`), each followed by `head`
  (identity, or lru_block with `model_size` outputs; 0: the cell's);
* the optimiser: `optimizer` (adam | tf1_adam), `learning_rate(s)`,
  `clip_norm`, `cell_clip_norm`, `accumulate_steps`, `init_stddev`, and the
  LRU papers' options `weight_decay`, `recurrence_learning_rate_factor`,
  `learning_rate_schedule`, `warmup_updates` (`lru_adam`);
* `shadow_every` (the suite task's only; `make_trainer`'s argument): the
  online single-cell trainer's exact-RTRL shadow
  (`rtrl.online.make_online_trainer`).
"""

from __future__ import annotations

import typing
from typing import Any

import jax
import optax

from experiments.loop import checks
from experiments.loop.errors import ConfigError
from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import heads
from rtrl import online
from rtrl import optim
from rtrl import readout
from rtrl import stack
from rtrl import validation
from rtrl.cells import lru

HEADS = ("identity", "lru_block")

# The fields read here that were added after runs were saved, each at the
# value that reproduces what those runs computed: each online experiment's
# `runner.Experiment.resume_defaults` starts from these.
RESUME_DEFAULTS = {
  "optimizer": "adam",
  "init_stddev": 0.0,
  "cell_clip_norm": 0.0,
  "readout": "linear",
  "num_layers": 1,
  "head": "identity",
  "model_size": 0,
  "weight_decay": 0.0,
  "recurrence_learning_rate_factor": 1.0,
  "learning_rate_schedule": "constant",
  "warmup_updates": 0,
  "shadow_every": 0,
  # Listed in every online config since configs became pure data; before,
  # an LRU in the Copy and PTB configs took the cell's ring.
  "lru_r_min": 0.0,
  "lru_r_max": 0.99,
  "recurrent_density": 1.0,
  "mask_seed": 0,
  "leak": 0.1,
  "order": 2,
  # SK-RTRL's pre-projection fields: None, the factory's default.
  "preprojection": None,
  "preprojection_rank": None,
  "subspace_iterations": None,
}


def validate_trainer(config) -> None:
  """`config.estimator` (a registered estimator, trained online, or
  'tbptt') and the fields it reads: `rank` for the estimators that take one,
  `truncation` (dividing `chunk_steps`) for TBPTT; the learning rate(s), and
  the initialisation and clipping fields (>= 0, 0 meaning off)."""
  trainers = tuple(estimators.names()) + ("tbptt",)
  if config.estimator not in trainers:
    raise ConfigError(
      f"config.estimator must be one of {trainers}, got {config.estimator!r}"
    )
  if config.estimator == "tbptt":
    checks.positive_ints(config, "truncation")
    checks.multiple_of(
      config, "chunk_steps", config.truncation, "config.truncation"
    )
  elif config.estimator == "sk_rtrl":  # rank 0 is SnAp-1
    checks.nonnegative_ints(config, "rank")
    validate_preprojection(config)
  elif "rank" in estimators.hyperparameters(config.estimator):
    checks.positive_ints(config, "rank")
  elif "order" in estimators.hyperparameters(config.estimator):
    checks.positive_ints(config, "order")
  for rate in list(config.learning_rates) + [config.learning_rate]:
    validation.positive_number("config.learning_rate(s)", rate)
  if config.optimizer not in OPTIMIZERS:
    raise ConfigError(
      f"config.optimizer must be one of {OPTIMIZERS}, got {config.optimizer!r}"
    )
  checks.positive_ints(config, "num_layers", "accumulate_steps")
  checks.nonnegative_ints(
    config, "model_size", zero_means="the cell's output size"
  )
  if config.head not in HEADS:
    raise ConfigError(
      f"config.head must be one of {HEADS}, got {config.head!r}"
    )
  off_or_positive = {
    "init_stddev": config.init_stddev,
    "clip_norm": config.clip_norm,
    "cell_clip_norm": config.cell_clip_norm,
  }
  for field, value in off_or_positive.items():
    if value < 0:
      raise ConfigError(f"config.{field} must be >= 0 (0: off), got {value!r}")
  _validate_lru_optimizer(config)


# `rtrl.estimators.sk_rtrl`'s `preprojection` values, read from its
# signature's `Literal` (written once, there).
PREPROJECTIONS = typing.get_args(
  typing.get_type_hints(estimators.sk_rtrl)["preprojection"]
)


def validate_preprojection(config) -> None:
  """SK-RTRL's pre-projection fields: each None (the factory's default) or
  a valid value, named as a config field (the factory also bounds
  `preprojection_rank` by the state size)."""
  if config.preprojection not in (None,) + PREPROJECTIONS:
    raise ConfigError(
      f"config.preprojection must be one of {PREPROJECTIONS} or None (the "
      f"factory's default), got {config.preprojection!r}"
    )
  if config.preprojection_rank is not None:
    checks.positive_ints(config, "preprojection_rank")
  if config.subspace_iterations is not None:
    checks.nonnegative_ints(config, "subspace_iterations")


def validate_shadow_every(config, shadow_every: int) -> int:
  """`shadow_every` (an experiment's `config.shadow_every`), checked: an
  integer >= 0 (0: off), and 0 for TBPTT and stacks (the exact-RTRL shadow
  is the online single-cell trainer's, `rtrl.online.make_online_trainer`).

  Raises:
    ConfigError (a ValueError): naming config.shadow_every.
  """
  checks.nonnegative_int("config.shadow_every", shadow_every, "off")
  if shadow_every and (config.estimator == "tbptt" or is_stacked(config)):
    raise ConfigError(
      "config.shadow_every must be 0 (off) for TBPTT and stacks (the "
      "exact-RTRL shadow is the online single-cell trainer's), got "
      f"{shadow_every!r} with estimator={config.estimator!r}, "
      f"num_layers={config.num_layers}, head={config.head!r}"
    )
  return shadow_every


SCHEDULES = ("constant", "warmup_cosine")


def _validate_lru_optimizer(config) -> None:
  if config.weight_decay < 0:
    raise ConfigError(
      f"config.weight_decay must be >= 0 (0: off), got {config.weight_decay!r}"
    )
  validation.positive_number(
    "config.recurrence_learning_rate_factor",
    config.recurrence_learning_rate_factor,
  )
  schedule = config.learning_rate_schedule
  if schedule not in SCHEDULES:
    raise ConfigError(
      f"config.learning_rate_schedule must be one of "
      f"{SCHEDULES}, got {schedule!r}"
    )
  if schedule == "warmup_cosine":
    checks.nonnegative_ints(config, "warmup_updates")
    if config.warmup_updates >= total_updates(config):
      raise ConfigError(
        f"config.warmup_updates ({config.warmup_updates}) must be below "
        f"the run's updates, num_steps // accumulate_steps = "
        f"{total_updates(config)}"
      )
  if config.optimizer != "adam" and _lru_optimizer_options(config):
    raise ConfigError(
      "config.weight_decay, recurrence_learning_rate_factor and "
      "learning_rate_schedule apply to optimizer='adam' only; got "
      f"optimizer={config.optimizer!r} with {_lru_optimizer_options(config)}"
    )


def _lru_optimizer_options(config) -> dict:
  """The LRU optimiser fields that are on (differ from their off values)."""
  values = {
    "weight_decay": (config.weight_decay, 0.0),
    "recurrence_learning_rate_factor": (
      config.recurrence_learning_rate_factor,
      1.0,
    ),
    "learning_rate_schedule": (config.learning_rate_schedule, "constant"),
  }
  return {k: value for k, (value, off) in values.items() if value != off}


def total_updates(config) -> int:
  """The run's optimiser updates: one every `accumulate_steps` steps."""
  return config.num_steps // config.accumulate_steps


def is_stacked(config) -> bool:
  """More than one layer, or a head other than the identity."""
  return config.num_layers > 1 or config.head != "identity"


def make_head(config, cell) -> heads.Head:
  if config.head == "identity":
    return heads.identity()
  return heads.lru_block(config.model_size or cell.hidden_size)


def _one_cell(config):
  """`config.cell` with `config.hidden_size` units; an LRU's |λ| ring from
  `config.lru_r_min` / `config.lru_r_max` (the LRU papers' sCIFAR ring is
  0.9 .. 0.999); a Lemma-1 cell's sparse recurrence from
  `config.recurrent_density` (1: dense) and `config.mask_seed`; a
  leaky_rnn's `config.leak`."""
  if config.cell == "lru":
    ring = dict(r_min=config.lru_r_min, r_max=config.lru_r_max)
    return cells.make(config.cell, config.hidden_size, **ring)
  options: dict[str, Any] = {}
  if config.recurrent_density != 1.0:
    options.update(
      recurrent_density=config.recurrent_density, mask_seed=config.mask_seed
    )
  if config.cell == "leaky_rnn":
    options["leak"] = config.leak
  try:
    return cells.make(config.cell, config.hidden_size, **options)
  except ValueError as error:  # name the config field, not the argument
    raise ConfigError(f"config: {error}") from None


def make_cell(config):
  """`config.cell` with `config.hidden_size` units, or, for a stack, the
  `rtrl.stack.StackedCell` of `config.num_layers` such layers, each with
  its estimator (none for TBPTT) and head."""
  if not is_stacked(config):
    return _one_cell(config)
  layers = []
  for _ in range(config.num_layers):
    cell = _one_cell(config)
    estimator = (
      None if config.estimator == "tbptt" else make_estimator(config, cell)
    )
    layers.append(stack.Layer(cell, estimator, make_head(config, cell)))
  return stack.StackedCell(layers)


READOUTS = {
  "linear": readout.linear,
  "feedback_alignment": readout.feedback_alignment,
}


def make_readout(config) -> readout.Readout:
  """`config.readout`: 'linear' (trained by its exact gradient, which also
  carries the error to the cell) or 'feedback_alignment' (the error reaches
  the cell through a fixed random matrix: RFLO's random feedback)."""
  name = config.readout
  if name not in READOUTS:
    raise ConfigError(
      f"config.readout must be one of {sorted(READOUTS)}, got {name!r}"
    )
  return READOUTS[name]()


def init_params(
  cell: cells.Cell,
  key,
  input_size: int,
  num_outputs: int,
  init_stddev: float = 0.0,
  readout_fn: readout.Readout | None = None,
) -> dict:
  """`{'cell': cell params, 'readout': readout params}`, fresh: the cell's
  and readout's (`readout_fn`, default linear) default initialisation, or
  with `init_stddev > 0` every weight (the fused `W` with its bias row, the
  readout's `w` and `b`) drawn normal(0, init_stddev), as the official OK
  code does."""
  readout_fn = readout.linear() if readout_fn is None else readout_fn
  cell_key, readout_key = jax.random.split(key)
  params = {
    "cell": cell.init(cell_key, input_size),
    "readout": readout_fn.init(readout_key, cell.hidden_size, num_outputs),
  }
  if not init_stddev:
    return params
  leaves, tree = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
  return jax.tree_util.tree_unflatten(
    tree,
    [
      init_stddev * jax.random.normal(k, a.shape, a.dtype)
      for k, a in zip(keys, leaves)
    ],
  )


# The config fields an estimator's hyper-parameters come from, generated
# from the registered factories' signatures (`estimators.spec(name)
# .hyperparameters`): field name -> the factory's default (None where
# required). A config lists those its experiment offers; an optional one
# set to None (`config_dict.placeholder`) keeps the factory's default.
ESTIMATOR_FIELDS: dict[str, Any] = {
  h.name: h.default for s in estimators.SPECS for h in s.hyperparameters
}


def estimator_hyperparameters(config) -> dict[str, Any]:
  """`config.estimator`'s hyper-parameters, each from the config field of
  its name (`ESTIMATOR_FIELDS`): every one the config has, but an
  optional one at None (the factory's default then).

  Raises:
    ConfigError (a ValueError): a required hyper-parameter without a
      field, naming it.
  """
  hparams = {}
  for h in estimators.spec(config.estimator).hyperparameters:
    if h.name not in config:
      if h.required:
        raise ConfigError(
          f"config.estimator={config.estimator!r} needs config.{h.name} "
          f"({h.valid}), which this config does not have"
        )
      continue
    value = config[h.name]
    if h.required or value is not None:
      hparams[h.name] = value
  return hparams


def make_estimator(config, cell) -> estimators.Estimator:
  """`config.estimator` with its hyper-parameters from the config
  (`estimator_hyperparameters`)."""
  return estimators.make(
    config.estimator, cell, **estimator_hyperparameters(config)
  )


OPTIMIZERS = ("adam", "tf1_adam")
# The cell's parameters (a stack's: every layer's cell and head), not the
# readout's.
CELL_ONLY = {"cell": True, "readout": False}


def base_optimizer(config, learning_rate) -> optax.GradientTransformation:
  """`config.optimizer`: 'adam' (optax's Adam on the batch-mean gradient) or
  'tf1_adam', the official OK code's update: TF1's AdamOptimizer
  (`rtrl.optim.tf1_adam`) fed the cell gradient in its units, the batch-mean
  gradient divided by the batch size (which matters through Adam's epsilon
  only; see `rtrl/optim.py`)."""
  if config.optimizer == "tf1_adam":
    return optax.chain(
      optax.masked(optax.scale(1.0 / config.batch_size), CELL_ONLY),
      optim.tf1_adam(learning_rate),
    )
  return lru_adam(config, learning_rate)


def recurrence_labels(params) -> Any:
  """'recurrence' for the LRU's ν, θ, γ leaves (wherever they sit: a plain
  cell or any layer of a stack), 'regular' for every other leaf."""

  def label(path, _):
    name = getattr(path[-1], "key", None) if path else None
    return "recurrence" if name in lru.RECURRENCE_PARAMS else "regular"

  return jax.tree_util.tree_map_with_path(label, params)


def lru_adam(config, learning_rate) -> optax.GradientTransformation:
  """Adam at `learning_rate` (a float or a traced scalar), with the LRU
  papers' options (see the module docstring): the learning rate follows
  the schedule; ν, θ, γ take `recurrence_learning_rate_factor` times it and
  plain Adam, every other parameter AdamW with `weight_decay` (the setting
  their sCIFAR and IMDB runs call "Bfast_and_decay"). With the defaults it
  is `optax.adam(learning_rate)`."""
  rate = learning_rate
  if config.learning_rate_schedule == "warmup_cosine":
    rate = optim.warmup_cosine_schedule(
      learning_rate, config.warmup_updates, total_updates(config)
    )
  factor = config.recurrence_learning_rate_factor
  decay = config.weight_decay
  if factor == 1.0 and decay == 0.0:
    return optax.adam(rate)
  recurrence_rate = (
    (lambda count: factor * rate(count)) if callable(rate) else factor * rate
  )
  return optax.multi_transform(
    {
      "recurrence": optax.adam(recurrence_rate),
      "regular": optax.adamw(rate, weight_decay=decay),
    },
    recurrence_labels,
  )


def make_optimizer(config, learning_rate) -> optax.GradientTransformation:
  """`base_optimizer` at `learning_rate`, behind the config's optional
  clipping (`clip_norm`, `cell_clip_norm`, both on the batch-mean gradient)
  and NaN/Inf skipping."""
  optimizer = base_optimizer(config, learning_rate)
  if config.clip_norm:
    optimizer = optax.chain(
      optax.clip_by_global_norm(config.clip_norm), optimizer
    )
  if config.cell_clip_norm:
    # Only the cell gradient, the readout's unclipped (the OK code on PTB).
    optimizer = optax.chain(
      optax.masked(optax.clip_by_global_norm(config.cell_clip_norm), CELL_ONLY),
      optimizer,
    )
  if config.skip_nonfinite_updates:
    # A step whose gradient holds a NaN/Inf leaves parameters and optimiser
    # moments unchanged (long runs survive a rare bad step).
    optimizer = optax.apply_if_finite(optimizer, max_consecutive_errors=1000)
  return optimizer


def make_trainer(
  config, cell: cells.Cell, learning_rate=None, loss=None, shadow_every=0
) -> online.Trainer:
  """TBPTT if `config.estimator == 'tbptt'`, else the online trainer.

  `learning_rate` (default `config.learning_rate`) may be a traced scalar, so
  a run axis can vmap over learning rates. `loss`: the per-example loss
  (`rtrl.losses`; None: softmax cross-entropy). `shadow_every` > 0 (the
  online single-cell trainer only; `validate_shadow_every`): its steps
  report `rtrl.online.ShadowStepMetrics`.
  """
  validate_shadow_every(config, shadow_every)
  if learning_rate is None:
    learning_rate = config.learning_rate
  optimizer = make_optimizer(config, learning_rate)
  if config.estimator == "tbptt":
    return bptt.make_tbptt_trainer(
      cell,
      optimizer,
      config.truncation,
      readout=make_readout(config),
      loss=loss,
    )
  if isinstance(cell, stack.StackedCell):
    return stack.make_stacked_online_trainer(
      cell.layers,
      optimizer,
      accumulate_steps=config.accumulate_steps,
      readout=make_readout(config),
      loss=loss,
    )
  return online.make_online_trainer(
    cell,
    make_estimator(config, cell),
    optimizer,
    accumulate_steps=config.accumulate_steps,
    readout=make_readout(config),
    loss=loss,
    shadow_every=shadow_every,
  )


def describe(config) -> str:
  """A short name like '16-ok', 'tbptt-50' or 'rtrl' for logs and legends."""
  if config.estimator == "tbptt":
    name = f"tbptt-{config.truncation}"
  elif "rank" in estimators.hyperparameters(config.estimator):
    name = f"{config.rank}-{config.estimator}"
  elif "order" in estimators.hyperparameters(config.estimator):
    name = f"{config.estimator}-{config.order}"
  else:
    name = config.estimator
  if config.cell != "lru" and config.recurrent_density != 1.0:
    name += f" (density {config.recurrent_density:g})"
  if is_stacked(config):
    name += f" x {config.num_layers} layers ({config.head})"
  return name


def batch_axes(state: dict) -> dict:
  """Batch axes of an online experiment's run state, for the `data` mesh
  axis (`experiments/loop/sharding.py`).

  `state` is a dict whose `'trainer'` entry is the trainer state (its
  `cell_state` and `tstate` hold one row per example) and whose `'stream'`
  entry, if any, is the per-example data stream; every other entry
  (parameters, optimiser state, curriculum, best parameters, ...) is
  replicated. Only the structure of `state` is read.
  """
  replicate = lambda tree: jax.tree_util.tree_map(lambda _: None, tree)
  per_example = lambda tree: jax.tree_util.tree_map(lambda _: 0, tree)
  axes = {}
  for key, value in state.items():
    if key == "trainer":
      axes[key] = type(value)(
        **{
          field: (
            per_example if field in ("cell_state", "tstate") else replicate
          )(getattr(value, field))
          for field in value._fields
        }
      )
    elif key == "stream":
      axes[key] = per_example(value)
    else:
      axes[key] = replicate(value)
  return axes
