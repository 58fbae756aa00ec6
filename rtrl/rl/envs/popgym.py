"""POPGym's RepeatPrevious and StatelessCartPole as pure-JAX `Environment`s.

Morad, Kortvelesy, Bettini, Liwicki & Prorok, "POPGym: Benchmarking
Partially Observable Reinforcement Learning", ICLR 2023, define the tasks:
RepeatPrevious (output the suit of the card dealt `k` steps earlier) and
StatelessCartPole (CartPole with the cart and pole velocities hidden, so
that the agent must difference positions over time), each in Easy, Medium
and Hard, with rewards normalised so that an episode's return is at most 1
(and at least -1). The step-level details, which the paper leaves to its
code (deck sizes and `k` per difficulty, episode lengths, the reward of
each step, the step on which an episode ends), are those of POPGym's code
at the paper's release (github.com/proroklab/popgym v0.0.2, MIT licence;
`StatelessCartPole` was later renamed `PositionOnlyCartPole` there),
written anew here in JAX. Each docstring says which detail came from that
code and where popjym (github.com/EdanToledo/popjym, the JAX port that
RTRRL's experiments used) differs.

Names for `rtrl.rl.envs.make`: 'RepeatPreviousEasy' / 'Medium' / 'Hard'
and 'StatelessCartPoleEasy' / 'Medium' / 'Hard' (POPGym's presets), and
'RepeatPrevious' (`num_decks`, `k`) and 'StatelessCartPole'
(`max_episode_length`) with free parameters. Like gymnax's, the
environments reset themselves: when `done`, `step` returns the next
episode's first observation and state.
"""

from __future__ import annotations

from collections.abc import Callable
import inspect
import math
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl.rl.envs.base import DiscreteActions
from rtrl.rl.envs.base import Environment

CARDS_PER_DECK = 52
NUM_SUITS = 4

# gym's CartPole-v1 (Barto, Sutton & Anderson 1983), which POPGym subclasses.
GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
HALF_POLE_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_POLE_LENGTH
FORCE = 10.0
TAU = 0.02
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
INITIAL_RANGE = 0.05


def with_auto_reset(
  reset: Callable[[jax.Array], tuple[jax.Array, Any]],
  transition: Callable[[Any, jax.Array], tuple[jax.Array, Any, Any, Any]],
) -> Callable[..., tuple[jax.Array, Any, jax.Array, jax.Array]]:
  """`Environment.step` from a deterministic `transition(state, action) ->
  (obs, state, reward, done)`: when `done`, the obs and state returned are
  `reset`'s (with the second half of `key`, as gymnax splits it).

  The reset runs under `lax.cond`, only when `done` in a single
  environment (a deck shuffled every step made RepeatPreviousHard 8x
  slower at batch 1); under `vmap` it becomes a select, as in gymnax.
  """

  def step(key, state, action):
    _, key_reset = jax.random.split(key)
    obs, state, reward, done = transition(state, action)
    done = jnp.asarray(done, jnp.bool_)
    obs, state = jax.lax.cond(
      done, lambda: reset(key_reset), lambda: (obs, state)
    )
    return obs, state, jnp.asarray(reward, jnp.float32), done

  return step


def _integer(argument: str, value: Any, low: int, high: float) -> int:
  """`value` as an int in `[low, high)`, else a ValueError naming it."""
  ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
  if not ok or not low <= value < high:
    bound = f"in [{low}, {high})" if high < math.inf else f">= {low}"
    raise ValueError(f"{argument} must be an integer {bound}, got {value!r}")
  return int(value)


class RepeatPreviousState(NamedTuple):
  """A RepeatPrevious episode's hidden state.

  Attributes:
    suits: `(num_cards,)` int32, the shuffled deck's suits in dealing order.
    time: `()` int32, the steps taken; card `time` is the one on show.
  """

  suits: jax.Array
  time: jax.Array


