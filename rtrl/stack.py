"""Stacks of recurrent layers trained online, each layer by its own
estimator, the error passed down through the layers' instantaneous Jacobians
(Zucchet et al. 2023).

A stack is a sequence of `Layer(cell, estimator, head)`: at step `t`, layer
`l` steps its cell on its input `u_l`, and its head maps the cell's output
(and `u_l`) to `u_{l+1}`; the task readout reads the last head's output.
Any cell with an estimator works: LRU layers under exact element-wise RTRL,
RHN layers under OK, GRU layers under SnAp-1, in any mix.

Online, the loss `L_t` is differentiated at step `t` only ("spatially"):
with every layer's previous state held fixed, `e_l = dL_t/ds_l,t` is the
total derivative through the heads and the upper layers' current steps (a
perturbation added to each layer's new state, differentiated at zero), and
layer `l`'s estimator turns `e_l` into its recurrent parameters' gradient.
Heads and the readout take `L_t`'s immediate gradient. For one layer this is
exactly BPTT's gradient (with an exact estimator); below the top layer it
drops the paths by which `s_l,t` reaches `L_{t+k}` through upper layers'
later states: an approximation, measured against BPTT
(`stacked_bptt_gradient`) rather than assumed small.

References:
  Zucchet, Meier, Schug, Mujika, Sacramento, "Online learning of long-range
  dependencies", NeurIPS 2023.
"""

from __future__ import annotations

from collections.abc import Sequence
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rtrl import losses as losses_lib
from rtrl import optim
from rtrl import validation
from rtrl.bptt import bptt_gradient
from rtrl.estimators import Estimator
from rtrl.heads import Head
from rtrl.online import StepBatch
from rtrl.online import StepMetrics
from rtrl.online import Trainer
from rtrl.online import broadcast_state
from rtrl.online import inputs
from rtrl.online import readout_and_loss
from rtrl.online import step_resetting
from rtrl.online import summed_gradient
from rtrl.online import trainer_from_estimate
from rtrl.online import where_reset


class Layer(NamedTuple):
  """One recurrent layer: a cell, its estimator, and its head."""

  cell: Any
  estimator: Estimator
  head: Head


def check_layers(layers: Sequence[Layer]) -> tuple[Layer, ...]:
  """The layers as a tuple; a ValueError for an empty stack or a bad layer."""
  layers = tuple(layers) if isinstance(layers, (list, tuple)) else layers
  if not isinstance(layers, tuple) or len(layers) < 1:
    raise ValueError(
      f"layers must be a non-empty sequence of "
      f"rtrl.stack.Layer (a stack depth >= 1), got {layers!r}"
    )
  for i, layer in enumerate(layers):
    if not isinstance(layer, Layer):
      raise ValueError(
        f"layers[{i}] must be an rtrl.stack.Layer(cell, "
        f"estimator, head), got {layer!r}"
      )
  return layers


class StackedCell:
  """The stack's forward pass as one cell (`init`, `initial_state`, `step`,
  `output`, `hidden_size`), so that everything written for a cell (BPTT,
  TBPTT, evaluation) runs a stack unchanged.

  Params: a tuple of `{'cell', 'head'}`, one per layer. State: `(layer
  states, top output)`; the top head's output is carried in the state
  because it reads the head's parameters, which `output` does not see.
  The online estimators are per layer (`estimate_step`), not through this.
  """

  def __init__(self, layers: Sequence[Layer]):
    self.layers = check_layers(layers)

  def __repr__(self):
    return f"StackedCell({len(self.layers)} layers)"

  @property
  def hidden_size(self) -> int:
    """The top head's output size (what the readout reads); a head's
    output size is taken not to depend on the raw input size."""
    size: int | None = None
    for layer in self.layers:
      size = layer.head.output_size(layer.cell.hidden_size, size)
    if size is None:
      raise ValueError("a stack needs at least one layer")
    return size

  def init(self, key: jax.Array, input_size: int) -> tuple:
    """Each layer's cell and head by their own initialisation; layer `l`'s
    input size is the previous head's output."""
    size = validation.positive_int("input_size", input_size)
    keys = jax.random.split(key, 2 * len(self.layers))
    out = []
    for i, layer in enumerate(self.layers):
      features = layer.cell.hidden_size
      out.append(
        {
          "cell": layer.cell.init(keys[2 * i], size),
          "head": layer.head.init(keys[2 * i + 1], features, size),
        }
      )
      size = layer.head.output_size(features, size)
    return tuple(out)

  def initial_state(self):
    states = tuple(layer.cell.initial_state() for layer in self.layers)
    dtype = jax.tree_util.tree_leaves(states)[0].dtype
    return states, jnp.zeros((self.hidden_size,), dtype)

  def step(self, params: tuple, state, x: jax.Array):
    states, _ = state
    zeros = jax.tree_util.tree_map(jnp.zeros_like, states)
    top, _, states = _forward(self.layers, params, states, x, zeros)
    return states, top

  def output(self, state) -> jax.Array:
    return state[1]


