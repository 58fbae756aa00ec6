"""`rls.rls()` with its defaults trains ordinary small networks.

The problems of `experiments/studies/rls_default_stability.py` (MLPs with
tanh and ReLU in Linen and NNX, unnormalised inputs, a classifier, a small
CNN, an LSTM), batch 32, two seeds, fewer steps than the study: no loss is
ever non-finite and the last tenth of the losses is well below the first
minibatch's. Without the clip the same MLPs reach NaN within 30 steps
(the reason for the default: docs/concepts/rls_as_optax.md, "Safe
defaults"), and an NNX model trains through `nnx.Optimizer` as the how-to
writes it.
"""

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments.studies import rls_default_stability as study
import rls

STEPS, SEEDS = 200, 2
# The last tenth's mean loss over the first, at most (the study's 1000-step
# values are 5-20x lower; these leave room for seeds and platforms).
BOUNDS = {
  "mlp_tanh": 0.6,
  "mlp_relu": 0.6,
  "nnx_mlp_relu": 0.6,
  "unnormalised_tanh": 0.9,
  "classifier_mse": 0.4,
  "cnn": 0.3,
  "lstm": 0.6,
}


def final_over_initial(losses: np.ndarray) -> np.ndarray:
  tail = losses.shape[1] // 10
  return losses[:, -tail:].mean(1) / losses[:, 0]


@pytest.mark.parametrize("problem", list(BOUNDS))
def test_the_default_trains_every_problem(problem):
  losses = study.train(study.PROBLEMS[problem], rls.rls(), SEEDS, STEPS)
  assert np.isfinite(losses).all(), problem
  assert (final_over_initial(losses) < BOUNDS[problem]).all(), (
    problem,
    final_over_initial(losses),
  )


@pytest.mark.parametrize(
  "options", [{"square_root": True}, {"ratio": 0.01}, {"momentum": 0.5}]
)
def test_the_clip_keeps_the_other_options_finite(options):
  losses = study.train(study.PROBLEMS["mlp_relu"], rls.rls(**options), 2, 100)
  assert np.isfinite(losses).all()
  assert (final_over_initial(losses) < 0.8).all()


@pytest.mark.parametrize("problem", ["mlp_tanh", "mlp_relu"])
def test_without_the_clip_plain_rls_diverges(problem):
  """The bare eq. (63) update (`clip_norm=None`): SGD at learning rate 1
  along every direction `P` has not absorbed."""
  losses = study.train(study.PROBLEMS[problem], rls.rls(clip_norm=None), 2, 40)
  assert not np.isfinite(losses[:, -1]).any()


def test_the_builtin_clip_is_the_chained_one():
  """`rls.rls(clip_norm=c)` == `optax.chain(optax.clip_by_global_norm(c),
  rls.rls(clip_norm=None))`, bit for bit, with the state structure of
  `rls.rls(clip_norm=None)`."""
  problem = study.PROBLEMS["mlp_relu"]
  built_in = study.train(problem, rls.rls(clip_norm=1.0, momentum=0.5), 1, 30)
  chained = study.train(
    problem,
    optax.chain(
      optax.clip_by_global_norm(1.0), rls.rls(clip_norm=None, momentum=0.5)
    ),
    1,
    30,
  )
  np.testing.assert_array_equal(built_in, chained)
  params = {"kernel": jnp.ones((3, 2)), "bias": jnp.ones(2)}
  assert jax.tree_util.tree_structure(
    rls.rls().init(params)
  ) == jax.tree_util.tree_structure(rls.rls(clip_norm=None).init(params))


def test_a_bad_clip_norm_is_named():
  with pytest.raises(ValueError, match="clip_norm must be in"):
    rls.rls(clip_norm=0.0)


def test_nnx_optimizer_with_the_default_trains():
  """The how-to's NNX loop: `nnx.Optimizer(model, rls.rls(),
  wrt=nnx.Param)` on the 6-64-2 ReLU MLP, batch 32."""
  x, y = study.regression_data()(jax.random.PRNGKey(0))
  model = study.NnxMLP("relu", rngs=nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, rls.rls(), wrt=nnx.Param)

  def loss_fn(model, x, y):
    outputs, xbar = rls.layer_inputs(model, x)
    return study.mse(outputs, y), xbar

  @nnx.jit
  def step(model, optimizer, x, y):
    (loss, xbar), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, x, y)
    optimizer.update(model, grads, layer_inputs=xbar)
    return loss

  starts = [(32 * i) % study.NUM_EXAMPLES for i in range(100)]
  losses = np.array(
    [
      float(step(model, optimizer, x[j : j + 32], y[j : j + 32]))
      for j in starts
    ]
  )
  assert np.isfinite(losses).all()
  assert losses[-10:].mean() < 0.6 * losses[0]
