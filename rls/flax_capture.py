"""`rls.layer_inputs`: every layer's minibatch-mean input, from a Linen
model (`rls.capture`) or an ``nnx.Module`` (`rls.capture_nnx`, imported only
for one). The two capture modules never import each other's entry points.
"""

from __future__ import annotations

from collections.abc import Mapping
import sys
from typing import Any

from rls import capture


def layer_inputs(
  model_or_apply_fn: Any,
  *args,
  time_axes: Mapping | None = None,
  samples: int = 0,
  **kwargs,
) -> tuple[Any, Any]:
  """Runs a Flax model and returns its outputs and every layer's mean input.

  Two forms, told apart by the first argument:

  * Linen: ``layer_inputs(model.apply, variables, *inputs)``, for unmodified
    models built from ``nn.Dense``, ``nn.Conv`` (``feature_group_count=1``,
    any strides, padding, dilations) and `rls.layers.RNN` /
    `rls.layers.LSTM`; custom layers can call `record_layer_input`.
  * NNX: ``layer_inputs(model, *inputs)`` for an ``nnx.Module`` built from
    ``nnx.Linear``, ``nnx.Conv`` (``feature_group_count=1``) and recurrent
    cells made of ``nnx.Linear`` (``nnx.LSTMCell``, ``OptimizedLSTMCell``,
    ``GRUCell``, ``SimpleCell``), called step by step or under ``nnx.RNN``
    (each cell layer's ``x̄`` over batch and time, ``T`` = the sequence
    length). Layers must be called by the model itself, not inside an
    ``nnx.scan`` / ``nnx.vmap`` of its own (a ValueError names them).

  Get the loss gradient and the inputs in one forward pass by calling this
  inside the loss function::

    def loss_fn(params, x, y):
      logits, xbar = rls.layer_inputs(model.apply, {'params': params}, x)
      return loss(logits, y), xbar
    (loss, xbar), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, x, y)

  or, with NNX, ``nnx.value_and_grad(loss_fn, has_aux=True)(model, x, y)``
  with ``logits, xbar = rls.layer_inputs(model, x)`` in ``loss_fn``, then
  ``optimizer.update(model, grads, layer_inputs=xbar)``.

  Args:
    model_or_apply_fn: Linen: ``model.apply`` (or anything that forwards
      ``mutable=`` to it). NNX: the ``nnx.Module`` itself.
    *args: Linen: the variables, e.g. ``{'params': params}`` (an existing
      ``'rls_inputs'`` collection is ignored), then the model's positional
      inputs. NNX: the model's positional inputs.
    time_axes: ``T_L`` of a ``Dense`` (or ``Conv``) applied over time, as an
      output layer of sequence prediction is (eqs. 80-86): a mapping from the
      layer's path (``'output'``, ``'block/Dense_0'``, ``'layers/0'`` or a
      tuple of names) to the axis of its input that is time, e.g.
      ``{'output': 1}`` for inputs ``(batch, time, features)``. That layer's
      ``x̄`` is still the mean over batch and time, and its ``T`` becomes the
      length of that axis (else 1). A path that records no Dense / Conv
      input, or whose input has no such axis, is a ValueError naming it.
      `rls.layers.RNN` / `LSTM` and ``nnx.RNN`` set their own ``T``.
    samples: ``S > 0`` to also record, for `rls.second_moment`, up to ``S``
      input rows of every Dense (its input rows) and Conv (unfolded patches
      at sampled output positions, `input_samples.conv_sampled_patches`)
      layer: entries are then `rls.input_samples.LayerInputSamples`. 0 (the
      default): means only. `rls.layers.RNN` / `LSTM` record means only.
    **kwargs: keyword arguments of the model. Linen: if ``mutable`` is given
      the first result is ``(outputs, mutated_variables)``, as ``apply``
      returns. NNX: state the model changes (batch statistics, RNG counts)
      is written back to it, as a call would.

  Returns:
    ``(outputs, layer_inputs)``: ``layer_inputs`` is a nested dict that
    mirrors the params down to each recorded layer, whose entry is a
    `rls.LayerInput` ``(mean, steps)``: ``params['Dense_0']`` pairs with
    ``layer_inputs['Dense_0']``, ``params['LSTM_0']['input']`` with
    ``layer_inputs['LSTM_0']['input']``; for NNX, keys are those of
    ``nnx.state(model, nnx.Param)`` (attribute names, list indices), e.g.
    ``layer_inputs['layers'][0]``. Means are ``stop_gradient``-ed and
    exclude the bias 1.

  Raises:
    ValueError: bad ``time_axes`` or ``samples``; for NNX, a layer called
      inside a JAX transformation other than ``nnx.RNN`` within the model.
  """
  nnx = sys.modules.get("flax.nnx")  # Imported by whoever built an NNX model.
  if nnx is not None and isinstance(model_or_apply_fn, nnx.Module):
    # Imported here: `import rls` stays without flax.nnx.
    from rls import capture_nnx  # pylint: disable=g-import-not-at-top

    with capture.capture_options(time_axes, samples):
      return capture_nnx.run_and_record(model_or_apply_fn, *args, **kwargs)
  return capture.linen_layer_inputs(
    model_or_apply_fn, *args, time_axes=time_axes, samples=samples, **kwargs
  )


__all__ = ["layer_inputs"]