def init_params(
  layers: Sequence[Layer],
  key: jax.Array,
  input_size: int,
  num_outputs: int,
  readout=None,
) -> dict:
  """`{'cell': ({'cell', 'head'}, ...) one per layer, 'readout'}` (the
  layout of a single cell's params, `StackedCell` as the cell)."""
  stacked = StackedCell(layers)
  readout, _ = readout_and_loss(readout, None)
  cell_key, readout_key = jax.random.split(key)
  return {
    "cell": stacked.init(cell_key, input_size),
    "readout": readout.init(readout_key, stacked.hidden_size, num_outputs),
  }


def _forward(layers, params: tuple, previous, x, perturbations):
  """One example, one step (`params`: the layers' `{'cell', 'head'}`):
  `(last head's output, layer inputs, new states)`, each new state plus its
  perturbation."""
  u, inputs, states = x, [], []
  for layer, layer_params, state, delta in zip(
    layers, params, previous, perturbations
  ):
    inputs.append(u)
    new = layer.cell.step(layer_params["cell"], state, u)
    new = jax.tree_util.tree_map(jnp.add, new, delta)
    states.append(new)
    u = layer.head.apply(layer_params["head"], layer.cell.output(new), u)
  return u, tuple(inputs), tuple(states)


def estimate_step(
  layers,
  params,
  tstates,
  stacked_state,
  batch: StepBatch,
  *,
  readout=None,
  loss=None,
):
  """One batched step of the stack with gradient estimates, parameters
  fixed: `(tstates, stacked_state, mean loss, grads)`; `stacked_state` is
  the batched `StackedCell` state `(layer states, top output)`, `grads` has
  the params' structure (cells by their estimators, heads and readout by
  the step's immediate gradient)."""
  readout, loss = readout_and_loss(readout, loss)
  batch_size = batch.targets.shape[0]
  cell_states = tuple(
    where_reset(
      batch.resets, broadcast_state(layer.cell.initial_state(), batch_size), s
    )
    for layer, s in zip(layers, stacked_state[0])
  )
  zeros = jax.tree_util.tree_map(jnp.zeros_like, cell_states)

  def mean_loss(perturbations, heads, readout_params):
    local = tuple(
      {"cell": p["cell"], "head": h} for p, h in zip(params["cell"], heads)
    )
    top, inputs, _ = jax.vmap(lambda s, x, d: _forward(layers, local, s, x, d))(
      cell_states, batch.inputs, perturbations
    )
    prediction = jax.eval_shape(
      readout.apply,
      readout_params,
      jax.ShapeDtypeStruct(top.shape[1:], top.dtype),
    )
    losses_lib.check(
      loss,
      prediction,
      jax.ShapeDtypeStruct(batch.targets.shape[1:], batch.targets.dtype),
    )
    per_example = jax.vmap(
      lambda h, y, w: loss(readout.apply(readout_params, h), y) * w
    )(top, batch.targets, batch.weights)
    return per_example.sum() / batch_size, (inputs, top)

  heads = tuple(p["head"] for p in params["cell"])
  (value, (inputs, top)), (errors, head_grads, readout_grads) = (
    jax.value_and_grad(mean_loss, argnums=(0, 1, 2), has_aux=True)(
      zeros, heads, params["readout"]
    )
  )
  new_tstates, new_states, layer_grads = [], [], []
  for layer, layer_params, tstate, state, x, error, head_grad in zip(
    layers, params["cell"], tstates, cell_states, inputs, errors, head_grads
  ):
    tstate, state = step_resetting(
      layer.estimator, layer_params["cell"], tstate, state, x, batch.resets
    )
    new_tstates.append(tstate)
    new_states.append(state)
    layer_grads.append(
      {
        "cell": summed_gradient(
          layer.estimator, layer_params["cell"], tstate, error
        ),
        "head": head_grad,
      }
    )
  return (
    tuple(new_tstates),
    (tuple(new_states), top),
    value,
    {"cell": tuple(layer_grads), "readout": readout_grads},
  )


def _init_states(layers, params, key, batch_size):
  """`(per-layer tangent states, batched StackedCell state)`."""
  keys = jax.random.split(key, len(layers))
  tstates = tuple(
    jax.vmap(layer.estimator.init, in_axes=(None, None, 0))(
      layer_params["cell"],
      layer.cell.initial_state(),
      jax.random.split(layer_key, batch_size),
    )
    for layer, layer_params, layer_key in zip(layers, params["cell"], keys)
  )
  return tstates, broadcast_state(
    StackedCell(layers).initial_state(), batch_size
  )


