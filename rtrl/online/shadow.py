"""The exact-RTRL shadow (`make_online_trainer`'s `shadow_every`): an
exact-RTRL tangent stepped beside the learner's on the same trajectory and
weights, and the cosine of the two cell gradients, without changing
training."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from rtrl import estimators
from rtrl.cells import Cell
from rtrl.estimators import Estimator
from rtrl.online.batching import broadcast_state
from rtrl.online.batching import reset_cell_states
from rtrl.online.estimate import estimate_step
from rtrl.online.estimate import step_resetting
from rtrl.online.estimate import summed_gradient
from rtrl.online.from_estimate import trainer_from_estimate
from rtrl.online.records import ShadowTangents
from rtrl.online.records import StepBatch
from rtrl.online.records import Trainer
from rtrl.online.step_loss import loss_gradients


def gradient_cosine(
  estimate: Any, exact: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`(cosine, ||estimate||, ||exact||)` of two gradient trees, each
  flattened to one vector; the cosine is NaN where either norm is zero."""
  flat = lambda tree: jnp.concatenate(
    [jnp.ravel(leaf) for leaf in jax.tree_util.tree_leaves(tree)]
  )
  a, b = flat(estimate), flat(exact)
  norm_a, norm_b = jnp.linalg.norm(a), jnp.linalg.norm(b)
  denom = norm_a * norm_b
  cosine = jnp.where(
    denom > 0, jnp.dot(a, b) / jnp.where(denom > 0, denom, 1.0), jnp.nan
  )
  return jnp.clip(cosine, -1.0, 1.0), norm_a, norm_b


def batch_mean_metrics(estimator: Estimator, tstate: Any) -> dict:
  """The estimator's per-example `metrics(tstate)` averaged over the batch
  (the leading axis of `tstate`); `{}` for an estimator without them."""
  metrics = getattr(estimator, "metrics", None)
  if metrics is None:
    return {}
  return jax.tree_util.tree_map(
    lambda a: jnp.mean(a, axis=0), jax.vmap(metrics)(tstate)
  )


def shadow_estimate_step(
  cell: Cell,
  estimator: Estimator,
  exact: Estimator,
  params: dict,
  tstates: ShadowTangents,
  cell_state: Any,
  batch: StepBatch,
  report: jax.Array,
  *,
  readout=None,
  loss=None,
):
  """`estimate_step` with an exact-RTRL shadow on the same trajectory.

  The learner's part is `estimate_step`'s, unchanged; the `exact` tangent
  steps on the same (reset) states, inputs and parameters. Where `report`
  (a bool scalar), the two batch-summed cell gradients of this step's loss
  are compared (`gradient_cosine`) and the estimator's `metrics` read.

  Returns:
    `(tstates, cell_state, loss, grads, report)` with the first four as in
    `estimate_step` (grads: the learner's) and `report` the last five
    fields of `ShadowStepMetrics`, NaN where not `report`.
  """
  learner, learner_cell_state, mean_loss, grads = estimate_step(
    cell,
    estimator,
    params,
    tstates.learner,
    cell_state,
    batch,
    readout=readout,
    loss=loss,
  )
  # The shadow reads only values the step keeps anyway, through a barrier:
  # XLA cannot merge or fuse its ops with the learner's, so training
  # stays bitwise that without a shadow (the learner's gradient is read
  # again rather than shared with the update).
  shadow_in = jax.lax.optimization_barrier(
    (params, tstates.exact, cell_state, learner, learner_cell_state)
  )
  params, shadow, cell_state, learner_copy, new_cell_state = shadow_in
  cell_state = reset_cell_states(cell, cell_state, batch.resets)
  shadow, _ = step_resetting(
    exact, params["cell"], shadow, cell_state, batch.inputs, batch.resets
  )
  _, _, dloss_dstate = loss_gradients(
    cell, params["readout"], new_cell_state, batch, readout=readout, loss=loss
  )

  def compare():
    cell_grads = summed_gradient(
      estimator, params["cell"], learner_copy, dloss_dstate
    )
    exact_grads = summed_gradient(exact, params["cell"], shadow, dloss_dstate)
    cosine, estimate_norm, exact_norm = gradient_cosine(cell_grads, exact_grads)
    return (
      cosine,
      estimate_norm,
      exact_norm,
      batch_mean_metrics(estimator, learner_copy),
    )

  def skip():
    return jax.tree_util.tree_map(
      lambda s: jnp.full(s.shape, jnp.nan, s.dtype), jax.eval_shape(compare)
    )

  compared = jax.lax.cond(report, compare, skip)
  return (
    ShadowTangents(learner, shadow),
    learner_cell_state,
    mean_loss,
    grads,
    (report, *compared),
  )


def make_shadow_trainer(
  cell: Cell,
  estimator: Estimator,
  optimizer: optax.GradientTransformation,
  accumulate_steps: int,
  shadow_every: int,
  *,
  readout,
  loss,
) -> Trainer:
  """`make_online_trainer` with `shadow_every` on (a positive int)."""
  exact = estimators.make("rtrl", cell)

  def initial_states(params, key, batch_size):
    keys = jax.random.split(key, batch_size)
    state0 = cell.initial_state()
    init = lambda e: jax.vmap(e.init, in_axes=(None, None, 0))(
      params["cell"], state0, keys
    )
    tstates = ShadowTangents(learner=init(estimator), exact=init(exact))
    return tstates, broadcast_state(state0, batch_size)

  def estimate(params, tstates, cell_state, batch, step):
    report = (step + 1) % shadow_every == 0
    return shadow_estimate_step(
      cell,
      estimator,
      exact,
      params,
      tstates,
      cell_state,
      batch,
      report,
      readout=readout,
      loss=loss,
    )

  return trainer_from_estimate(
    initial_states, estimate, optimizer, accumulate_steps, reports=True
  )
