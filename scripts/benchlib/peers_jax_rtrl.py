"""jax_rtrl's side of `scripts/bench_peers.py` (FranzKnut/jax_rtrl,
JAX/Flax, MIT). Its package is imported from the fetched snapshot under
the peer's own venv (`scripts/peers/setup_jax_rtrl.sh`); none of it is
copied here.

Its model: `OnlineCTRNNCell(ode_type='murray', dt=1)`, the Euler step
`h' = h + (tanh(W [x, h, 1]) - h) / tau`, is our `LeakyRNN` with `leak =
1 / tau` when every unit's `tau` is the same (its `W` is our `W`
transposed). Its `tau` is a parameter with a trace of its own; here it is
set to `1 / LEAK` and left out of the optimiser (our leak is fixed), so
both sides train the same model; their step still computes its trace.

Pairs (ours <- theirs, `plasticity=`): exact RTRL <- 'rtrl' (a dense
`jacrev` of the ODE per step); RFLO <- 'rflo' (its `rflo_murray`: the
trace decays by `1 - dt / tau`, ours by the cell's direct path `1 -
leak`: the same); SnAp-1 <- 'eprop' (its CTRNN e-prop keeps each unit's
own row and propagates it by `1 - leak + leak tanh'(u_i) W_ii`, the
diagonal of the state Jacobian: SnAp-1's rule on this cell). 'snap0' (the
immediate Jacobian only) is no estimator of ours: not compared.

The gradient is its own: `jax.grad` through the cell's `custom_vjp`,
whose backward pass is `online_gradient(traces, dL/dh)`. Examples run
under `jax.vmap` (its exact RTRL takes a `jacrev` of the unbatched ODE),
the batch-mean gradient is the mean over examples, and Adam
(`optax.adam`, ours) updates `W` and the readout in one jitted `lax.scan`
over the chunk.
"""

from __future__ import annotations

import subprocess
import time

import jax
import jax.numpy as jnp
from jax_rtrl.models.cells.ctrnn import OnlineCTRNNCell
import numpy as np
import optax

from scripts.benchlib.peers_common import Pair
from scripts.benchlib.peers_common import Side
from scripts.benchlib.peers_common import check_setting
from scripts.benchlib.peers_common import compare_steps
from scripts.benchlib.peers_common import timed
from scripts.benchlib.timing import count_floats

LEAK = 0.25  # tau = 4 steps


def their_model(n: int, plasticity: str):
  return OnlineCTRNNCell(
    num_units=n, ode_type="murray", plasticity=plasticity, dt=1.0
  )


def their_params(params) -> dict:
  """Our `{'cell': {'W'}}` as its `{'params': {'W', 'tau'}}`."""
  W = params["cell"]["W"]
  n = W.shape[1]
  return {"W": W.T, "tau": jnp.full((n,), 1.0 / LEAK, W.dtype)}


def example_grads(model, cell_params, readout, carry, x, y):
  """One example's step: (new carry, loss, {'W', 'tau'} and readout
  gradients) from `jax.grad` through its `custom_vjp`."""

  def loss_fn(cell_params, readout):
    new_carry, h = model.apply({"params": cell_params}, carry, x)
    logits = h @ readout["w"] + readout["b"]
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return loss, new_carry

  (loss, new_carry), grads = jax.value_and_grad(
    loss_fn, argnums=(0, 1), has_aux=True
  )(cell_params, readout)
  return new_carry, loss, grads


def initial_carry(model, cell_params, n_in: int, batch_size: int):
  """Its own `initialize_carry` (h, parameter traces, input trace) for one
  example, broadcast over the batch."""
  carry = model.apply(
    {"params": cell_params},
    jax.random.PRNGKey(0),
    (n_in,),
    method=model.initialize_carry,
  )
  return jax.tree.map(
    lambda a: jnp.broadcast_to(a, (batch_size, *a.shape)), carry
  )