def repeat_previous(
  num_decks: int = 1, k: int = 4, name: str = "RepeatPrevious"
) -> Environment:
  """POPGym's RepeatPrevious: say the suit of the card dealt `k` steps ago.

  `num_decks` shuffled 52-card decks (`N = 52 num_decks` cards, 13
  `num_decks` of each suit) are dealt one card per step; the agent sees
  only the suit of the card just dealt, one-hot `(4,)` float32, and acts
  with one of 4 suits (`DiscreteActions(4)`; an action outside `0..3` is
  a wrong answer).

  With `o_0` the observation of `reset` and `o_t` that of step `t`, the
  action of step `t` (taken on seeing `o_{t-1}`) is scored from `t = k` on:
  `+1 / (N - k)` if it is the suit of `o_{t-k}`, else `-1 / (N - k)`
  (steps `1..k-1`: reward 0). So the agent repeats the card shown `k - 1`
  steps before the one on show (Easy's `k = 4`: three cards back), the
  optimal return is exactly 1 and the worst -1 (the paper's normalised
  rewards). The episode ends (`done`) at step `N - 1`, when one card is
  left in the deck. These step-level details are POPGym's code
  (`repeat_previous.py`; its tests pin both the lag and the `N - 1`
  steps); the popjym port used by RTRRL (Lemmel & Grosu 2025) asks for
  `o_{t-k-1}` instead and runs `N` steps, with the same `+-1 / (N - k)`.
  POPGym's observation is the suit index; its baselines one-hot it, as
  here.

  Args:
    num_decks: decks in the shoe (Easy 1, Medium 2, Hard 3).
    k: how far back, `1 <= k < 52 num_decks` (Easy 4, Medium 32, Hard 64);
      `k = 1` is the card on show (no memory needed).
    name: for logs.

  Returns:
    The `Environment`; its state is a `RepeatPreviousState`.

  Raises:
    ValueError: `num_decks < 1`, or `k` outside `[1, 52 num_decks)`.
  """
  num_cards = CARDS_PER_DECK * _integer("num_decks", num_decks, 1, math.inf)
  k = _integer("k", k, 1, num_cards)  # at least one card is scored
  scale = 1.0 / (num_cards - k)

  def observe(suits, time):
    return jax.nn.one_hot(suits[time], NUM_SUITS, dtype=jnp.float32)

  def reset(key):
    deck = jnp.arange(num_cards, dtype=jnp.int32) % NUM_SUITS
    suits = jax.random.permutation(key, deck)
    time = jnp.zeros((), jnp.int32)
    return observe(suits, time), RepeatPreviousState(suits, time)

  def transition(state, action):
    time = state.time + 1
    target = state.suits[jnp.maximum(time - k, 0)]
    score = jnp.where(action == target, scale, -scale)
    reward = jnp.where(time >= k, score, 0.0)
    done = time == num_cards - 1
    return observe(state.suits, time), state._replace(time=time), reward, done

  return Environment(
    reset=reset,
    step=with_auto_reset(reset, transition),
    observation_size=NUM_SUITS,
    actions=DiscreteActions(NUM_SUITS),
    name=name,
    max_episode_steps=num_cards - 1,
  )


class CartPoleState(NamedTuple):
  """A CartPole episode's hidden state.

  Attributes:
    physics: `(4,)` float32 `[x, x_dot, theta, theta_dot]` (cart position
      and velocity, pole angle from upright and angular velocity).
    time: `()` int32, the steps taken.
  """

  physics: jax.Array
  time: jax.Array


def cartpole_dynamics(physics: jax.Array, action: jax.Array) -> jax.Array:
  """One 0.02 s forward-Euler step of gym's CartPole-v1 (Barto, Sutton &
  Anderson 1983): `physics` `(4,)` `[x, x_dot, theta, theta_dot]`, `action`
  1 pushes the cart right with 10 N, anything else left."""
  x, x_dot, theta, theta_dot = physics
  force = jnp.where(action == 1, FORCE, -FORCE)
  cos, sin = jnp.cos(theta), jnp.sin(theta)
  temp = (force + POLE_MASS_LENGTH * theta_dot**2 * sin) / TOTAL_MASS
  theta_acc = (GRAVITY * sin - cos * temp) / (
    HALF_POLE_LENGTH * (4.0 / 3.0 - MASS_POLE * cos**2 / TOTAL_MASS)
  )
  x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos / TOTAL_MASS
  return jnp.stack(
    [
      x + TAU * x_dot,
      x_dot + TAU * x_acc,
      theta + TAU * theta_dot,
      theta_dot + TAU * theta_acc,
    ]
  ).astype(jnp.float32)


