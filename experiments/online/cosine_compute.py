"""The gradient-cosine tool's computation: every estimator and exact RTRL on
the same trajectory, with frozen parameters, and the cosine between each
estimate of `dL_t/dW` and the exact one at every step and repetition."""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np

from experiments.online import cosine_specs
from experiments.online import cosine_tasks
from rtrl import cells
from rtrl import estimators
from rtrl import losses
from rtrl import online
from rtrl import readout

EXACT = cosine_specs.EstimatorSpec("rtrl", None, "_exact")


def flatten_per_repetition(grads) -> jax.Array:
  """`(R, dim)`: each repetition's cell gradient as one vector."""
  leaves = jax.tree_util.tree_leaves(grads)
  return jnp.concatenate([g.reshape(g.shape[0], -1) for g in leaves], axis=1)


def cosine(flat: jax.Array, true: jax.Array) -> jax.Array:
  """`(R,)` cosines of the rows of `flat` and `true` `(R, dim)`, in [-1, 1].

  A zero estimate (or zero true gradient) has cosine 0, not NaN; zero true
  gradients are dropped by the caller anyway.
  """
  denom = jnp.linalg.norm(flat, axis=1) * jnp.linalg.norm(true, axis=1)
  value = jnp.where(
    denom > 0,
    jnp.sum(flat * true, axis=1) / jnp.where(denom > 0, denom, 1.0),
    0.0,
  )
  return jnp.clip(value, -1.0, 1.0)


def make_runner(cell, estimator, params_axis):
  """`(init, run)` for one estimator, vmapped over repetitions.

  `run(params, carry, chunk, true_grads)` is jitted and scans over the chunk;
  it returns the carry and the `(T, R)` cosines to `true_grads` `(T, R, dim)`;
  with `true_grads=None`, the `(T, R, dim)` flattened gradients instead.
  """
  state0 = cell.initial_state()

  def init(params, keys):
    return jax.vmap(
      lambda p, k: (estimator.init(p["cell"], state0, k), state0),
      in_axes=(params_axis, 0),
    )(params, keys)

  def example_step(params, carry, batch):
    tstate, state = online.where_reset(
      batch.resets, (estimator.reset(carry[0]), state0), carry
    )
    tstate, state = estimator.step(params["cell"])(tstate, state, batch.inputs)
    dloss_dstate = jax.grad(
      lambda s: (
        batch.weights
        * losses.softmax_cross_entropy(
          readout.linear().apply(params["readout"], cell.output(s)),
          batch.targets,
        )
      )
    )(state)
    return (tstate, state), estimator.gradient(
      params["cell"], tstate, dloss_dstate
    )

  @jax.jit
  def run(params, carry, chunk, true_grads=None):
    def body(carry, xs):
      batch, true = xs
      carry, grads = jax.vmap(example_step, in_axes=(params_axis, 0, 0))(
        params, carry, batch
      )
      flat = flatten_per_repetition(grads)
      return carry, flat if true is None else cosine(flat, true)

    return jax.lax.scan(body, carry, (chunk, true_grads))

  return init, run


def make_runners(config, params, specs) -> tuple[dict, dict]:
  """`(runners, carries)` by label, exact RTRL's under `EXACT.label`."""
  cell = cells.make(config.cell, config.hidden_size)
  params_axis = 0 if config.params_per_repetition else None
  base_key = jax.random.fold_in(jax.random.PRNGKey(config.seed), 2)
  runners, carries = {}, {}
  for spec in [EXACT] + specs:
    estimator = estimators.make(spec.name, cell, **spec.hparams())
    init, run = make_runner(cell, estimator, params_axis)
    # Keys depend on the label only, so adding an estimator to the list
    # leaves the others' streams unchanged.
    key = jax.random.fold_in(base_key, zlib.crc32(spec.label.encode()))
    carries[spec.label] = init(
      params, jax.random.split(key, config.repetitions)
    )
    runners[spec.label] = run
  return runners, carries


def check_finite(
  label: str, cos: np.ndarray, dropped: np.ndarray, first_step: int
) -> None:
  """NaN marks dropped points only; a non-finite cosine elsewhere is a
  broken estimator (or true gradient) and must not pass as "dropped"."""
  broken = ~np.isfinite(cos) & ~dropped
  if broken.any():
    t, rep = np.argwhere(broken)[0]
    raise FloatingPointError(
      f"{label}: non-finite gradient at step {first_step + t}, repetition {rep}"
    )


def compute_cosines(config, params, on_chunk=None) -> dict:
  """Runs exact RTRL and every estimator with frozen `params`.

  Args:
    config: an effective config (see `cosine_experiment.resolve`).
    params: `{'cell', 'readout'}`, with a leading repetition axis iff
      `config.params_per_repetition`.
    on_chunk: optional `callback(step, cosines, true_norms)` after each chunk,
      given that chunk's arrays (for streaming metrics and progress).

  Returns:
    `{'labels': [...], 'cosine': {label: (num_steps, R)}, 'true_norm':
    (num_steps, R)}`; cosines are NaN where the true norm is below
    `config.min_gradient_norm`.
  """
  specs = cosine_specs.parse_estimators(config.estimators)
  chunk_steps = min(config.chunk_steps, config.num_steps)
  runners, carries = make_runners(config, params, specs)
  data_state, next_chunk = cosine_tasks.make_data(config)
  cosines = {s.label: [] for s in specs}
  norms = []
  for start in range(0, config.num_steps, chunk_steps):
    data_state, chunk = next_chunk(data_state)
    carries[EXACT.label], true = runners[EXACT.label](
      params, carries[EXACT.label], chunk
    )
    true_norm = np.asarray(jnp.linalg.norm(true, axis=2))
    dropped = true_norm < config.min_gradient_norm
    norms.append(true_norm)
    for spec in specs:
      carries[spec.label], cos = runners[spec.label](
        params, carries[spec.label], chunk, true
      )
      cos = np.asarray(cos, np.float64)
      check_finite(spec.label, cos, dropped, start + 1)
      cosines[spec.label].append(np.where(dropped, np.nan, cos))
    if on_chunk is not None:
      on_chunk(
        start + chunk_steps,
        {label: parts[-1] for label, parts in cosines.items()},
        true_norm,
      )
  return {
    "labels": [s.label for s in specs],
    "cosine": {k: np.concatenate(v) for k, v in cosines.items()},
    "true_norm": np.concatenate(norms),
  }
