"""Recurrent layers with fused gates, shaped for RLS (one P per distinct input).

Each layer owns two augmented matrices, exactly as eq. (7) / (9)-(12):

* ``input``: ``kernel (in_features, G·features)``, ``bias (G·features,)``,
  applied to ``x_t``;
* ``recurrent``: ``kernel (features, G·features)``, ``bias (G·features,)``,
  applied to ``h_{t-1}``;

with all ``G`` gates side by side (``G = 1`` for `RNN`, ``G = 4`` for `LSTM`,
gate order ``(i, g, f, o)`` as eqs. (13)-(16)). So RLS keeps one ``P`` of size
``in_features + 1`` and one of size ``features + 1`` per layer, not one per
gate. Under `rls.layer_inputs` a layer records, for each matrix, its input
averaged over batch and time with ``T`` = the sequence length (eqs. 92-96):
``x̄_in = mean_{b,t} x_t`` and ``x̄_rec = mean_{b,t} h_{t-1}``, ``t = 1..T``,
including the initial state ``h_0`` (zeros by default, Algorithm 2 line 4).

The ``T`` weighting matches a loss *summed* over time steps, eqs. (76), (87);
with a loss averaged over time the gradient is ``T`` times smaller, which
``gradient_scale`` can compensate.

Both layers take ``(batch, time, features)`` and return the hidden states
``(batch, time, features)``. The input projection of the whole sequence is one
matrix product; only ``h_{t-1} @ recurrent`` runs inside `jax.lax.scan`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from rls.capture import is_capturing
from rls.capture import record_layer_input

Array = jax.Array
Initializer = Callable[..., Array]


class _FusedAffine(nn.Module):
  """Holds one augmented matrix: ``kernel (in, out)`` and ``bias (out,)``."""

  features: int
  use_bias: bool
  kernel_init: Initializer
  bias_init: Initializer
  param_dtype: Any

  @nn.compact
  def __call__(self, in_features: int) -> tuple[Array, Array | None]:
    kernel = self.param(
      "kernel", self.kernel_init, (in_features, self.features), self.param_dtype
    )
    bias = (
      self.param("bias", self.bias_init, (self.features,), self.param_dtype)
      if self.use_bias
      else None
    )
    return kernel, bias


class _FusedRecurrent(nn.Module):
  """Shared scan and capture logic; subclasses define the gates."""

  features: int
  use_bias: bool = True
  kernel_init: Initializer = nn.initializers.lecun_normal()
  recurrent_kernel_init: Initializer = nn.initializers.orthogonal()
  bias_init: Initializer = nn.initializers.zeros_init()
  dtype: Any | None = None
  param_dtype: Any = jnp.float32

  num_gates = 1

  # The gate helpers are plain functions of arrays, called inside lax.scan,
  # so they are not wrapped as Flax methods (nn.nowrap).
  @nn.nowrap
  def initial_carry(self, batch_size: int, dtype) -> Any:
    raise NotImplementedError

  @nn.nowrap
  def cell(self, carry: Any, preactivation: Array) -> Any:
    """Next carry from the carry and ``z_t = x_t W + b + h_{t-1} V + v``."""
    raise NotImplementedError

  @nn.nowrap
  def hidden(self, carry: Any) -> Array:
    raise NotImplementedError

  @nn.nowrap
  def record_inputs(
    self,
    input_weights: nn.Module,
    recurrent_weights: nn.Module,
    inputs: Array,
    initial_carry: Any,
    outputs: Array,
  ) -> None:
    """Records x̄ over t = 1..T of x_t and of h_{t-1} = (h_0, ..., h_{T-1})
    (eq. 92), each with T = the sequence length."""
    batch_size, num_steps = inputs.shape[:2]
    record_layer_input(input_weights, jnp.mean(inputs, axis=(0, 1)), num_steps)
    previous_sum = jnp.sum(self.hidden(initial_carry), axis=0) + jnp.sum(
      outputs[:, :-1], axis=(0, 1)
    )
    record_layer_input(
      recurrent_weights, previous_sum / (batch_size * num_steps), num_steps
    )

  @nn.compact
  def __call__(
    self,
    inputs: Array,
    initial_carry: Any = None,
    *,
    return_carry: bool = False,
  ):
    """Runs the layer over a batch of sequences.

    Args:
      inputs: ``(batch, time, in_features)``.
      initial_carry: the state before the first step (default zeros), as
        returned with ``return_carry=True``.
      return_carry: also return the final carry.

    Returns:
      Hidden states ``(batch, time, features)``, and the final carry if
      ``return_carry``.
    """
    if inputs.ndim != 3:
      raise ValueError(
        f"{type(self).__name__} takes inputs of shape (batch, time, "
        f"features); got shape {inputs.shape}."
      )
    batch_size, _, in_features = inputs.shape
    width = self.num_gates * self.features
    input_weights = _FusedAffine(
      width,
      self.use_bias,
      self.kernel_init,
      self.bias_init,
      self.param_dtype,
      name="input",
    )
    recurrent_weights = _FusedAffine(
      width,
      self.use_bias,
      self.recurrent_kernel_init,
      self.bias_init,
      self.param_dtype,
      name="recurrent",
    )
    w_in, b_in = input_weights(in_features)
    w_rec, b_rec = recurrent_weights(self.features)
    inputs, w_in, b_in, w_rec, b_rec = nn.dtypes.promote_dtype(
      inputs, w_in, b_in, w_rec, b_rec, dtype=self.dtype
    )

    # Both biases add to every step's pre-activation, so fold them into the
    # input projection, done for all steps at once.
    z_in = inputs @ w_in
    for bias in (b_in, b_rec):
      if bias is not None:
        z_in = z_in + bias
    if initial_carry is None:
      initial_carry = self.initial_carry(batch_size, z_in.dtype)

    def step(carry, z_t):
      carry = self.cell(carry, z_t + self.hidden(carry) @ w_rec)
      return carry, self.hidden(carry)

    final_carry, hidden_t = jax.lax.scan(
      step, initial_carry, jnp.swapaxes(z_in, 0, 1)
    )
    outputs = jnp.swapaxes(hidden_t, 0, 1)

    if is_capturing(self):
      self.record_inputs(
        input_weights, recurrent_weights, inputs, initial_carry, outputs
      )
    if return_carry:
      return outputs, final_carry
    return outputs


class RNN(_FusedRecurrent):
  """Elman RNN layer, eq. (7): ``h_t = f(x_t W + b + h_{t-1} V + v)``.

  Attributes:
    features: hidden size ``N_l``.
    activation: ``f`` (tanh by default).
    use_bias: give both matrices a bias (``b`` and ``v``, as the paper).
    kernel_init, recurrent_kernel_init, bias_init: initialisers.
    dtype, param_dtype: computation and parameter dtypes.
  """

  activation: Callable[[Array], Array] = jnp.tanh

  num_gates = 1

  @nn.nowrap
  def initial_carry(self, batch_size: int, dtype) -> Array:
    return jnp.zeros((batch_size, self.features), dtype)

  @nn.nowrap
  def cell(self, carry: Array, preactivation: Array) -> Array:
    return self.activation(preactivation)

  @nn.nowrap
  def hidden(self, carry: Array) -> Array:
    return carry


class LSTM(_FusedRecurrent):
  """LSTM layer with all four gates fused, eqs. (9)-(18).

  ``z_t = x_t W + b + h_{t-1} V + v`` split as ``(i, g, f, o)``;
  ``c_t = σ(i)·tanh(g) + σ(f)·c_{t-1}``, ``h_t = σ(o)·tanh(c_t)``. The carry
  is ``(c, h)``.

  Attributes:
    features: hidden size ``N_l``; the matrices have ``4 · features`` columns.
    use_bias: give both matrices a bias (``b`` and ``v``, as the paper).
    kernel_init, recurrent_kernel_init, bias_init: initialisers.
    dtype, param_dtype: computation and parameter dtypes.
  """

  num_gates = 4

  @nn.nowrap
  def initial_carry(self, batch_size: int, dtype) -> tuple[Array, Array]:
    zeros = jnp.zeros((batch_size, self.features), dtype)
    return zeros, zeros

  @nn.nowrap
  def cell(self, carry, preactivation):
    cell_state, _ = carry
    i, g, f, o = jnp.split(preactivation, 4, axis=-1)
    cell_state = (
      jax.nn.sigmoid(i) * jnp.tanh(g) + jax.nn.sigmoid(f) * cell_state
    )
    return cell_state, jax.nn.sigmoid(o) * jnp.tanh(cell_state)

  @nn.nowrap
  def hidden(self, carry):
    return carry[1]
