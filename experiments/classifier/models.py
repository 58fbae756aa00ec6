"""The RLS paper's three classifier networks (Zhang et al. 2021, section VI-A).

* `FNN`: MNIST, 784-512(ReLU)-10.
* `MiniVGG`: CIFAR-10, the first five conv layers of VGG-16 (3x3, 'SAME',
  ReLU): 64, 64, max-pool, 128, 128, max-pool, 256; then FC 1024 (ReLU) and
  FC 10. The paper does not say how the 8x8x256 maps of the fifth conv reach
  FC-1024. `pool_after_conv5=True` (our default) adds a third 2x2 max-pool,
  so FC-1024 sees 4x4x256 = 4,096 inputs; `False` flattens the 8x8x256 =
  16,384 maps. The paper's measured run time (RLS 1.4x Adam) points to the
  first: RLS's extra cost is dominated by the FC-1024 layer's ``P @ grad``,
  ``(fan_in+1)^2 * 1024`` multiply-adds per step, which is about 0.4x of the
  network's forward and backward FLOPs at 4,096 inputs but about 6x at 16,384
  (Table I). `conv_features` / `hidden_size` shrink the net for `small` runs.
* `SentimentLSTM`: IMDB, embedding, two stacked `rls.LSTM(512)`, and a
  2-unit output on the last step's hidden state. The embedding table has no
  layer input in the RLS sense (its "input" is a one-hot id), so experiments
  route its parameters to Adam with `optax.multi_transform` (labels from
  `optimizer_labels`); RLS preconditions the LSTMs (one ``P`` for the input
  and one for the recurrent matrix of each layer) and, in full RLS, the
  output layer.

Convolutions: `MiniVGG(conv_impl="patches")` (the default) computes each
3x3 'SAME' conv as one matrix product of explicitly unfolded patches (nine
shifted slices of the zero-padded input), with the same ``kernel (3, 3, in,
out)`` / ``bias`` params as ``nn.Conv``, and records its mean patch for RLS
itself. XLA:CPU's gradient-of-kernel convolution is extremely slow (we
measured a quarter-width mini-VGG step at ~17 s on 2 shared cores, Adam and
RLS alike); as matrix products the same step takes a fraction of a second.
`conv_impl="flax"` uses ``nn.Conv`` (captured by `rls.layer_inputs`'s
interceptor), the better choice on GPU.

Every output is identity (logits, or the regression outputs of eq. 57's MSE).
Layer names are fixed (`OUTPUT_LAYER`, `EMBEDDING`) because the hybrid
optimiser selects the output layer by name.
"""

from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

import rls

OUTPUT_LAYER = "output"
EMBEDDING = "embedding"
VGG_CONV_FEATURES = (64, 64, "pool", 128, 128, "pool", 256)


class FNN(nn.Module):
  """784-`hidden_size`(ReLU)-`num_classes`, identity output."""

  hidden_size: int = 512
  num_classes: int = 10

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """(batch, 784) -> (batch, num_classes)."""
    hidden = nn.relu(nn.Dense(self.hidden_size, name="hidden")(images))
    return nn.Dense(self.num_classes, name=OUTPUT_LAYER)(hidden)


class PatchConv3x3(nn.Module):
  """A 3x3, stride-1, 'SAME' convolution as one matmul over unfolded patches.

  Same params as ``nn.Conv(features, (3, 3))`` (``kernel (3, 3, in, out)``,
  ``bias (out,)``) and the same outputs; under `rls.layer_inputs` it records
  ``x̄`` = the mean over batch and positions of its zero-padded patches,
  flattened in the kernel's ``(kh, kw, in)`` row order (eq. 72).
  ``flat_kernel=True`` stores the kernel as the matmul reads it, ``(9 * in,
  out)``, so that graph matchers (kfac-jax's) see a dense layer repeated over
  positions.
  """

  features: int
  kernel_init: Any = nn.initializers.lecun_normal()
  bias_init: Any = nn.initializers.zeros_init()
  flat_kernel: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """(batch, h, w, in) -> (batch, h, w, features)."""
    in_features = x.shape[-1]
    kernel_shape = (3, 3, in_features, self.features)
    if self.flat_kernel:  # Stored as the matmul reads it: (9 * in, out).
      kernel_shape = (9 * in_features, self.features)
    kernel = self.param("kernel", self.kernel_init, kernel_shape)
    bias = self.param("bias", self.bias_init, (self.features,))
    height, width = x.shape[1:3]
    padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    patches = jnp.concatenate(
      [
        padded[:, i : i + height, j : j + width]
        for i in range(3)
        for j in range(3)
      ],
      axis=-1,
    )  # (b, h, w, 9 * in), (kh, kw, in) order
    flat_kernel = kernel.reshape(9 * in_features, self.features)
    outputs = patches @ flat_kernel.astype(x.dtype) + bias.astype(x.dtype)
    if rls.capture.is_capturing(self):
      # With layer_inputs(samples=S), also S patches for the second-moment
      # RLS, spread over examples and positions (`sample_rows`).
      num_samples = rls.capture.num_samples_wanted()
      rls.record_layer_input(
        self,
        jnp.mean(patches, axis=(0, 1, 2)),
        samples=(
          rls.input_samples.sample_rows(patches, num_samples)
          if num_samples
          else None
        ),
      )
    return outputs


