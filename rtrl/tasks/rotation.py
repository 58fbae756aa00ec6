"""Rotation memory and rotation recall (sonaradarcn/sketched-rtrl's
`RotationMemoryTask` / `RotationRecallTask`): regression.

"Rotation" here is sketched-rtrl's definition, the only online-RTRL task of
that name found among the peers: a fixed random rotation R of R^d (an
orthogonal matrix with determinant +1) must be applied repeatedly to a
vector shown once. At an episode's first step the input is a random unit
vector v0 with a go bit, `(d + 1,)`; at every later step the input is zero.
At step t (0 .. T - 1) the target is `R^(t+1) v0`, `(d,)`. The loss
(`rtrl.losses.squared_error`) is taken at every step ("rotation",
`recall=0`, meaning all T steps) or only at the last `recall` steps
("rotation recall": a long silent stretch before the targets, so credit
must travel T - recall steps). A diagonal recurrence cannot rotate, so the
task needs cross-unit dynamics: where SnAp-1-like diagonal approximations
lose the most.

R is drawn once from `rotation_seed` (QR of a Gaussian matrix, the sign of
one column flipped if its determinant is -1): a task setting, the same for
every lane and every episode. sketched-rtrl draws it from the run's seed, so
to mirror its seeds, set `rotation_seed` to the run's seed.

Metric: the mean squared error per output entry on the weighted steps;
baseline: predicting 0 has MSE `E[v_i^2] = 1/d` (0.125 at d = 8), since
every target is a unit vector.

Peers' settings (see docs/results/task_suite.md): sketched-rtrl's
"rotation" is d = 8, T = 64, targets at every step; "rotrecall" d = 8,
T = 64, recall 8; "rotrecall24" d = 8, T = 24, recall 8; MSE (PyTorch's
mean over entries); all lanes reset together at each episode start; a tanh
RNN of 64 units, batch 8, Adam 1e-3, 20,000 online steps (its certificate
runs 25,000-30,000).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl import validation
from rtrl.online import StepBatch
from rtrl.tasks import episodes
from rtrl.tasks import task_metrics


def check_settings(dim: int, length: int, recall: int) -> None:
  """Raises a ValueError naming the first bad setting."""
  validation.positive_int("dim", dim)
  validation.positive_int("length", length)
  validation.nonnegative_int("recall", recall, zero_means="every step")
  if recall > length:
    raise ValueError(
      f"recall must be at most length ({length}), got {recall!r}"
    )


def rotation_matrix(rotation_seed: int, dim: int) -> jax.Array:
  """A `(dim, dim)` rotation (orthogonal, determinant +1) drawn from
  `rotation_seed`; targets are `R^(t+1) v0` (column vectors)."""
  dtype = jnp.promote_types(jnp.asarray(0.0).dtype, jnp.float32)
  gaussian = jax.random.normal(jax.random.PRNGKey(rotation_seed), (dim, dim))
  q, _ = jnp.linalg.qr(gaussian.astype(dtype))
  flip = jnp.where(jnp.linalg.det(q) < 0, -1.0, 1.0).astype(dtype)
  return q.at[:, 0].multiply(flip)


def sample(
  key: jax.Array,
  rotation: jax.Array,
  length: int = 64,
  recall: int = 0,
) -> tuple[episodes.Episode, jax.Array]:
  """One episode of T = `length` steps under the rotation `(d, d)`: inputs
  `(T, d + 1)`, targets `(T, d)`, weights `(T,)` on the last `recall`
  steps (0: all)."""
  dim = rotation.shape[0]
  check_settings(dim, length, recall)
  dtype = jnp.asarray(0.0).dtype
  v0 = jax.random.normal(key, (dim,), rotation.dtype)
  v0 = v0 / jnp.linalg.norm(v0)

  def rotate(v, _):
    v = rotation @ v
    return v, v

  _, targets = jax.lax.scan(rotate, v0, None, length=length)
  first = jnp.concatenate([v0, jnp.ones((1,), v0.dtype)])
  inputs = jnp.zeros((length, dim + 1), dtype).at[0].set(first.astype(dtype))
  recall = recall or length
  weights = (jnp.arange(length) >= length - recall).astype(dtype)
  episode = episodes.Episode(inputs, targets.astype(dtype), weights)
  return episode, jnp.asarray(length, jnp.int32)


def _sampler(dim, length, recall, rotation_seed):
  check_settings(dim, length, recall)
  validation.nonnegative_int("rotation_seed", rotation_seed)
  return lambda key: sample(
    key, rotation_matrix(rotation_seed, dim), length, recall
  )


def stream_init(
  key: jax.Array,
  batch_size: int,
  dim: int = 8,
  length: int = 64,
  recall: int = 0,
  rotation_seed: int = 0,
) -> episodes.EpisodeStream:
  """`batch_size` lanes whose first step starts an episode."""
  sampler = _sampler(dim, length, recall, rotation_seed)
  return episodes.init(key, batch_size, sampler)


def chunk(
  stream: episodes.EpisodeStream,
  num_steps: int,
  dim: int = 8,
  length: int = 64,
  recall: int = 0,
  rotation_seed: int = 0,
) -> tuple[episodes.EpisodeStream, StepBatch]:
  """`num_steps` time-major steps of the lanes: inputs `(num_steps, B,
  d + 1)`, targets `(num_steps, B, d)`."""
  sampler = _sampler(dim, length, recall, rotation_seed)
  return episodes.chunk(stream, num_steps, sampler)


def metric(dim: int = 8) -> task_metrics.Metric:
  """MSE per entry on the weighted steps, beside `1 / dim` (predicting 0)."""
  return task_metrics.mse(1.0 / dim, "predict 0")


__all__ = [
  "check_settings",
  "chunk",
  "metric",
  "rotation_matrix",
  "sample",
  "stream_init",
]
