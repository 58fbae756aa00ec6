"""TF1's Adam, with which the official OK code steps; and `masked_updates`,
which keeps a sparse cell's fixed zeros through any optimiser.

The official OK code (TF1) trains with `tf.train.AdamOptimizer` and feeds it
the cell gradient in its own units. Two details change the update compared
with `optax.adam` on the batch-mean gradient, and together they measurably
change learning (char-PTB, 8-OK, RHN-256, batch 32, lr 10^-3.5: the escape
from the unigram plateau comes ~100-200 steps earlier, the training loss's
moving average at step 2000 is 0.02-0.05 bits lower; README, "The official
code's own runs"):

* TF1's epsilon form. TF1 Adam computes
  `lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)` and steps `lr_t m / (sqrt(v) + eps)`
  with the *uncorrected* `v`, which is `m_hat / (sqrt(v_hat) + eps_t)` with
  `eps_t = eps / sqrt(1 - b2^t)` (about 32 eps at t = 1, 1.26 eps at
  t = 1000) where optax adds `eps` to `sqrt(v_hat)`.
* The gradient's scale. Its per-step loss is the batch mean and it divides
  the summed per-example cell gradient by the batch size once more, so Adam
  sees `g / B` for the cell (`g` the batch-mean gradient) and `g` for the
  readout. Adam is scale-invariant except through `eps`: at B = 32 the
  effective epsilon of the cell's weights is `32 eps_t` in batch-mean units,
  which damps the steps of weights with small gradients (the input-symbol
  rows of `W`: their Adam step is ~30% smaller on average at step 2000).
  Its clipping (norm 100 on PTB, 1 on Copy) acts on `g / B`.

The experiments compose the whole official update from these pieces
(`config.optimizer = "tf1_adam"`, `experiments/online/setup.py`): the
cell's batch-mean gradient clipped in our units, divided by the batch size,
then `tf1_adam`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


class Tf1AdamState(NamedTuple):
  """`scale_by_tf1_adam`'s state: the step count and both moments."""

  count: jax.Array  # type: ignore[assignment]  # () int32, steps taken (optax's name)
  mu: Any
  nu: Any


def scale_by_tf1_adam(
  b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> optax.GradientTransformation:
  """Adam's direction in TF1's form: `sqrt(1 - b2^t) / (1 - b1^t) * m /
  (sqrt(v) + eps)` (multiply by `-learning_rate` to step).

  Equals `optax.scale_by_adam(b1, b2, eps)` with `eps` replaced by
  `eps / sqrt(1 - b2^t)` at step t (see the module docstring).
  """

  def init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return Tf1AdamState(
      count=jnp.zeros((), jnp.int32),
      mu=zeros,
      nu=jax.tree_util.tree_map(jnp.zeros_like, params),
    )

  def update(updates, state, params=None):
    del params
    count = state.count + 1
    mu = jax.tree_util.tree_map(
      lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates
    )
    nu = jax.tree_util.tree_map(
      lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, updates
    )

    def direction(m, v):
      t = count.astype(m.dtype)
      factor = jnp.sqrt(1 - b2**t) / (1 - b1**t)
      return factor * m / (jnp.sqrt(v) + eps)

    return (
      jax.tree_util.tree_map(direction, mu, nu),
      Tf1AdamState(count=count, mu=mu, nu=nu),
    )

  return optax.GradientTransformation(init, update)


def tf1_adam(
  learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
) -> optax.GradientTransformation:
  """`tf.train.AdamOptimizer(learning_rate, b1, b2, eps)` as an optax
  transformation (`learning_rate` may be a traced scalar)."""
  return optax.chain(
    scale_by_tf1_adam(b1, b2, eps), optax.scale_by_learning_rate(learning_rate)
  )


def warmup_cosine_schedule(
  peak_value, warmup_updates: int, total_updates: int, end_value: float = 0.0
):
  """The LRU papers' learning-rate schedule, as a function of the update
  count: linear from `peak_value / warmup_updates` to `peak_value` over the
  first `warmup_updates` updates, then a cosine from `peak_value` down to
  `end_value` at `total_updates` (Orvieto et al. 2023; Zucchet et al. 2023,
  whose sCIFAR runs warm up for 18 of 180 epochs).

  Unlike `optax.warmup_cosine_decay_schedule`, `peak_value` may be a traced
  scalar (a vmapped learning-rate axis): nothing here compares it in Python.
  """
  if warmup_updates < 0 or total_updates <= warmup_updates:
    raise ValueError(
      "warmup_cosine_schedule needs 0 <= warmup_updates < "
      f"total_updates, got {warmup_updates} and "
      f"{total_updates}"
    )
  decay_updates = total_updates - warmup_updates

  def schedule(count):
    count = jnp.asarray(count, jnp.float32)
    warm = peak_value * (count + 1) / max(warmup_updates, 1)
    progress = jnp.clip((count - warmup_updates) / decay_updates, 0.0, 1.0)
    cosine = end_value + (peak_value - end_value) * 0.5 * (
      1 + jnp.cos(jnp.pi * progress)
    )
    return jnp.where(count < warmup_updates, warm, cosine)

  return schedule


def masked_updates(mask: Any) -> optax.GradientTransformation:
  """Zeroes the updates wherever `mask` is 0: chained after an optimiser,
  parameters off the mask never move (`optax.chain(opt, masked_updates(m))`).

  An optimiser may move a parameter whose gradient is zero (weight decay on
  a nonzero entry, a preconditioner that mixes entries such as RLS's), so
  masking the gradient alone does not keep a sparse cell sparse; the online
  trainers chain this for a cell with a `recurrent_mask`.

  Args:
    mask: a pytree that is a prefix of the updates' structure, whose leaves
      are 0/1 (or bool) arrays broadcastable to the update leaves they
      cover, or None (those updates pass unchanged); or a callable
      `updates -> such a pytree` (evaluated on shapes at trace time, e.g.
      `W`'s mask from its input size).

  Returns:
    The `optax.GradientTransformation` (state `optax.EmptyState`).
  """

  def init(params):
    del params
    return optax.EmptyState()

  def update(updates, state, params=None):
    del params
    tree = mask(updates) if callable(mask) else mask

    def keep(m, u):
      if m is None:
        return u
      return jnp.where(jnp.asarray(m) != 0, u, jnp.zeros_like(u))

    masked = jax.tree_util.tree_map(
      keep, tree, updates, is_leaf=lambda m: m is None
    )
    return masked, state

  return optax.GradientTransformation(init, update)


def keep_recurrent_mask(
  optimizer: optax.GradientTransformation, cell: Any
) -> optax.GradientTransformation:
  """`optimizer` followed by `masked_updates` of `cell.params_mask` on the
  trainers' `params['cell']` when `cell` has a `recurrent_mask`; else
  `optimizer` itself (the same state structure: dense runs and their
  checkpoints are unchanged). What `rtrl.make_online_trainer` and
  `rtrl.make_tbptt_trainer` apply.

  Args:
    optimizer: any optax transformation of `{'cell': ..., ...}` params.
    cell: the trained cell (any kind; only a sparse `rtrl.cells.Cell` has
      a `recurrent_mask`).
  """
  if getattr(cell, "recurrent_mask", None) is None:
    return optimizer

  def masks(updates):
    return {**dict.fromkeys(updates), "cell": cell.params_mask(updates["cell"])}

  return optax.chain(optimizer, masked_updates(masks))
