"""The MNIST FNN as an NNX module (``--config.model_api=nnx``).

`NnxFNN` is `models.FNN` written with ``flax.nnx``: layers ``hidden`` and
``output`` (`models.OUTPUT_LAYER`), so its ``nnx.state(model, nnx.Param)`` as
a pure dict has exactly the Linen params' structure, and the hybrid's labels,
`models.pytorch_default_init` and checkpoints apply unchanged. `NnxModel`
puts it behind the two calls the experiment makes of a Linen module
(``init(key, x)`` and ``apply({'params': params}, x)``); its `nnx_module`
gives the ``nnx.Module`` holding ``params`` that the training step hands to
``rls.layer_inputs(model, x)``, the NNX capture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flax import nnx
import jax


class NnxFNN(nnx.Module):
  """784-`hidden_size`(ReLU)-`num_classes`, identity output (`models.FNN`)."""

  def __init__(
    self, hidden_size: int = 512, num_classes: int = 10, *, rngs: nnx.Rngs
  ):
    self.hidden = nnx.Linear(784, hidden_size, rngs=rngs)
    self.output = nnx.Linear(hidden_size, num_classes, rngs=rngs)

  def __call__(self, images: jax.Array) -> jax.Array:
    """(batch, 784) -> (batch, num_classes)."""
    return self.output(nnx.relu(self.hidden(images)))


class NnxModel:
  """An NNX module built by ``make(rngs)``, with Linen's ``init``/``apply``
  over a pure-dict params tree (the module may hold only ``nnx.Param``s)."""

  def __init__(self, make: Callable[[nnx.Rngs], nnx.Module]):
    self.make = make

  def init(self, key: jax.Array, *unused_inputs) -> dict:
    """``{'params': params}``: the new module's params as a pure dict."""
    module = self.make(nnx.Rngs(key))
    return {"params": nnx.to_pure_dict(nnx.state(module, nnx.Param))}

  def nnx_module(self, params: Any) -> nnx.Module:
    """The ``nnx.Module`` whose params are ``params`` (jit-friendly)."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: self.make(nnx.Rngs(0))))
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state)

  def apply(self, variables: dict, *inputs) -> jax.Array:
    return self.nnx_module(variables["params"])(*inputs)
