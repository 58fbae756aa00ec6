"""braintrace's side of `scripts/bench_peers.py`: our models built from
braintrace 0.2.8's layers, its online learners, and its gradients in our
parameter layout. Imported only under the peer's own venv
(`scripts/peers/setup_braintrace.sh`); braintrace is never a dependency of
this project.

What is compared (`ALGORITHMS`): exact RTRL against `SnAp(n=2)` (saturated
SnAp-n: full within-group RTRL on one dense group), SnAp-1 against
`OSTLRecurrent`, per-example UORO against `UORO` under vmap, RFLO's trace
against `D_RTRL` (which computes it). Cells: the tanh RNN is braintrace's
`ValinaRNNCell`; its `GRUCell` is a different model (reset before the
recurrent product), so our GRU is built from its ETP `Linear` layers
(`MatchedGRU`). The readout is applied outside the learner and its
gradient taken in the same `brainstate.transform.grad` call. In batched
mode SnAp-n sees the batch axis as positions (B times the work) and UORO
keeps one rank-1 pair for the batch (another estimator), so exact and UORO
run under vmap only; SnAp-1 and RFLO both ways, the faster reported.
"""

from __future__ import annotations

import time

import brainstate
import braintools
import braintrace
import jax
import jax.numpy as jnp
import numpy as np
import optax

from scripts.benchlib.peers_common import Side
from scripts.benchlib.peers_common import timed

# algorithm -> (our estimator, braintrace class, its options, the batchings
# of theirs that compute our estimator, a note for the report).
ALGORITHMS = {
  "exact": (
    "rtrl",
    braintrace.SnAp,
    {"n": 2},
    ("vmap",),
    "braintrace SnAp(n=2) (saturated: full RTRL)",
  ),
  "snap1": (
    "snap1",
    braintrace.OSTLRecurrent,
    {},
    ("vmap", "batched"),
    "braintrace OSTLRecurrent (SnAp-1)",
  ),
  # A raw uint32 key: with the default int seed 0.2.6 stores a typed key,
  # which `compile(vmap=True)` cannot map ("Cannot interpret 'key<fry>' as
  # a data type"); per-example factors need the vmap.
  "uoro": (
    "uoro",
    braintrace.UORO,
    {"vjp_method": "single-step", "projection_key": jax.random.PRNGKey(42)},
    ("vmap",),
    "braintrace UORO, per example",
  ),
  "rflo": (
    "rflo",
    braintrace.D_RTRL,
    {},
    ("vmap", "batched"),
    "braintrace D_RTRL (= RFLO's trace)",
  ),
}


class MatchedGRU(brainstate.nn.Module):
  """Our GRU (`rtrl.cells.GRU`) from braintrace's ETP `Linear` layers.

  `h' = (1 - σ(u)) tanh(a + σ(r) b) + σ(u) h` with `r, u` linear in `[x, h]`,
  `a` in `x`, `b` in `h` (reset after the recurrent product). braintrace's
  own `nn.GRUCell` resets before the product (a different model).
  """

  def __init__(self, input_size: int, hidden_size: int):
    super().__init__()
    self.hidden_size = hidden_size
    self.r = braintrace.nn.Linear(input_size + hidden_size, hidden_size)
    self.u = braintrace.nn.Linear(input_size + hidden_size, hidden_size)
    self.a = braintrace.nn.Linear(input_size, hidden_size)
    self.b = braintrace.nn.Linear(hidden_size, hidden_size)

  def _zeros(self, batch_size):
    return braintools.init.param(
      braintools.init.ZeroInit(), (self.hidden_size,), batch_size
    )

  def init_state(self, batch_size=None, **kwargs):
    del kwargs
    self.h = brainstate.HiddenState(self._zeros(batch_size))

  def reset_state(self, batch_size=None, **kwargs):
    del kwargs
    self.h.value = self._zeros(batch_size)

  def update(self, x):
    h = self.h.value
    xh = jnp.concatenate([x, h], axis=-1)
    reset = jax.nn.sigmoid(self.r(xh))
    update = jax.nn.sigmoid(self.u(xh))
    candidate = jnp.tanh(self.a(x) + reset * self.b(h))
    self.h.value = (1.0 - update) * candidate + update * h
    return self.h.value


def gru_blocks(input_size: int, n: int) -> dict:
  """Our fused GRU `W`'s blocks as `(rows, columns)` slices, per Linear:
  `r`, `u` read `[x, h]`, `a` reads `x`, `b` reads `h`; the bias is W's last
  row in every block."""
  xh, x, h = (
    slice(0, input_size + n),
    slice(0, input_size),
    slice(input_size, input_size + n),
  )
  return {
    "r": (xh, slice(0, n)),
    "u": (xh, slice(n, 2 * n)),
    "a": (x, slice(2 * n, 3 * n)),
    "b": (h, slice(3 * n, 4 * n)),
  }


def their_cell(cell_name: str, input_size: int, n: int, W):
  """braintrace's module holding our weights `W`, and its weight states
  `{name: ParamState of {'weight', 'bias'}}`."""
  if cell_name == "rnn":
    module = braintrace.nn.ValinaRNNCell(input_size, n, activation="tanh")
    module.W.weight.value = {"weight": W[:-1], "bias": W[-1]}
    return module, {"W": module.W.weight}
  if cell_name == "gru":
    module = MatchedGRU(input_size, n)
    weights = {}
    for name, (rows, columns) in gru_blocks(input_size, n).items():
      state = getattr(module, name).weight
      state.value = {"weight": W[rows, columns], "bias": W[-1, columns]}
      weights[name] = state
    return module, weights
  raise ValueError(f"no braintrace twin for cell {cell_name!r}")