def stateless_cartpole(
  max_episode_length: int = 200, name: str = "StatelessCartPole"
) -> Environment:
  """POPGym's StatelessCartPole: CartPole-v1 seen without its velocities.

  gym's CartPole-v1 physics (`cartpole_dynamics`; start uniform in
  `[-0.05, 0.05]^4`; actions 0 push left, 1 push right), observed as
  `[x, theta]` `(2,)` float32: the cart and pole velocities are hidden, so
  the agent must difference positions over time (the paper). The episode
  ends (`done`) when the pole passes 12 degrees or the cart 2.4 (gym's
  termination, `done` on the step that crosses), or after
  `max_episode_length` steps (Easy 200, Medium 400, Hard 600: POPGym's
  code; no other time limit applies, so Hard runs past CartPole-v1's 500).

  Every step, the one that ends the episode included, earns
  `1 / max_episode_length`: an episode's return is its length over
  `max_episode_length`, 1 at best (the paper's normalised rewards). POPGym's
  code maps gym's reward 1 to `1 / max_episode_length` and gym's 0 to -1;
  gym gives 0 only for steps taken after termination, which an
  auto-resetting environment never takes, so no -1 is ever paid (popjym's
  port, used by RTRRL, pays the same).

  Args:
    max_episode_length: the time limit, in steps.
    name: for logs.

  Returns:
    The `Environment`; its state is a `CartPoleState` (the hidden
    velocities are `state.physics[1]` and `[3]`).

  Raises:
    ValueError: `max_episode_length < 1`.
  """
  length = _integer("max_episode_length", max_episode_length, 1, math.inf)
  reward = 1.0 / length

  def reset(key):
    physics = jax.random.uniform(
      key, (4,), jnp.float32, -INITIAL_RANGE, INITIAL_RANGE
    )
    return physics[jnp.array([0, 2])], CartPoleState(
      physics, jnp.zeros((), jnp.int32)
    )

  def transition(state, action):
    physics = cartpole_dynamics(state.physics, action)
    time = state.time + 1
    fallen = (jnp.abs(physics[0]) > X_LIMIT) | (
      jnp.abs(physics[2]) > THETA_LIMIT
    )
    done = fallen | (time >= length)
    obs = physics[jnp.array([0, 2])]
    return obs, CartPoleState(physics, time), reward, done

  return Environment(
    reset=reset,
    step=with_auto_reset(reset, transition),
    observation_size=2,
    actions=DiscreteActions(2),
    name=name,
    max_episode_steps=length,
  )


# name -> (factory, POPGym's preset parameters).
POPGYM: dict[str, tuple[Callable[..., Environment], dict[str, int]]] = {
  "RepeatPrevious": (repeat_previous, {}),
  "RepeatPreviousEasy": (repeat_previous, {"num_decks": 1, "k": 4}),
  "RepeatPreviousMedium": (repeat_previous, {"num_decks": 2, "k": 32}),
  "RepeatPreviousHard": (repeat_previous, {"num_decks": 3, "k": 64}),
  "StatelessCartPole": (stateless_cartpole, {}),
  "StatelessCartPoleEasy": (stateless_cartpole, {"max_episode_length": 200}),
  "StatelessCartPoleMedium": (
    stateless_cartpole,
    {"max_episode_length": 400},
  ),
  "StatelessCartPoleHard": (stateless_cartpole, {"max_episode_length": 600}),
}


def popgym_env(name: str, **env_params: Any) -> Environment:
  """One of `POPGYM` by name, its preset parameters overridden by
  `env_params` (e.g. `popgym_env('RepeatPrevious', k=8)`).

  Raises:
    ValueError: an unknown name or parameter, naming what is known.
  """
  if name not in POPGYM:
    raise ValueError(
      f"name must be a POPGym environment name, got {name!r}; known: "
      f"{sorted(POPGYM)}"
    )
  factory, preset = POPGYM[name]
  known = [p for p in inspect.signature(factory).parameters if p != "name"]
  for param in env_params:
    if param not in known:
      raise ValueError(
        f"{param!r} is not a parameter of {name}; its parameters are {known}"
      )
  return factory(**{**preset, **env_params}, name=name)


__all__ = [
  "CartPoleState",
  "POPGYM",
  "RepeatPreviousState",
  "cartpole_dynamics",
  "popgym_env",
  "repeat_previous",
  "stateless_cartpole",
  "with_auto_reset",
]
