"""Images as pixel sequences: sequential image classification, online.

An image of `H x W` pixels with `C` channels becomes a sequence of `L = H W`
steps in raster order (row-major: row 0 left to right, then row 1, ...); at
each step the network reads one pixel, its `C` channel values as a
`(C,)`-vector input. The image's class is predicted once, at its last pixel:
sequence classification, with a loss on 1 step of `L` (1024 for CIFAR-10,
whose images are `32 x 32 x 3`). This is sequential CIFAR-10 (sCIFAR) as in
the Long Range Arena and the LRU paper, trained online as in Zucchet et al.

Training streams (`stream_chunk`, jittable, sliced inside jit): `B` streams
read images side by side, all at the same pixel. Stream `b`'s `k`-th image is
the `(k B + b)`-th draw of the training set, where draws `e N .. (e + 1) N - 1`
are a random permutation of the `N` images (one permutation per epoch `e`,
from the run's key): every image is read once per epoch. Within a chunk of
`T` steps (`StepBatch` leaves time-major `(T, B, ...)`): `inputs` are the
normalised pixels `(T, B, C)`; `resets` is True exactly at each image's first
pixel (state and tangents start afresh for each image); `weights` is 1
exactly at each image's last pixel, 0 elsewhere; `targets` is the image's
label at every step (read only where the weight is 1).

Inputs are normalised per channel, `(x - mean) / std`, the statistics of the
training images computed once on the host (`channel_stats`), and the same
ones used for evaluation.

Evaluation (`evaluation_sums`, `evaluate`): accuracy and mean cross-entropy
at the last pixel over a set of images with frozen parameters, `lax.map`
over batches of images, each batch vmapped over its images and a
`lax.scan` over the `L` pixels from the cell's initial state.

Shapes: an `ImageSet` holds `pixels (N, L, C)` (stored as given, e.g. uint8,
so full CIFAR-10 takes 150 MB on the device, not 600), `labels (N,)` int32
and the per-channel `mean`, `std` `(C,)` in the pixels' units.

References:
  Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu, De, "Resurrecting
  Recurrent Neural Networks for Long Sequences", ICML 2023 (the LRU;
  sequential CIFAR-10 in its Long Range Arena results).
  Zucchet, Meier, Schug, Mujika, Sacramento, "Online learning of long-range
  dependencies", NeurIPS 2023 (online-trained LRU stacks on sCIFAR).
  Tay et al., "Long Range Arena: A Benchmark for Efficient Transformers",
  ICLR 2021 (the task's definition).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rtrl import readout as readouts
from rtrl import validation
from rtrl.online import StepBatch

NORMALIZATIONS = ("channel", "none")
# A channel whose values are all equal keeps std 1 (its inputs become 0).
_MIN_STD = 1e-8


class ImageSet(NamedTuple):
  """Images as pixel sequences (a pytree of arrays: a jit argument).

  Attributes:
    pixels: `(N, L, C)` raw pixel values in raster order, any real or
      integer dtype.
    labels: `(N,)` int32 class labels.
    mean: `(C,)` float, subtracted from every pixel's channels.
    std: `(C,)` float, divides them afterwards.
  """

  pixels: jax.Array
  labels: jax.Array
  mean: jax.Array
  std: jax.Array

  @property
  def num_images(self) -> int:
    return self.pixels.shape[0]

  @property
  def length(self) -> int:
    """`L`, the pixels (steps) per image."""
    return self.pixels.shape[1]

  @property
  def channels(self) -> int:
    """`C`, the input size."""
    return self.pixels.shape[2]


def channel_stats(
  images, normalization: str = "channel"
) -> tuple[np.ndarray, np.ndarray]:
  """`(mean, std)` per channel of `images` `(N, H, W, C)` (NumPy, float64),
  or zeros and ones for `normalization='none'`."""
  if normalization not in NORMALIZATIONS:
    raise ValueError(
      f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}"
    )
  images = np.asarray(images)
  channels = images.shape[-1]
  if normalization == "none":
    return np.zeros(channels), np.ones(channels)
  flat = images.reshape(-1, channels).astype(np.float64)
  std = flat.std(axis=0)
  return flat.mean(axis=0), np.where(std > _MIN_STD, std, 1.0)


def make_image_set(images, labels, mean, std) -> ImageSet:
  """An `ImageSet` of `images` `(N, H, W, C)` (NumPy, once; the dtype is
  kept) and their `(N,)` labels, normalised by `mean`, `std` `(C,)`."""
  images = np.asarray(images)
  labels = np.asarray(labels)
  if images.ndim != 4 or images.shape[0] < 1 or 0 in images.shape:
    raise ValueError(
      f"images must be a non-empty (N, H, W, C) array, got shape {images.shape}"
    )
  if labels.shape != images.shape[:1] or not np.issubdtype(
    labels.dtype, np.integer
  ):
    raise ValueError(
      f"labels must be ({images.shape[0]},) integers, one per "
      f"image, got {labels.dtype} {labels.shape}"
    )
  num, height, width, channels = images.shape
  if np.shape(mean) != (channels,) or np.shape(std) != (channels,):
    raise ValueError(
      f"mean and std must have shape ({channels},), got "
      f"{np.shape(mean)} and {np.shape(std)}"
    )
  dtype = jnp.asarray(0.0).dtype
  return ImageSet(
    pixels=jnp.asarray(images.reshape(num, height * width, channels)),
    labels=jnp.asarray(labels.astype(np.int32)),
    mean=jnp.asarray(mean, dtype),
    std=jnp.asarray(std, dtype),
  )


def normalize(images: ImageSet, pixels: jax.Array) -> jax.Array:
  """`(pixels - mean) / std` in the default float dtype; `pixels` `(..., C)`
  taken from `images.pixels`."""
  dtype = images.mean.dtype
  return (pixels.astype(dtype) - images.mean) / images.std


# -- training streams ---------------------------------------------------------


class StreamState(NamedTuple):
  """Where the `B` training streams are (every leaf the same for all
  streams, so none has a batch axis).

  Attributes:
    key: PRNG key of the per-epoch permutations.
    image_ordinal: () int32, `k`: every stream is reading its `k`-th image.
    pixel: () int32, the position in those images of the next step's pixel.
  """

  key: jax.Array
  image_ordinal: jax.Array
  pixel: jax.Array


def stream_init(key: jax.Array) -> StreamState:
  """Streams at the first pixel of their first images."""
  zero = jnp.zeros((), jnp.int32)
  return StreamState(key=key, image_ordinal=zero, pixel=zero)


def drawn_images(
  key: jax.Array, first_draw: jax.Array, num_draws: int, num_images: int
) -> jax.Array:
  """`(num_draws,)` image indices of draws `first_draw ..` (jittable;
  `num_draws`, `num_images` static): draw `d` is entry `d mod N` of the
  permutation of epoch `d // N`, keyed by `fold_in(key, epoch)`."""
  draws = first_draw + jnp.arange(num_draws)
  first_epoch = first_draw // num_images
  # The most epochs `num_draws` consecutive draws can touch (static), so only
  # those permutations are drawn.
  num_epochs = (num_draws - 1) // num_images + 2
  permutations = jax.vmap(
    lambda epoch: jax.random.permutation(
      jax.random.fold_in(key, epoch), num_images
    )
  )(first_epoch + jnp.arange(num_epochs))
  return permutations[draws // num_images - first_epoch, draws % num_images]


def stream_chunk(
  images: ImageSet, state: StreamState, batch_size: int, num_steps: int
) -> tuple[StreamState, StepBatch]:
  """The next `num_steps` steps of the `batch_size` streams (jittable;
  `batch_size`, `num_steps` static).

  Returns:
    `(state, StepBatch)`, time-major `(T, B, ...)`: inputs the normalised
    pixels `(T, B, C)`, targets the images' labels, weights 1 at each
    image's last pixel and 0 elsewhere, resets at each image's first pixel.
  """
  validation.positive_int("batch_size", batch_size)
  validation.positive_int("num_steps", num_steps)
  length = images.length
  position = state.pixel + jnp.arange(num_steps)  # (T,)
  image_offset = position // length  # 0, 0, ..., 1, ...
  pixel = position % length
  # Images touched by the chunk, at most (static): its first may be partly
  # read already.
  num_ordinals = (num_steps + length - 2) // length + 1
  indices = drawn_images(
    state.key,
    state.image_ordinal * batch_size,
    num_ordinals * batch_size,
    images.num_images,
  ).reshape(num_ordinals, batch_size)
  image = indices[image_offset]  # (T, B)
  inputs = normalize(images, images.pixels[image, pixel[:, None]])
  shape = image.shape
  batch = StepBatch(
    inputs=inputs,
    targets=images.labels[image],
    weights=jnp.broadcast_to(pixel[:, None] == length - 1, shape).astype(
      inputs.dtype
    ),
    resets=jnp.broadcast_to(pixel[:, None] == 0, shape),
  )
  end = state.pixel + num_steps
  return StreamState(
    key=state.key,
    image_ordinal=state.image_ordinal + end // length,
    pixel=(end % length).astype(jnp.int32),
  ), batch


# -- evaluation ---------------------------------------------------------------


def image_logits(cell, readout, params: dict, pixels: jax.Array) -> jax.Array:
  """The readout's prediction at the last pixel of one image, its
  normalised `pixels` `(L, C)` read from the cell's initial state."""

  def body(state, x):
    return cell.step(params["cell"], state, x), None

  state, _ = jax.lax.scan(body, cell.initial_state(), pixels)
  return readout.apply(params["readout"], cell.output(state))


