"""Action distributions of the actor head, pure functions of its output.

`categorical(num_actions)` for discrete actions (the head's output is the
logits); `gaussian(size)` for continuous ones (the output is `[mean,
pre_log_std]`, the standard deviation squashed into a range so that the
entropy bonus cannot blow it up).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl.rl.envs.base import BoxActions
from rtrl.rl.envs.base import DiscreteActions


class Policy(NamedTuple):
  """A distribution over actions given the actor head's output.

  Attributes:
    num_outputs: the actor head's output size.
    action_input_size: the length of `encode(action)`.
    sample: `(key, out) -> action`.
    log_prob: `(out, action) -> ()`.
    entropy: `out -> ()`.
    mode: `out -> action`, the most likely action.
    encode: `action -> (action_input_size,)`, how the core sees an action.
    zero_action: `() -> action`, the "no previous action" of an episode's
      first step (encoded as zeros).
  """

  num_outputs: int
  action_input_size: int
  sample: Callable[[jax.Array, jax.Array], jax.Array]
  log_prob: Callable[[jax.Array, jax.Array], jax.Array]
  entropy: Callable[[jax.Array], jax.Array]
  mode: Callable[[jax.Array], jax.Array]
  encode: Callable[[jax.Array], jax.Array]
  zero_action: Callable[[], jax.Array]


def categorical(num_actions: int) -> Policy:
  """Softmax over `num_actions` logits; actions are int32 scalars, encoded
  one-hot (an episode's first step: all zeros, `zero_action` = -1)."""

  def log_prob(logits, action):
    return jax.nn.log_softmax(logits)[action]

  def entropy(logits):
    log_p = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_p) * log_p)

  return Policy(
    num_outputs=num_actions,
    action_input_size=num_actions,
    sample=lambda key, logits: jax.random.categorical(key, logits).astype(
      jnp.int32
    ),
    log_prob=log_prob,
    entropy=entropy,
    mode=lambda logits: jnp.argmax(logits).astype(jnp.int32),
    # one_hot of -1 is all zeros: "no previous action".
    encode=lambda action: jax.nn.one_hot(action, num_actions),
    zero_action=lambda: jnp.asarray(-1, jnp.int32),
  )


def gaussian(
  size: int, low: float = -1.0, high: float = 1.0, log_std_range=(-5.0, 1.0)
) -> Policy:
  """A diagonal Gaussian: the head outputs `[mean (size,), s (size,)]`,
  `log_std = lo + (hi - lo) sigmoid(s)` within `log_std_range`. Samples are
  clipped into `[low, high]` (the environment's box), and `log_prob` is
  the Gaussian density at the action it is given."""
  lo, hi = (float(v) for v in log_std_range)

  def split(out):
    mean, pre = out[:size], out[size:]
    return mean, lo + (hi - lo) * jax.nn.sigmoid(pre)

  def log_prob(out, action):
    mean, log_std = split(out)
    z = (action - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi))

  def entropy(out):
    _, log_std = split(out)
    return jnp.sum(log_std + 0.5 * (1.0 + jnp.log(2 * jnp.pi)))

  def sample(key, out):
    mean, log_std = split(out)
    noise = jax.random.normal(key, mean.shape, mean.dtype)
    return jnp.clip(mean + jnp.exp(log_std) * noise, low, high)

  return Policy(
    num_outputs=2 * size,
    action_input_size=size,
    sample=sample,
    log_prob=log_prob,
    entropy=entropy,
    mode=lambda out: jnp.clip(out[:size], low, high),
    encode=lambda action: jnp.reshape(action, (size,)),
    zero_action=lambda: jnp.zeros((size,), jnp.asarray(0.0).dtype),
  )


def for_actions(actions: Any) -> Policy:
  """The policy of an action space: `categorical` for `DiscreteActions`,
  `gaussian` for `BoxActions`."""
  if isinstance(actions, DiscreteActions):
    return categorical(actions.num_actions)
  if isinstance(actions, BoxActions):
    return gaussian(actions.size, actions.low, actions.high)
  raise ValueError(
    f"actions must be DiscreteActions or BoxActions, got {actions!r}"
  )


__all__ = ["Policy", "categorical", "for_actions", "gaussian"]