def _masks(layers, updates):
  """The `rtrl.optim.masked_updates` tree: each sparse cell's
  `params_mask`, None elsewhere."""

  def layer_masks(layer, layer_updates):
    sparse = getattr(layer.cell, "recurrent_mask", None) is not None
    cell = layer.cell.params_mask(layer_updates["cell"]) if sparse else None
    return {**dict.fromkeys(layer_updates), "cell": cell}

  cells = tuple(map(layer_masks, layers, updates["cell"]))
  return {**dict.fromkeys(updates), "cell": cells}


def make_stacked_online_trainer(
  layers: Sequence[Layer],
  optimizer: optax.GradientTransformation,
  accumulate_steps: int = 1,
  *,
  readout=None,
  loss=None,
) -> Trainer:
  """The online trainer of a stack (cf. `rtrl.make_online_trainer`): an
  optax update of every parameter at every step, or of the mean gradient
  every `accumulate_steps` steps (Zucchet et al. update once per sequence).
  `run` is jitted."""
  layers = check_layers(layers)
  readout, loss = readout_and_loss(readout, loss)
  if any(getattr(l.cell, "recurrent_mask", None) is not None for l in layers):
    # Sparse cells stay sparse: no update off their masks.
    optimizer = optax.chain(
      optimizer, optim.masked_updates(functools.partial(_masks, layers))
    )

  def initial_states(params, key, batch_size):
    return _init_states(layers, params, key, batch_size)

  def estimate(params, tstates, cell_states, batch):
    return estimate_step(
      layers, params, tstates, cell_states, batch, readout=readout, loss=loss
    )

  return inputs.checked(  # Shapes, dtypes, NaN inputs: rtrl.online.inputs.
    trainer_from_estimate(initial_states, estimate, optimizer, accumulate_steps)
  )


def stacked_frozen_gradients(
  layers: Sequence[Layer],
  params: dict,
  chunk: StepBatch,
  key: jax.Array,
  *,
  readout=None,
  loss=None,
):
  """Per-step gradient estimates of the stack with the parameters held
  fixed: leaves `(T,) + shape`, and the per-step `StepMetrics`."""
  layers = check_layers(layers)
  batch_size = chunk.targets.shape[1]
  tstates, states = _init_states(layers, params, key, batch_size)

  def body(carry, batch):
    tstates, states, mean_loss, grads = estimate_step(
      layers, params, *carry, batch, readout=readout, loss=loss
    )
    return (tstates, states), (
      grads,
      StepMetrics(mean_loss * batch_size, batch.weights.sum()),
    )

  _, (grads, metrics) = jax.lax.scan(body, (tstates, states), chunk)
  return grads, metrics


def stacked_bptt_gradient(
  layers: Sequence[Layer],
  params: dict,
  chunk: StepBatch,
  *,
  readout=None,
  loss=None,
):
  """Full-BPTT gradient of `Σ_t` (batch-mean `L_t`) over the chunk from the
  initial states: the exact reference for the online stack."""
  stacked = StackedCell(layers)
  batch_size = chunk.targets.shape[1]
  return bptt_gradient(
    stacked,  # type: ignore[arg-type]  # a StackedCell serves as a Cell here
    params,
    broadcast_state(stacked.initial_state(), batch_size),
    chunk,
    readout=readout,
    loss=loss,
  )


def cosines_to_bptt(
  layers: Sequence[Layer],
  params: dict,
  chunk: StepBatch,
  key: jax.Array,
  *,
  readout=None,
  loss=None,
) -> dict:
  """How far the online stack's gradient is from BPTT's over one chunk.

  The online per-step gradients (parameters fixed) summed over the chunk
  against the full-BPTT gradient of the same summed loss, both from the
  initial states: `{'all': cosine over every parameter, 'layer_l': cosine
  over layer l's cell and head parameters (l = 0 at the bottom),
  'readout': ...}`. Exact estimators and one layer give 1 (up to rounding);
  below the top layer the online errors drop the paths through upper
  layers' later states.
  """
  layers = check_layers(layers)
  steps, _ = stacked_frozen_gradients(
    layers, params, chunk, key, readout=readout, loss=loss
  )
  online = jax.tree_util.tree_map(lambda a: a.sum(0), steps)
  full = stacked_bptt_gradient(
    layers, params, chunk, readout=readout, loss=loss
  )

  def cosine(a, b):
    a = jnp.concatenate([x.ravel() for x in jax.tree_util.tree_leaves(a)])
    b = jnp.concatenate([x.ravel() for x in jax.tree_util.tree_leaves(b)])
    return a @ b / (jnp.linalg.norm(a) * jnp.linalg.norm(b))

  out = {
    "all": cosine(online, full),
    "readout": cosine(online["readout"], full["readout"]),
  }
  for i in range(len(layers)):
    out[f"layer_{i}"] = cosine(online["cell"][i], full["cell"][i])
  return out
