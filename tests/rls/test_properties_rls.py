"""Property-based tests (hypothesis) for `rls.scale_by_rls` in float32.

Over long random input streams, every layer's inverse autocorrelation ``P``
must stay symmetric positive definite: symmetric to a relative tolerance and
with its smallest eigenvalue (float64 `eigvalsh` of the float32 ``P``) > 0 at
every step, and the preconditioned updates finite.

The streams are valid RLS inputs: ``x̄`` is Gaussian with a random offset
(like the positive mean of post-ReLU activations, which makes the bias column
nearly collinear with the inputs), so every direction keeps being excited.
Drawn: forgetting factor λ in [0.9, 1] (1 included), ratio k in [1e-3, 10],
init scale in [1e-2, 1e2], ``T`` (the recurrent-layer step count) in 1..50,
and the input scale through the conditioning budget
``b = k T init_scale E||x||^2`` in [1e-4, 1e6] (x with the bias 1), which is
the size of ``k T xᵀ P_0 x`` at the first step. Two layers: one with a bias
(fan_in 1..12) and one without (fan_in 1..6).

Why the bounds. With λ < 1 a direction the inputs stop exciting grows like
λ^-s (RLS wind-up, a property of the algorithm), so rank-deficient streams
are excluded. With ``b`` near or above 1/eps(float32) ~ 8e6 the
Sherman-Morrison downdate ``P - (kT/h) u uᵀ`` cancels catastrophically and
float32 ``P`` loses definiteness (observed from b ~ 1e8 on: an eigenvalue of
-0.3 while the largest is 1e-7, fan_in 12, λ = 1, k = 0.1); the budget
stops two decades below that. Float64 ``P`` (``preconditioner_dtype``) does
not have the problem, nor does the square-root form (``square_root=True``,
``P = S Sᵀ``), which the second property checks with the budget widened to
1e12 and the input offset to 100 (a bias column nearly collinear with the
inputs): ``S`` and the updates finite, ``P`` symmetric and positive
semi-definite in float64 to rounding at every step.

The last properties take every form on its default settings (the default
`rls.scale_by_rls`, which keeps float32 ``P`` in Potter's square-root form;
`rls.scale_by_rls_square_root`; `rls.scale_by_rls_second_moment` fed three
sampled rows a step) over the widened streams (budget up to 1e12, offset up
to 100): updates and state finite, ``P`` symmetric and its smallest
eigenvalue ``>= -1e-5 trace(P)`` at every step. The conventional form
(`rls.scale_by_rls_conventional`, the paper's arithmetic) fails them.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st
from hypothesis_profiles import property_tests
import jax
import jax.numpy as jnp
import numpy as np

import rls
from rls.layerwise import LayerInput

FAST_FAN_INS = ((1, 1), (5, 3), (12, 6))  # (with bias, without bias)
DEFAULT_STEPS = 2_000
THOROUGH_STEPS = 20_000
MAX_BUDGET_EXPONENT = 6  # b = k T init_scale E||x||^2 <= 1e6
SQUARE_ROOT_MAX_BUDGET_EXPONENT = 12
SQUARE_ROOT_MAX_OFFSET = 100.0
SYMMETRY_TOLERANCE = 1e-6  # relative to max |P_ij|; float32 eps is 1.2e-7


@st.composite
def rls_cases(
  draw,
  fast=False,
  num_steps=DEFAULT_STEPS,
  max_budget_exponent=MAX_BUDGET_EXPONENT,
  max_offset=3.0,
):
  if fast:
    fan_in_bias, fan_in_plain = draw(st.sampled_from(FAST_FAN_INS))
  else:
    fan_in_bias = draw(st.integers(1, 12))
    fan_in_plain = draw(st.integers(1, 6))
  case = dict(
    fan_in_bias=fan_in_bias,
    fan_in_plain=fan_in_plain,
    forgetting_factor=draw(st.one_of(st.just(1.0), st.floats(0.9, 1.0))),
    ratio=10.0 ** draw(st.floats(-3, 1)),
    init_scale=10.0 ** draw(st.floats(-2, 2)),
    steps=draw(st.integers(1, 50)),
    offset=draw(st.floats(0, max_offset)),
    seed=draw(st.integers(0, 2**32 - 1)),
    num_steps=num_steps,
  )
  budget = 10.0 ** draw(st.floats(-4, max_budget_exponent))
  # E||x||^2 <= input_scale^2 fan_in (1 + offset^2) + 1 for the bias layer.
  per_unit = (
    case["ratio"]
    * case["steps"]
    * case["init_scale"]
    * (fan_in_bias * (1 + case["offset"] ** 2) + 1)
  )
  case["input_scale"] = np.sqrt(budget / per_unit)
  return case


def _params(fan_in_bias, fan_in_plain, outputs=3):
  return {
    "Dense_0": {
      "kernel": jnp.zeros((fan_in_bias, outputs)),
      "bias": jnp.zeros((outputs,)),
    },
    "Dense_1": {"kernel": jnp.zeros((fan_in_plain, outputs))},
  }


@functools.partial(jax.jit, static_argnames="square_root")
def _run_stream(
  hyperparameters,
  params,
  inputs_bias,
  inputs_plain,
  grads,
  steps,
  square_root=False,
):
  """Scans `scale_by_rls(**hyperparameters).update` over the stream (traced
  hyper-parameters: one compilation per shape); returns every step's P's (or
  square roots S) and whether every step's updates are finite."""
  transform = rls.scale_by_rls(**hyperparameters, square_root=square_root)

  def step(state, xs):
    x_bias, x_plain, grad = xs
    layer_inputs = {"Dense_0": LayerInput(x_bias, steps), "Dense_1": x_plain}
    updates, state = transform.update(
      grad, state, params, layer_inputs=layer_inputs
    )
    finite = jnp.all(
      jnp.stack(
        [jnp.all(jnp.isfinite(u)) for u in jax.tree_util.tree_leaves(updates)]
      )
    )
    return state, (state[0], finite)

  _, (history, finite) = jax.lax.scan(
    step, transform.init(params), (inputs_bias, inputs_plain, grads)
  )
  return history, finite