class MiniVGG(nn.Module):
  """Conv stack, optional third pool, FC `hidden_size` (ReLU), FC 10.

  Attributes:
    conv_features: conv widths with "pool" for a 2x2 max-pool, in order
      (default VGG-16's first five convs).
    pool_after_conv5: a final 2x2 max-pool before the FC layer (see the
      module docstring).
    hidden_size: width of the hidden FC layer (paper 1024).
    num_classes: outputs.
    conv_impl: "patches" (`PatchConv3x3`), "patches_flat_kernel" (the same
      with ``(9 * in, out)`` kernels) or "flax" (``nn.Conv``).
  """

  conv_features: Sequence = VGG_CONV_FEATURES
  pool_after_conv5: bool = True
  hidden_size: int = 1024
  num_classes: int = 10
  conv_impl: str = "patches"

  @nn.compact
  def __call__(self, images: jax.Array) -> jax.Array:
    """(batch, 32, 32, 3) -> (batch, num_classes)."""
    x = images
    conv_index = 0
    for spec in self.conv_features:
      if spec == "pool":
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
      else:
        name = f"conv{conv_index}"
        if self.conv_impl in ("patches", "patches_flat_kernel"):
          flat = self.conv_impl == "patches_flat_kernel"
          conv = PatchConv3x3(int(spec), flat_kernel=flat, name=name)
        elif self.conv_impl == "flax":
          conv = nn.Conv(int(spec), (3, 3), padding="SAME", name=name)
        else:
          raise ValueError(
            f"conv_impl={self.conv_impl!r}; expected 'patches', "
            "'patches_flat_kernel' or 'flax'"
          )
        x = nn.relu(conv(x))
        conv_index += 1
    if self.pool_after_conv5:
      x = nn.max_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape(x.shape[0], -1)
    x = nn.relu(nn.Dense(self.hidden_size, name="hidden")(x))
    return nn.Dense(self.num_classes, name=OUTPUT_LAYER)(x)


class SentimentLSTM(nn.Module):
  """Embedding, `num_layers` stacked `rls.LSTM`, Dense on the last step.

  Attributes:
    vocab_size: rows of the embedding table (ids 0 = padding, 1 = OOV).
    embed_dim: embedding width (the paper does not give it).
    hidden_size: LSTM units per layer (paper 512).
    num_layers: stacked LSTM layers (paper 2).
    num_classes: outputs (2).
  """

  vocab_size: int = 20_000
  embed_dim: int = 128
  hidden_size: int = 512
  num_layers: int = 2
  num_classes: int = 2

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    """(batch, time) int ids -> (batch, num_classes)."""
    x = nn.Embed(self.vocab_size, self.embed_dim, name=EMBEDDING)(tokens)
    for i in range(self.num_layers):
      x = rls.LSTM(self.hidden_size, name=f"lstm{i}")(x)
    return nn.Dense(self.num_classes, name=OUTPUT_LAYER)(x[:, -1])


def optimizer_labels(params, hybrid: bool = False) -> dict:
  """`optax.multi_transform` labels for the top-level layers of `params`.

  'embedding' for the embedding table (always Adam: it has no RLS layer
  input); for the output layer 'adam' when `hybrid`, else 'rls_output' (RLS
  with the output layer's own η^L); 'rls' for the rest.
  """

  def label(name):
    if name == EMBEDDING:
      return "embedding"
    if name == OUTPUT_LAYER:
      return "adam" if hybrid else "rls_output"
    return "rls"

  return {
    name: jax.tree.map(lambda _, n=name: label(n), subtree)
    for name, subtree in params.items()
  }


PARAM_INITS = ("flax", "pytorch")


def pytorch_default_init(params: dict, key: jax.Array) -> dict:
  """`params` re-drawn as PyTorch's default initialisers would draw them.

  The RLS paper trains its networks from PyTorch's defaults (section VI):
  ``nn.Linear`` and ``nn.Conv2d`` weights and biases uniform on
  ``±1/sqrt(fan_in)`` (fan_in = inputs times kernel positions), ``nn.LSTM``
  every weight and bias uniform on ``±1/sqrt(hidden_size)``, ``nn.Embedding``
  standard normal. Flax's defaults (lecun_normal kernels, zero biases,
  orthogonal recurrent kernels) are what `model.init` gives.

  Args:
    params: a `FNN`, `MiniVGG` or `SentimentLSTM` params tree (top-level
      layers: Dense / conv ``{'kernel', 'bias'}``, `rls.LSTM` ``{'input',
      'recurrent'}``, embedding ``{'embedding'}``).
    key: PRNG key, split once per layer.

  Returns:
    A tree of the same structure, shapes and dtypes.
  """
  names = sorted(params)
  keys = dict(zip(names, jax.random.split(key, len(names))))

  def uniform(key, tree, bound):
    leaves, treedef = jax.tree.flatten(tree)
    subkeys = jax.random.split(key, len(leaves))
    return treedef.unflatten(
      [
        jax.random.uniform(k, leaf.shape, leaf.dtype, -bound, bound)
        for k, leaf in zip(subkeys, leaves)
      ]
    )

  out = {}
  for name in names:
    layer = params[name]
    if "recurrent" in layer and "input" in layer:
      hidden_size = layer["recurrent"]["kernel"].shape[0]
      out[name] = uniform(keys[name], layer, hidden_size**-0.5)
    elif "kernel" in layer:
      fan_in = math.prod(layer["kernel"].shape[:-1])
      out[name] = uniform(keys[name], layer, fan_in**-0.5)
    elif "embedding" in layer:
      table = layer["embedding"]
      out[name] = {
        "embedding": jax.random.normal(keys[name], table.shape, table.dtype)
      }
    else:
      raise ValueError(
        f"pytorch_default_init: layer {name!r} with params "
        f"{sorted(layer)} is not a Dense, conv, rls.LSTM or "
        "embedding layer."
      )
  return out
