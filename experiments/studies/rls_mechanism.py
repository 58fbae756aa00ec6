r"""Why plain RLS at the paper's defaults does not beat Adam on MNIST: the
spectrum of the hidden layer's ``P`` after each epoch.

  DATA_DIR=../shared/data python -m experiments.studies.rls_mechanism            # 3 epochs
  DATA_DIR=../shared/data python -m experiments.studies.rls_mechanism --epochs=1 --train_limit=10000

Trains the paper's FNN 784-512-10 with `configs/mnist.py:rls` (λ=1, k=0.1,
η=1, P0=I, MSE of eq. 57, clip 5, batch 128) through the classifier
experiment's own init and epoch (`experiments/classifier/experiment.py`),
and prints after each epoch: the training loss on the whole training set,
how many of the hidden layer's 785 eigenvalues of ``P`` lie below 0.5 and
0.99, their median and smallest, and for the training set's mean image
``x̄`` (bias 1 appended) the fraction ``x̄ᵀPx̄ / |x̄|²`` that ``P`` keeps
and ``h = λ + k x̄ᵀPx̄`` (eq. 55). ``P`` accumulates only ``k x̄_s x̄_sᵀ``
of minibatch means ``x̄_s`` (eq. 33), and MNIST's minibatch means are nearly
parallel, so ``P`` shrinks a handful of directions and stays the identity on
the rest: the step ``(η/h) P ∇`` is then plain gradient descent at learning
rate about η on eq. (57), with the mean-input direction projected out.
"""

from __future__ import annotations

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from experiments.classifier import experiment
from experiments.classifier import tasks
from experiments.loop import config_files
import rls

_EPOCHS = flags.DEFINE_integer("epochs", 3, "Epochs.")
_TRAIN_LIMIT = flags.DEFINE_integer(
  "train_limit", 0, "First N training images (0: all)."
)
_SEED = flags.DEFINE_integer("seed", 0, "Seed.")
_PRESET = flags.DEFINE_string("preset", "rls", "configs/mnist.py preset.")


def hidden_spectrum(state, mean_image: np.ndarray, ratio: float) -> dict:
  """Eigenvalue statistics of the hidden layer's ``P`` and what it keeps of
  the mean input."""
  rls_state = state["opt_state"][-1].inner_states["rls"].inner_state[0].rls
  p = np.asarray(rls.inverse_correlation(rls_state)["hidden"], np.float64)
  eigenvalues = np.linalg.eigvalsh((p + p.T) / 2)
  x = np.append(mean_image, 1.0)
  kept = float(x @ p @ x)
  return {
    "below_0.5": int(np.sum(eigenvalues < 0.5)),
    "below_0.99": int(np.sum(eigenvalues < 0.99)),
    "median": float(np.median(eigenvalues)),
    "smallest": float(eigenvalues[0]),
    "kept_fraction": kept / float(x @ x),
    "h": 1.0 + ratio * kept,
  }


def run(config, epochs: int) -> list[dict]:
  """Per-epoch training loss and the spectrum, from the experiment's own
  init, epoch and evaluation."""
  dataset = tasks.MNIST.read(config)
  arrays, preprocess = tasks.MNIST.arrays(config, dataset)
  data = {k: jnp.asarray(v) for k, v in arrays.items()}
  config = experiment.with_schedule(
    config, experiment.steps_per_epoch(config, data["train_inputs"].shape[0])
  )
  pieces = experiment.make_experiment(
    config,
    tasks.MNIST.make_model(config),
    data,
    "mnist",
    tasks.example_input(tasks.MNIST, config),
    preprocess,
  )
  state = pieces.init(jax.random.PRNGKey(config.seed), {})
  train_chunk = jax.jit(pieces.train_chunk)
  evaluate = jax.jit(pieces.evaluate)
  mean_image = np.asarray(arrays["train_inputs"], np.float64).mean(axis=0)
  rows = []
  for epoch in range(1, epochs + 1):
    state, _ = train_chunk(state, data)
    _, metrics = evaluate(state, data)
    row = {
      "epoch": epoch,
      "train_loss": float(metrics["train_eval_loss"]),
      **hidden_spectrum(state, mean_image, config.ratio),
    }
    print(
      "  ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in row.items()
      ),
      flush=True,
    )
    rows.append(row)
  return rows


def main(argv):
  del argv
  config = config_files.load_config(
    "mnist",
    _PRESET.value,
    train_limit=_TRAIN_LIMIT.value,
    seed=_SEED.value,
    eval_train_set=True,
  )
  print(
    f"MNIST FNN, {_PRESET.value}, seed {_SEED.value}, "
    f"train_limit {_TRAIN_LIMIT.value or 'all'}: the hidden layer's P "
    "(785 x 785)"
  )
  run(config, _EPOCHS.value)


if __name__ == "__main__":
  app.run(main)