def batch_grads(model, cell_params, readout, carry, x, y):
  """Per-example steps under vmap; batch-mean loss and gradients."""
  carry, loss, grads = jax.vmap(
    example_grads, in_axes=(None, None, None, 0, 0, 0)
  )(model, cell_params, readout, carry, x, y)
  return carry, loss.mean(), jax.tree.map(lambda g: g.mean(0), grads)


def their_step_grads(plasticity, params, inputs, targets):
  """Per-step `(cell W, readout)` gradients with the parameters fixed."""
  n = params["cell"]["W"].shape[1]
  model = their_model(n, plasticity)
  cell_params = their_params(params)
  carry = initial_carry(model, cell_params, inputs.shape[-1], inputs.shape[1])

  def body(carry, xy):
    carry, _, (cell_grads, readout_grads) = batch_grads(
      model, cell_params, params["readout"], carry, *xy
    )
    return carry, ({"W": cell_grads["W"].T}, readout_grads)

  return jax.jit(lambda c, xs, ys: jax.lax.scan(body, c, (xs, ys))[1])(
    carry, inputs, targets
  )


def check(ours, plasticity):
  def run(args):
    pair = Pair(ours, ours, "leaky_rnn", plasticity, None, None)
    pair = pair._replace(cell_kwargs={"leak": LEAK})
    _, params, inputs, targets, our = check_setting(
      pair, args.check_n, 4, 6, args.vocab
    )
    theirs = their_step_grads(plasticity, params, inputs, targets)
    return compare_steps(our, theirs)

  return run


def their_side(plasticity, params, inputs, targets, optimizer, n) -> Side:
  """Its online step (vmapped cell and gradient, Adam on W and the
  readout, tau fixed) scanned over the chunk in one jitted program."""
  model = their_model(n, plasticity)
  trained = {"W": their_params(params)["W"], "readout": params["readout"]}
  tau = their_params(params)["tau"]
  carry = initial_carry(
    model, their_params(params), inputs.shape[-1], inputs.shape[1]
  )

  def step(state, xy):
    trained, opt_state, carry = state
    carry, loss, (cell_grads, readout_grads) = batch_grads(
      model, {"W": trained["W"], "tau": tau}, trained["readout"], carry, *xy
    )
    grads = {"W": cell_grads["W"], "readout": readout_grads}
    updates, opt_state = optimizer.update(grads, opt_state, trained)
    return (optax.apply_updates(trained, updates), opt_state, carry), loss

  run = jax.jit(lambda state: jax.lax.scan(step, state, (inputs, targets)))
  state = (trained, optimizer.init(trained), carry)
  start = time.perf_counter()
  losses = np.asarray(jax.block_until_ready(run(state))[1])
  return Side(
    run=timed(lambda: run(state)),
    losses=losses,
    state_floats=count_floats(carry[1:]),
    first_call_s=time.perf_counter() - start,
  )


def cases() -> list:
  from scripts.benchlib.peers_cases import jax_rtrl_cases

  return jax_rtrl_cases()


def versions() -> dict:
  import jax_rtrl  # pylint: disable=g-import-not-at-top

  folder = jax_rtrl.__file__.rsplit("/jax_rtrl/", 1)[0]
  commit = subprocess.run(
    ["git", "-C", folder, "rev-parse", "--short", "HEAD"],
    capture_output=True,
    text=True,
    check=False,
  ).stdout.strip()
  return {"jax_rtrl": commit or "?"}


def pairs(args) -> list:
  del args

  def pair(algorithm, ours, plasticity, exponent=2):
    return Pair(
      algorithm,
      ours,
      "leaky_rnn",
      f"OnlineCTRNNCell(plasticity={plasticity!r})",
      check(ours, plasticity),
      lambda *a: their_side(plasticity, *a),
      cell_kwargs={"leak": LEAK},
      exponent=exponent,
    )

  return [
    pair("exact", "rtrl", "rtrl", exponent=4),
    pair("rflo", "rflo", "rflo"),
    pair("snap1", "snap1", "eprop"),
  ]