def _stream_history(case, square_root=False):
  """Every step's P's (or S's) of a drawn float32 stream, and whether the
  updates stayed finite."""
  rng = np.random.default_rng(case["seed"])
  num_steps = case["num_steps"]
  scale = case["input_scale"]

  def stream(fan_in):
    offset = case["offset"] * rng.uniform(0, 1, size=fan_in)
    return ((rng.normal(size=(num_steps, fan_in)) + offset) * scale).astype(
      np.float32
    )

  params = _params(case["fan_in_bias"], case["fan_in_plain"])
  grads = jax.tree_util.tree_map(
    lambda p: jnp.asarray(rng.normal(size=(num_steps,) + p.shape), jnp.float32),
    params,
  )
  hyperparameters = {
    name: jnp.asarray(case[name], jnp.float32)
    for name in ("forgetting_factor", "ratio", "init_scale")
  }
  history, finite = jax.device_get(
    _run_stream(
      hyperparameters,
      params,
      stream(case["fan_in_bias"]),
      stream(case["fan_in_plain"]),
      grads,
      jnp.asarray(case["steps"], jnp.int32),
      square_root=square_root,
    )
  )
  assert np.all(finite), f"non-finite updates from step {np.argmin(finite)}"
  return history


@property_tests(
  rls_cases(fast=True),
  rls_cases(num_steps=THOROUGH_STEPS),
  max_examples=8,
  thorough_examples=100,
)
def check_inverse_correlation_stays_spd(case):
  """P stays symmetric positive definite over a long float32 stream."""
  assert jnp.asarray(0.0).dtype == jnp.float32
  history = _stream_history(case)
  for name, ps in history.items():
    assert ps.dtype == np.float32
    assert np.all(np.isfinite(ps)), f"{name}: non-finite P"
    magnitude = np.max(np.abs(ps), axis=(1, 2))
    asymmetry = np.max(np.abs(ps - np.swapaxes(ps, 1, 2)), axis=(1, 2))
    worst = np.argmax(asymmetry / magnitude)
    assert asymmetry[worst] <= SYMMETRY_TOLERANCE * magnitude[worst], (
      f"{name}: P not symmetric at step {worst}: {asymmetry[worst]:.3g} vs "
      f"max |P| {magnitude[worst]:.3g}"
    )
    ps64 = np.float64(ps)
    eigenvalues = np.linalg.eigvalsh((ps64 + np.swapaxes(ps64, 1, 2)) / 2)
    smallest = eigenvalues[:, 0]
    first_bad = np.argmax(smallest <= 0)
    assert np.all(smallest > 0), (
      f"{name}: P not positive definite at step {first_bad}: eigenvalues "
      f"{eigenvalues[first_bad]}"
    )


