"""snapjax's side of `scripts/bench_peers.py` (kevinlopezandrade/snapjax,
JAX/Equinox, no licence: run here from the fetched snapshot under the
peer's own venv, `scripts/peers/setup_snapjax.sh`, never copied).

Its model: `snapjax.cells.rnn.RNN`, `tanh(W_hh h + b + W_ih x)`, is our
tanh RNN (`W_hh`, `W_ih` and `b` are blocks of our `W`, transposed). The
readout is a small layer of ours on its `RTRLLayer` interface (`h @ w +
b`, so that both sides train the same parameters); the loss is our
softmax cross-entropy as its `loss_func(y, y_hat, mask)`. Its training
step is its own `RTRLApprox.step` (the cell's `jacrev` payload, the trace
update, the gradient), per example under `jax.vmap`, the batch-mean
gradient the mean over examples, and `optax.adam` on the model's arrays,
in one jitted `lax.scan` over the chunk.

Pairs: exact RTRL <- `RTRLApprox` with no mask (one layer: the full
influence); SnAp-1 <- the mask of `get_snap_n_mask(1)`, densified. Its
SnAp-n masks of order >= 2 on a dense network keep every entry (exact
RTRL's pattern, as ours). The sparse form of the masks runs through a
CUDA kernel (`spp_primitives/sp_ops*.so`, linked against libcusparse): on
a CPU it cannot load, so `import_snapjax` stands in a module whose kernel
raises if called, and its dense-mask path runs, which its own tests
(`snap_test.py`) check the sparse one against. That path multiplies the
full `(n, P)` influence and masks it: exact RTRL's cost for SnAp-1.
"""

from __future__ import annotations

import sys
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scripts.benchlib.peers_common import Pair
from scripts.benchlib.peers_common import Side
from scripts.benchlib.peers_common import check_setting
from scripts.benchlib.peers_common import compare_steps
from scripts.benchlib.peers_common import timed
from scripts.benchlib.timing import count_floats


def import_snapjax():
  """snapjax, with its CUDA-only kernel module stood in (see above)."""
  name = "snapjax.spp_primitives.primitives"
  if name not in sys.modules:
    stand_in = types.ModuleType(name)

    def spp_csr_matmul(*args, **kwargs):
      raise NotImplementedError(
        "snapjax's sparse SnAp kernel is CUDA-only; use a dense mask"
      )

    stand_in.spp_csr_matmul = spp_csr_matmul
    sys.modules[name] = stand_in
  import snapjax  # pylint: disable=g-import-not-at-top
  import snapjax.algos

  # Its import sets jax_numpy_rank_promotion='raise' for the process; back
  # to JAX's default (a check that only raises; its code runs either way).
  jax.config.update("jax_numpy_rank_promotion", "allow")
  return snapjax


import_snapjax()
# pylint: disable=g-import-not-at-top,g-bad-import-order
import equinox as eqx  # noqa: E402
from snapjax.cells.base import RTRLLayer  # noqa: E402
from snapjax.cells.rnn import RNN  # noqa: E402
from snapjax.cells.stacked import SingleCell  # noqa: E402
from snapjax.cells.utils import densify_jacobian_mask  # noqa: E402
from snapjax.rtrl.base import RTRLApprox  # noqa: E402


class ReadoutLayer(RTRLLayer):
  """Its cell with our linear readout `h @ w + b` (its `RTRLLayer`
  interface: `f_rtrl` returns the state, the cell's payload, the output)."""

  cell: RNN
  w: jax.Array
  b: jax.Array
  d_inp: int = eqx.field(static=True)
  d_out: int = eqx.field(static=True)

  def __init__(self, cell, w, b):
    self.cell, self.w, self.b = cell, w, b
    self.d_inp, self.d_out = cell.input_size, w.shape[1]

  def f_rtrl(self, state, input, perturbation, sp_projection_cell=None):
    h_out, payload = self.cell.f_and_payload(state, input, sp_projection_cell)
    h_out = h_out + perturbation
    return h_out, payload, h_out @ self.w + self.b

  def f_bptt(self, state, input):
    h_out = self.cell.f(state, input)
    return h_out, h_out @ self.w + self.b


def cross_entropy(y, y_hat, mask):
  """Its loss signature; our per-example softmax cross-entropy."""
  return mask * optax.softmax_cross_entropy_with_integer_labels(y_hat, y)


def their_model(params):
  """Our weights as its single-layer model."""
  W = params["cell"]["W"]
  n = W.shape[1]
  m = W.shape[0] - n - 1
  cell = RNN(n, m, key=jax.random.PRNGKey(0))
  cell = eqx.tree_at(
    lambda c: (c.weights_hh.weight, c.weights_hh.bias, c.weights_ih.weight),
    cell,
    (W[m:-1].T, W[-1], W[:m].T),
  )
  readout = params["readout"]
  return SingleCell(ReadoutLayer(cell, readout["w"], readout["b"]))