def evaluation_sums(
  cell,
  params: dict,
  images: ImageSet,
  batch_size: int,
  readout: readouts.Readout | None = None,
) -> tuple[jax.Array, jax.Array, int]:
  """`(number correct, Σ cross-entropy (nats), number of images)` at the
  images' last pixels, frozen parameters (pure, jittable; `batch_size`
  static).

  Args:
    cell: the recurrent cell (a plain cell or an `rtrl.stack.StackedCell`).
    params: `{'cell': ..., 'readout': ...}`.
    images: the images to classify.
    batch_size: images evaluated at once (the last batch is padded with
      uncounted copies), bounding the memory.
    readout: the `rtrl.readout.Readout` of `params['readout']` (None:
      `readout.linear()`).
  """
  validation.positive_int("batch_size", batch_size)
  readout = readouts.linear() if readout is None else readout
  num = images.num_images
  num_batches = -(-num // batch_size)
  index = jnp.arange(num_batches * batch_size)
  counted = (index < num).reshape(num_batches, batch_size)
  index = jnp.minimum(index, num - 1).reshape(num_batches, batch_size)

  def batch_sums(batch):
    image, counts = batch
    pixels = normalize(images, images.pixels[image])  # (b, L, C)
    logits = jax.vmap(lambda x: image_logits(cell, readout, params, x))(pixels)
    labels = images.labels[image]
    correct = jnp.where(counts, jnp.argmax(logits, -1) == labels, False)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return correct.sum(), jnp.where(counts, losses, 0.0).sum()

  correct, losses = jax.lax.map(batch_sums, (index, counted))
  return correct.sum(), losses.sum(), num


def evaluate(
  cell,
  params: dict,
  images: ImageSet,
  batch_size: int,
  readout: readouts.Readout | None = None,
) -> dict:
  """`{'accuracy', 'loss'}` (host floats; loss: mean cross-entropy in nats)
  of `evaluation_sums`, jitted."""
  correct, loss, num = _jitted_sums(cell, params, images, batch_size, readout)
  return {"accuracy": float(correct) / num, "loss": float(loss) / num}


_jitted_sums = jax.jit(evaluation_sums, static_argnums=(0, 3, 4))