(
  test_rls_inverse_correlation_stays_spd,
  test_rls_inverse_correlation_stays_spd_thorough,
) = check_inverse_correlation_stays_spd


@property_tests(
  rls_cases(
    fast=True,
    max_budget_exponent=SQUARE_ROOT_MAX_BUDGET_EXPONENT,
    max_offset=SQUARE_ROOT_MAX_OFFSET,
  ),
  rls_cases(
    num_steps=THOROUGH_STEPS,
    max_budget_exponent=SQUARE_ROOT_MAX_BUDGET_EXPONENT,
    max_offset=SQUARE_ROOT_MAX_OFFSET,
  ),
  max_examples=8,
  thorough_examples=100,
)
def check_square_root_form_stays_psd(case):
  """With ``square_root=True``, ``P = S Sᵀ`` stays finite and positive
  semi-definite up to float64 rounding for budgets up to 1e12."""
  assert jnp.asarray(0.0).dtype == jnp.float32
  history = _stream_history(case, square_root=True)
  for name, factors in history.items():
    assert factors.dtype == np.float32
    assert np.all(np.isfinite(factors)), f"{name}: non-finite S"
    s64 = np.float64(factors)
    ps = s64 @ np.swapaxes(s64, 1, 2)
    eigenvalues = np.linalg.eigvalsh(ps)
    largest = np.abs(eigenvalues).max(axis=1)
    # S Sᵀ in float64 is PSD to its own rounding, ~1e-15 of the largest.
    worst = np.argmin(eigenvalues[:, 0] / largest)
    assert eigenvalues[worst, 0] >= -1e-12 * largest[worst], (
      f"{name}: S Sᵀ not PSD at step {worst}: {eigenvalues[worst]}"
    )


(test_square_root_form_stays_psd, test_square_root_form_stays_psd_thorough) = (
  check_square_root_form_stays_psd
)


# ----------------------------------------- every form, default settings

# name -> factory called with only the drawn λ, k, init_scale: the default
# `scale_by_rls` (Potter's form for float32 P), the square-root form and the
# second-moment form (fed S sampled rows).
DEFAULT_FORMS = {
  "scale_by_rls": rls.scale_by_rls,
  "scale_by_rls_square_root": rls.scale_by_rls_square_root,
  "scale_by_rls_second_moment": rls.scale_by_rls_second_moment,
}
PSD_TOLERANCE = 1e-5  # min eigenvalue >= -PSD_TOLERANCE * trace(P)
NUM_ROWS = 3  # sampled rows per step for the second-moment form


@functools.partial(jax.jit, static_argnames="form")
def _run_form(
  hyperparameters, params, rows_bias, rows_plain, grads, steps, form
):
  """Scans the form's update over the stream; every step's stored matrices
  (P, or S with P = S Sᵀ) and whether the updates stayed finite."""
  transform = DEFAULT_FORMS[form](**hyperparameters)

  def step(state, xs):
    x_bias, x_plain, grad = xs
    if form == "scale_by_rls_second_moment":
      layer_inputs = {
        "Dense_0": rls.input_samples.LayerInputSamples(
          jnp.mean(x_bias, 0), steps, x_bias
        ),
        "Dense_1": x_plain,
      }
    else:
      layer_inputs = {
        "Dense_0": LayerInput(jnp.mean(x_bias, 0), steps),
        "Dense_1": jnp.mean(x_plain, 0),
      }
    updates, state = transform.update(
      grad, state, params, layer_inputs=layer_inputs
    )
    finite = jnp.all(
      jnp.stack([jnp.all(jnp.isfinite(u)) for u in jax.tree.leaves(updates)])
    )
    return state, (state, finite)

  initial = transform.init(params)
  _, (history, finite) = jax.lax.scan(
    step, initial, (rows_bias, rows_plain, grads)
  )
  return history, finite