def grads_as_ours(grads, m: int):
  """Its gradient model (leading axes kept) as our `(cell, readout)`."""
  cell = grads.layers[0].cell
  W = jnp.concatenate(
    [
      jnp.swapaxes(cell.weights_ih.weight, -1, -2),
      jnp.swapaxes(cell.weights_hh.weight, -1, -2),
      cell.weights_hh.bias[..., None, :],
    ],
    axis=-2,
  )
  return {"W": W}, {"w": grads.layers[0].w, "b": grads.layers[0].b}


class Program:
  """Its per-example step under vmap, from a model and a SnAp order."""

  def __init__(self, model, order: int | None):
    self.algo = RTRLApprox(loss_func=cross_entropy, use_scan=True)
    self.mask = (
      None
      if order is None
      else densify_jacobian_mask(model.get_snap_n_mask(order))
    )

  def init(self, model, batch_size):
    traces = self.algo.init_traces(model)
    h = tuple(layer.cell.init_state() for layer in model.layers)
    stack = lambda a: jnp.broadcast_to(a, (batch_size, *a.shape))
    return jax.tree.map(stack, traces), jax.tree.map(stack, h)

  def step(self, model, traces, h, x, y):
    """Batch-mean gradient model, new traces and states, mean loss."""

    def one(traces, h, x, y):
      h, grads, traces, loss, _ = self.algo.step(
        model, traces, h, x, y, 1.0, jacobian_mask=self.mask
      )
      return h, grads, traces, loss

    h, grads, traces, loss = jax.vmap(one)(traces, h, x, y)
    return jax.tree.map(lambda g: g.mean(0), grads), traces, h, loss.mean()


def their_step_grads(order, params, inputs, targets):
  model = their_model(params)
  program = Program(model, order)
  m = inputs.shape[-1]

  def body(carry, xy):
    grads, traces, h, _ = program.step(model, *carry, *xy)
    return (traces, h), grads_as_ours(grads, m)

  carry = program.init(model, inputs.shape[1])
  return jax.jit(lambda c, xs, ys: jax.lax.scan(body, c, (xs, ys))[1])(
    carry, inputs, targets
  )


def check(ours, order, hparams):
  def run(args):
    pair = Pair(ours, ours, "rnn", "", None, None, hparams)
    # Its SnAp-n masks for n >= 2 need inputs <= units (an assertion).
    vocab = args.vocab if order in (None, 1) else args.check_n
    _, params, inputs, targets, our = check_setting(
      pair, args.check_n, 4, 6, vocab
    )
    return compare_steps(our, their_step_grads(order, params, inputs, targets))

  return run


def their_side(order, params, inputs, targets, optimizer, n) -> Side:
  """Its step, Adam on the model's arrays, scanned over the chunk."""
  del n
  model = their_model(params)
  program = Program(model, order)
  arrays, static = eqx.partition(model, eqx.is_inexact_array)

  def step(state, xy):
    arrays, opt_state, traces, h = state
    model = eqx.combine(arrays, static)
    grads, traces, h, loss = program.step(model, traces, h, *xy)
    grads = eqx.filter(grads, eqx.is_inexact_array)
    updates, opt_state = optimizer.update(grads, opt_state, arrays)
    return (eqx.apply_updates(arrays, updates), opt_state, traces, h), loss

  traces, h = program.init(model, inputs.shape[1])
  state = (arrays, optimizer.init(arrays), traces, h)
  run = jax.jit(lambda state: jax.lax.scan(step, state, (inputs, targets)))
  start = time.perf_counter()
  losses = np.asarray(jax.block_until_ready(run(state))[1])
  return Side(
    run=timed(lambda: run(state)),
    losses=losses,
    state_floats=count_floats(traces),
    first_call_s=time.perf_counter() - start,
  )


def cases() -> list:
  from scripts.benchlib.peers_cases import snapjax_cases

  return snapjax_cases()


def versions() -> dict:
  import subprocess  # pylint: disable=g-import-not-at-top

  folder = sys.modules["snapjax"].__file__.rsplit("/snapjax/", 1)[0]
  commit = subprocess.run(
    ["git", "-C", folder, "rev-parse", "--short", "HEAD"],
    capture_output=True,
    text=True,
    check=False,
  ).stdout.strip()
  return {"snapjax": commit or "?", "equinox": eqx.__version__}


def pairs(args) -> list:
  del args

  def pair(algorithm, ours, order, theirs, hparams=None, sizes=()):
    return Pair(
      algorithm,
      ours,
      "rnn",
      theirs,
      check(ours, order, hparams or {}),
      lambda *a: their_side(order, *a),
      hparams=hparams or {},
      exponent=4,
      sizes=sizes,
    )

  return [
    pair("exact", "rtrl", None, "RTRLApprox, no mask"),
    pair("snap1", "snap1", 1, "RTRLApprox, SnAp-1 mask (dense)"),
    # Timed where the 50-symbol input fits its SnAp-2 mask (n >= 50).
    pair(
      "snap2",
      "snap",
      2,
      "RTRLApprox, SnAp-2 mask (dense)",
      {"order": 2},
      sizes=(64, 128, 256),
    ),
  ]