def their_grads_as_ours(cell_name: str, grads: dict, W) -> jax.Array:
  """braintrace's cell gradient in our fused `W` layout."""
  if cell_name == "rnn":
    return jnp.concatenate([grads["W"]["weight"], grads["W"]["bias"][None]])
  n = W.shape[1] // 4
  out = jnp.zeros_like(W)
  for name, (rows, columns) in gru_blocks(W.shape[0] - n - 1, n).items():
    out = out.at[rows, columns].set(grads[name]["weight"])
    out = out.at[-1, columns].set(grads[name]["bias"])
  return out


def step_loss(hidden, readout_params, targets):
  """The batch-mean softmax cross-entropy of the linear readout (ours is
  `online.batch_loss` with the default readout and loss)."""
  logits = hidden @ readout_params["w"] + readout_params["b"]
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


class TheirLearner:
  """braintrace's compiled learner around our weights, with the readout
  outside it; `step_grads(x, y)` is one online step's gradient and loss."""

  def __init__(
    self, algorithm, cell_name, params, input_size, batch_size, batching
  ):
    W = params["cell"]["W"]
    n = W.shape[1] // (4 if cell_name == "gru" else 1)
    module, cell_weights = their_cell(cell_name, input_size, n, W)
    example = jnp.zeros((batch_size, input_size), W.dtype)
    _, algorithm_class, options = ALGORITHMS[algorithm][:3]
    self.learner = braintrace.compile(
      module,
      algorithm_class,
      example,
      batch_size=batch_size,
      vmap=(batching == "vmap"),
      **options,
    )
    self.readout = {
      k: brainstate.ParamState(v) for k, v in params["readout"].items()
    }
    self.weights = {"cell": cell_weights, "readout": self.readout}
    self.cell_name = cell_name

  def step_grads(self, x, y):
    def loss_fn():
      hidden = self.learner(x)
      return step_loss(hidden, {k: s.value for k, s in self.readout.items()}, y)

    result = brainstate.transform.grad(
      loss_fn, self.weights, return_value=True
    )()
    self._keep_raw_key()
    return result

  def _keep_raw_key(self):
    """UORO's key state back to raw uint32 data after a step: 0.2.6 stores
    the raw key it was given but writes back a typed key, which a scan
    carry refuses (and a typed key cannot be vmapped by `compile`)."""
    rng = getattr(self.module, "projection_rng", None)
    if rng is not None and jnp.issubdtype(rng.value.dtype, jax.dtypes.prng_key):
      rng.value = jax.random.key_data(rng.value)

  def values(self):
    return jax.tree.map(
      lambda s: s.value,
      self.weights,
      is_leaf=lambda s: isinstance(s, brainstate.State),
    )

  def assign(self, values):
    for group, states in self.weights.items():
      for name, state in states.items():
        state.value = values[group][name]

  @property
  def module(self):
    """The unbatched learner (under vmap, the wrapped one)."""
    return getattr(self.learner, "module", self.learner)


def their_trainer(learner: TheirLearner, optimizer):
  """`run(xs, ys) -> per-step losses`: one jitted program that scans the
  online step (gradient, Adam, update) over a chunk; the optimiser state is
  a brainstate state so that the program carries it."""
  opt_state = brainstate.ShortTermState(optimizer.init(learner.values()))

  def step(x, y):
    grads, loss = learner.step_grads(x, y)
    values = learner.values()
    updates, opt_state.value = optimizer.update(grads, opt_state.value, values)
    learner.assign(optax.apply_updates(values, updates))
    return loss

  return brainstate.transform.jit(
    lambda xs, ys: brainstate.transform.for_loop(step, xs, ys)
  )


# States of a compiled learner that are not its tangent state.
NOT_TANGENT = ("ParamState", "HiddenState", "LongTermState")


def tangent_floats(learner: TheirLearner) -> int:
  """Floats in the learner's trace states (all examples)."""
  return int(
    sum(
      np.size(leaf)
      for state in learner.learner.states().values()
      if type(state).__name__ not in NOT_TANGENT
      for leaf in jax.tree.leaves(state.value)
    )
  )


def their_side(algorithm, cell_name, batching, params, inputs, targets, opt):
  """braintrace's compiled learner and training program on our weights;
  brainstate's jit compiles again on the second call, so two untimed
  calls."""
  learner = TheirLearner(
    algorithm,
    cell_name,
    params,
    inputs.shape[-1],
    targets.shape[1],
    batching,
  )
  run = their_trainer(learner, opt)
  start = time.perf_counter()
  losses = np.asarray(jax.block_until_ready(run(inputs, targets)))
  jax.block_until_ready(run(inputs, targets))
  return Side(
    run=timed(lambda: run(inputs, targets)),
    losses=losses,
    state_floats=tangent_floats(learner),
    first_call_s=time.perf_counter() - start,
  )


def versions() -> dict:
  return {
    "braintrace": braintrace.__version__,
    "brainstate": brainstate.__version__,
  }