def _check_default_form_stays_psd(case, form):
  rng = np.random.default_rng(case["seed"])
  num_steps = case["num_steps"]

  def stream(fan_in):
    # A common offset per unit: rows nearly collinear with the bias column.
    offset = case["offset"] * rng.uniform(0, 1, size=fan_in)
    rows = rng.normal(size=(num_steps, NUM_ROWS, fan_in)) + offset
    return (rows * case["input_scale"]).astype(np.float32)

  params = _params(case["fan_in_bias"], case["fan_in_plain"])
  grads = jax.tree.map(
    lambda p: jnp.asarray(rng.normal(size=(num_steps,) + p.shape), jnp.float32),
    params,
  )
  hyperparameters = {
    name: jnp.asarray(case[name], jnp.float32)
    for name in ("forgetting_factor", "ratio", "init_scale")
  }
  states, finite = jax.device_get(
    _run_form(
      hyperparameters,
      params,
      stream(case["fan_in_bias"]),
      stream(case["fan_in_plain"]),
      grads,
      jnp.asarray(case["steps"], jnp.int32),
      form,
    )
  )
  assert np.all(finite), f"{form}: non-finite updates"
  field = states._fields[0]  # The state stores P, or S with P = S Sᵀ.
  for name, matrices in states[0].items():
    assert matrices.dtype == np.float32
    assert np.all(np.isfinite(matrices)), f"{form}, {name}: non-finite state"
    m64 = np.float64(matrices)
    transposed = np.swapaxes(m64, 1, 2)
    if field == "inverse_correlation_factor":
      ps = m64 @ transposed
    else:
      magnitude = np.max(np.abs(m64), axis=(1, 2))
      asymmetry = np.max(np.abs(m64 - transposed), axis=(1, 2))
      assert np.all(asymmetry <= SYMMETRY_TOLERANCE * magnitude), (
        f"{form}, {name}: P not symmetric"
      )
      ps = (m64 + transposed) / 2
    smallest = np.linalg.eigvalsh(ps)[:, 0]
    trace = np.trace(ps, axis1=1, axis2=2)
    worst = np.argmin(smallest / trace)
    assert smallest[worst] >= -PSD_TOLERANCE * trace[worst], (
      f"{form}, {name}: P not PSD at step {worst}: smallest eigenvalue "
      f"{smallest[worst]:.3g}, trace {trace[worst]:.3g}"
    )


def _default_form_cases(**kwargs):
  return rls_cases(
    max_budget_exponent=SQUARE_ROOT_MAX_BUDGET_EXPONENT,
    max_offset=SQUARE_ROOT_MAX_OFFSET,
    **kwargs,
  )


def _default_form_property(form):
  @property_tests(
    _default_form_cases(fast=True, num_steps=500),
    _default_form_cases(num_steps=THOROUGH_STEPS),
    max_examples=6,
    thorough_examples=50,
  )
  def check(case):
    """On default settings, in float32, for ``k T x̄ᵀ P x̄`` up to 1e12 and a
    nearly collinear bias column, P stays finite, symmetric and PSD."""
    assert jnp.asarray(0.0).dtype == jnp.float32
    _check_default_form_stays_psd(case, form)

  return check


(
  test_default_scale_by_rls_stays_psd,
  test_default_scale_by_rls_stays_psd_thorough,
) = _default_form_property("scale_by_rls")
(
  test_square_root_factory_stays_psd,
  test_square_root_factory_stays_psd_thorough,
) = _default_form_property("scale_by_rls_square_root")
(
  test_second_moment_stays_psd,
  test_second_moment_stays_psd_thorough,
) = _default_form_property("scale_by_rls_second_moment")
