"""Recursive-least-squares optimisation of deep networks, as optax transforms.

Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
Networks" (2021). Each dense, conv and recurrent layer keeps ``P``, the inverse
of its input autocorrelation, updated by Sherman-Morrison with the minibatch-
mean layer input ``x̄``; the gradient of the augmented ``[kernel; bias]`` is
preconditioned by ``(η/h) P``.

Typical use (gradients and layer inputs from one forward pass)::

  import jax, optax, rls

  tx = rls.rls(momentum=0.5, l1=1e-5)  # clips the gradient at 5.0 first
  state = tx.init(params)

  def loss_fn(params, x, y):
    outputs, xbar = rls.layer_inputs(model.apply, {'params': params}, x)
    return 0.5 * jnp.mean(jnp.sum((outputs - y) ** 2, -1)), xbar  # eq. (57)

  @jax.jit
  def train_step(params, state, x, y):
    (loss, xbar), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, x, y)
    updates, state = tx.update(grads, state, params, layer_inputs=xbar)
    return optax.apply_updates(params, updates), state, loss

An NNX model passes itself: ``outputs, xbar = rls.layer_inputs(model, x)``
inside the loss given to ``nnx.value_and_grad(loss_fn, has_aux=True)``, then
``nnx.Optimizer(model, rls.rls(), wrt=nnx.Param).update(model, grads,
layer_inputs=xbar)``; ``xbar`` is keyed like ``nnx.state(model, nnx.Param)``.

Hybrid (RLS on hidden layers, Adam on the output layer, softmax cross-entropy);
`optax.multi_transform` forwards ``layer_inputs`` to both, RLS skips the
masked-out output layer and Adam ignores the extra argument::

  labels = {name: 'adam' if name == 'Dense_1' else 'rls' for name in params}
  tx = optax.chain(
      optax.clip_by_global_norm(5.0),
      optax.multi_transform({'rls': rls.rls(momentum=0.5),
                             'adam': optax.adam(1e-3)}, labels))

Layout of ``layer_inputs``: it mirrors the params down to the layer (the dict
holding ``kernel``/``bias``): ``layer_inputs['Dense_0']`` for
``params['Dense_0']``, ``layer_inputs['LSTM_0']['recurrent']`` for
``params['LSTM_0']['recurrent']``. Each entry is a `LayerInput` ``(mean,
steps)`` (a bare array means ``steps = 1``): ``mean`` is ``x̄`` of shape
``(fan_in,)`` *without* the bias 1 — `scale_by_rls` appends the 1 for layers
with a bias — and ``steps`` is ``T`` (1 for dense/conv, the sequence length
for `layers.RNN` / `layers.LSTM`).

Forms: `scale_by_rls_conventional` (the paper's update of ``P``),
`scale_by_rls_square_root` (Potter's form, ``P = S Sᵀ``),
`scale_by_rls_second_moment` (``P`` from sampled input rows) and
`scale_by_rls_damped_second_moment` (a damped running second moment,
refreshed every few steps, K-FAC's activation factor) are peer
transforms over one per-layer loop (`rls.layerwise`), each with its own state
type; `scale_by_rls` picks one from its options, `with_momentum_and_l1` adds
the paper's momentum and L1 to any of them, and `rls` chains that with the
paper's gradient clip (at 5.0 by default: without it plain RLS diverges on
small MLPs) and a learning rate. `graft` gives any direction (an RLS form's) another
transform's step size per parameter array (Adam's). `damped_rls_adam`
(RLS-DA) chains the damped form at low rank with Adam: one setting below
Adam on the paper's MNIST FNN and a small CIFAR-10 mini-VGG.

Parameters without a layer input (embeddings, normalisation scales) raise a
ValueError naming them; route them to another optimiser with
`optax.multi_transform`, or pass ``passthrough=True``.
"""

from rls import damped_second_moment
from rls import grafting
from rls import input_samples
from rls import layers
from rls import second_moment
from rls.alias import RLSDirectionState
from rls.alias import damped_rls_adam
from rls.alias import rls
from rls.alias import scale_by_rls_with_momentum_and_l1
from rls.alias import with_momentum_and_l1
from rls.capture import RLS_INPUTS
from rls.capture import record_layer_input
from rls.conventional import ScaleByRLSState
from rls.conventional import scale_by_rls_conventional
from rls.damped_second_moment import ScaleByRLSDampedSecondMomentState
from rls.damped_second_moment import scale_by_rls_damped_second_moment
from rls.flax_capture import layer_inputs
from rls.grafting import GraftState
from rls.grafting import graft
from rls.layers import LSTM
from rls.layers import RNN
from rls.layerwise import LayerInput
from rls.layerwise import inverse_correlation
from rls.layerwise import precondition_by
from rls.second_moment import ScaleByRLSSecondMomentState
from rls.second_moment import scale_by_rls_second_moment
from rls.square_root import ScaleByRLSSquareRootState
from rls.square_root import scale_by_rls_square_root
from rls.transform import scale_by_rls

__all__ = [
  "GraftState",
  "LSTM",
  "LayerInput",
  "RLSDirectionState",
  "RLS_INPUTS",
  "RNN",
  "ScaleByRLSDampedSecondMomentState",
  "ScaleByRLSSecondMomentState",
  "ScaleByRLSSquareRootState",
  "ScaleByRLSState",
  "damped_rls_adam",
  "damped_second_moment",
  "graft",
  "grafting",
  "input_samples",
  "inverse_correlation",
  "layer_inputs",
  "layers",
  "precondition_by",
  "record_layer_input",
  "rls",
  "scale_by_rls",
  "scale_by_rls_conventional",
  "scale_by_rls_damped_second_moment",
  "scale_by_rls_second_moment",
  "scale_by_rls_square_root",
  "scale_by_rls_with_momentum_and_l1",
  "second_moment",
  "with_momentum_and_l1",
]
