"""User cells for the `CustomCell` tests, none of them Lemma-1 but the
wrapped built-ins: the original GRU of Cho et al. (reset gate before the
recurrent product), a peephole LSTM with a tuple state `(c, h)`, and a
diagonal recurrence `h' = tanh(x W + u ⊙ h + b)`; all with `N` units.

`tests/` is on `sys.path`: import this module as `rtrl_custom_cells`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rtrl.cells import CustomCell
from rtrl.cells import as_custom

N = 3


def _normal(key, shape, scale):
  return scale * jax.random.normal(key, shape, jnp.asarray(0.0).dtype)


def gates_init(key, input_size, num_gates, extra=()):
  """`{'W': (I, K n), 'U': (n, K n), 'b': (K n,)}` plus `extra` leaves
  `(name, shape)`; random biases so that bias bugs show."""
  keys = jax.random.split(key, 3 + len(extra))
  params = {
    "W": _normal(keys[0], (input_size, num_gates * N), input_size**-0.5),
    "U": _normal(keys[1], (N, num_gates * N), N**-0.5),
    "b": _normal(keys[2], (num_gates * N,), 0.5),
  }
  for k, (name, shape) in zip(keys[3:], extra):
    params[name] = _normal(k, shape, 0.5)
  return params


def cho_gru_step(params, h, x):
  """Cho et al. 2014: the reset gate acts on `h` before the product."""
  zx = x @ params["W"] + params["b"]
  u = params["U"]
  reset = jax.nn.sigmoid(zx[:N] + h @ u[:, :N])
  update = jax.nn.sigmoid(zx[N : 2 * N] + h @ u[:, N : 2 * N])
  candidate = jnp.tanh(zx[2 * N :] + (reset * h) @ u[:, 2 * N :])
  return (1.0 - update) * h + update * candidate


def cho_gru():
  return CustomCell(
    step=cho_gru_step,
    init=lambda key, i: gates_init(key, i, 3),
    initial_state=lambda: jnp.zeros(N),
    name="cho_gru",
  )


def peephole_lstm_step(params, state, x):
  """State `(c, h)`; the forget gate also reads `c` (a peephole)."""
  c, h = state
  z = x @ params["W"] + h @ params["U"] + params["b"]
  forget = jax.nn.sigmoid(z[:N] + params["peep"] * c)
  c = forget * c + (1.0 - forget) * jnp.tanh(z[N : 2 * N])
  return c, jax.nn.sigmoid(z[2 * N :]) * jnp.tanh(c)


def peephole_lstm():
  return CustomCell(
    step=peephole_lstm_step,
    init=lambda key, i: gates_init(key, i, 3, extra=[("peep", (N,))]),
    initial_state=lambda: (jnp.zeros(N), jnp.zeros(N)),
    output=lambda state: state[1],
    name="peephole_lstm",
  )


def diagonal_step(params, h, x):
  """Each unit reads only itself through the recurrent weights `u`."""
  return jnp.tanh(x @ params["W"] + params["u"] * h + params["b"])


def diagonal_rnn():
  def init(key, input_size):
    kw, ku, kb = jax.random.split(key, 3)
    return {
      "W": _normal(kw, (input_size, N), 1.0),
      "u": _normal(ku, (N,), 0.8),
      "b": _normal(kb, (N,), 0.5),
    }

  return CustomCell(diagonal_step, init, lambda: jnp.zeros(N), name="diag")


def wrapped(cell):
  """A built-in Lemma-1 cell seen only through its step function."""
  return as_custom(cell)


def cho_gru_pattern(params):
  """`M (d, p)` of the Cho GRU by hand: a reset-gate parameter (gate column
  j < n) reaches every unit (through `(r ⊙ h) U_c`); an update or candidate
  parameter of column j reaches unit j mod n only."""
  columns = [
    np.broadcast_to(np.arange(3 * N), a.shape).reshape(-1)
    for a in jax.tree_util.tree_leaves(params)
  ]
  column = np.concatenate(columns)  # ravel_pytree's order: the leaves'
  unit = np.arange(N)[:, None]
  return (column[None, :] < N) | (column[None, :] % N == unit)
