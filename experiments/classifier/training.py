r"""One training step of a classifier: the losses, the optimiser of
`config.optimizer`, and forward, backward and update on one minibatch.

Optimisers, each after global-norm clipping (`config.clip_norm`, 0 = off):

* `rls`: RLS (`rls.rls`, with `config.momentum` = α and `config.l1` = γ) on
  every dense, conv and LSTM layer, the output layer included (full RLS:
  identity output, the MSE of eq. 57). An embedding table has no layer input
  (its input is a one-hot id), so it is trained by Adam
  (`config.embedding_learning_rate`) through `optax.multi_transform`.
* `rls_hybrid`: RLS on the hidden layers, Adam (`config.learning_rate`) on the
  output layer and the embedding; softmax cross-entropy.
* `adam`: Adam on everything.

Losses (`config.loss`): `mse` is eq. (57), ``||Z - Z*||_F^2 / (2M)`` with
one-hot targets (sum over outputs, mean over the batch); `mse_mean` is the
mean over all elements (``/ (M C)``, PyTorch's `MSELoss`, 2/C times eq. 57's);
`cross_entropy` is the batch-mean softmax cross-entropy.
"""

from __future__ import annotations

from collections.abc import Callable
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from experiments.classifier import models
from experiments.classifier import presets
import rls


def mse_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  """Eq. (57): ``||Z - Z*||_F^2 / (2M)`` with one-hot targets ``Z*``."""
  targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
  return 0.5 * jnp.mean(jnp.sum((outputs - targets) ** 2, axis=-1))


def mse_mean_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  """Mean over batch and outputs of ``(z - z*)^2`` (PyTorch's MSELoss)."""
  targets = jax.nn.one_hot(labels, outputs.shape[-1], dtype=outputs.dtype)
  return jnp.mean((outputs - targets) ** 2)


def cross_entropy_loss(outputs: jax.Array, labels: jax.Array) -> jax.Array:
  return jnp.mean(
    optax.softmax_cross_entropy_with_integer_labels(outputs, labels)
  )


LOSSES = {
  "mse": mse_loss,
  "mse_mean": mse_mean_loss,
  "cross_entropy": cross_entropy_loss,
}


def uses_layer_inputs(config) -> bool:
  """Whether the optimiser needs every layer's mean input ``x̄``."""
  return config.optimizer not in ("adam", "muon")


INPUT_STATISTICS = ("mean", "second_moment")


def input_samples(config) -> int:
  """Input rows to capture per layer: `config.input_samples` for the
  second-moment RLS, else 0 (means only)."""
  statistics = config.input_statistics
  if statistics not in INPUT_STATISTICS:
    raise ValueError(
      f"input_statistics={statistics!r}; expected one of {INPUT_STATISTICS}"
    )
  if statistics == "mean" or not uses_layer_inputs(config):
    return 0
  return int(config.input_samples)


def _rls_and_adam(config, rls_opt, learning_rate, output_rls_opt=None):
  """The optimiser of `config.optimizer` around `rls_opt`.

  The labels are functions of the params, so one construction serves every
  model: `models.optimizer_labels` sends a layer named `embedding` to Adam
  (`config.embedding_learning_rate`) and the `output` layer, in full RLS, to
  `output_rls_opt` (RLS with the output layer's η^L) and, in the hybrid, to
  Adam (`learning_rate`). Each layer's RLS state is its own, so splitting the
  layers between two RLS instances changes nothing but their η.
  """
  embedding_adam = optax.adam(config.embedding_learning_rate)
  if config.optimizer == "rls":
    return optax.multi_transform(
      {
        "rls": rls_opt,
        "rls_output": output_rls_opt or rls_opt,
        "embedding": embedding_adam,
      },
      models.optimizer_labels,
    )
  if config.optimizer == "rls_hybrid":
    return optax.multi_transform(
      {
        "rls": rls_opt,
        "adam": optax.adam(learning_rate),
        "embedding": embedding_adam,
      },
      functools.partial(models.optimizer_labels, hybrid=True),
    )
  if config.optimizer == "adam":
    return optax.adam(learning_rate)
  if config.optimizer == "muon":  # A second-order-style baseline.
    # Muon takes the matrices; its AdamW part (biases, conv kernels) keeps
    # Adam's usual rate, which diverged at Muon's.
    return optax.contrib.muon(
      learning_rate,
      adam_learning_rate=config.muon_adam_learning_rate,
    )
  raise ValueError(
    f"optimizer={config.optimizer!r}; expected one of {presets.OPTIMIZERS}"
  )


def make_optimizer(
  config, learning_rate=None, ratio=None, gradient_scale=None
) -> optax.GradientTransformationExtraArgs:
  """Clipping, then RLS (+ Adam for embeddings), the hybrid, or Adam.

  `learning_rate` (Adam), `ratio` (k) and `gradient_scale` (η) override the
  config's values; they may be traced (one run of a vmapped sweep). η scales
  the hidden layers; the output layer keeps `config.output_gradient_scale`
  (η^L = 1 in the paper, section III-D, eq. 63), also in an η sweep.
  """
  learning_rate = (
    config.learning_rate if learning_rate is None else learning_rate
  )

  def rls_with_scale(eta):
    return rls.rls(
      forgetting_factor=config.forgetting_factor,
      ratio=config.ratio if ratio is None else ratio,
      gradient_scale=eta,
      init_scale=config.init_scale,
      momentum=config.momentum,
      l1=config.l1,
      clip_norm=None,  # `config.clip_norm` clips the whole gradient first.
      square_root=config.square_root,
      input_statistics=("second_moment" if input_samples(config) else "mean"),
      second_moment_direction=config.second_moment_direction,
    )

  rls_opt = rls_with_scale(
    config.gradient_scale if gradient_scale is None else gradient_scale
  )
  output_rls_opt = rls_with_scale(config.output_gradient_scale)
  inner = _rls_and_adam(config, rls_opt, learning_rate, output_rls_opt)
  if config.clip_norm:
    return optax.chain(optax.clip_by_global_norm(config.clip_norm), inner)
  return optax.chain(inner)


def make_train_step(
  model: nn.Module,
  tx,
  loss_name: str,
  with_layer_inputs: bool,
  num_input_samples: int = 0,
) -> Callable:
  """`step(params, opt_state, inputs, labels) -> (params, opt_state, loss)`.

  Gradients and every layer's mean input ``x̄`` (and, with
  `num_input_samples`, that many input rows per layer: `input_samples`)
  come from one forward pass.
  """
  loss_fn = LOSSES[loss_name]

  def loss_and_inputs(params, inputs, labels):
    variables = {"params": params}
    if with_layer_inputs and hasattr(
      model, "nnx_module"
    ):  # nnx_models.NnxModel
      outputs, layer_inputs = rls.layer_inputs(
        model.nnx_module(params), inputs, samples=num_input_samples
      )
    elif with_layer_inputs:
      outputs, layer_inputs = rls.layer_inputs(
        model.apply, variables, inputs, samples=num_input_samples
      )
    else:
      outputs, layer_inputs = model.apply(variables, inputs), None
    return loss_fn(outputs, labels), layer_inputs

  def train_step(params, opt_state, inputs, labels):
    (loss, layer_inputs), grads = jax.value_and_grad(
      loss_and_inputs, has_aux=True
    )(params, inputs, labels)
    extra = {"layer_inputs": layer_inputs} if with_layer_inputs else {}
    updates, opt_state = tx.update(grads, opt_state, params, **extra)
    return optax.apply_updates(params, updates), opt_state, loss

  return train_step
