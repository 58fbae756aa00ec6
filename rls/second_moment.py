r"""RLS whose ``P`` accumulates the minibatch's full input second moment.

The paper's RLS (Zhang et al. 2021, `rls.scale_by_rls`) replaces each
minibatch's input second moment by a multiple of its mean's outer product,
eq. (33): ``(1/M) Xᵀ X ≈ k x̄ x̄ᵀ``. When minibatch means are nearly parallel
(MNIST), ``P`` then shrinks along the mean-input direction only and stays
``≈ P_0`` everywhere else, so RLS behaves like SGD at rate ``η/h``. This
transformation drops the approximation for ``P``: each layer's ``A = P⁻¹``
accumulates the second moment of ``S`` sampled input rows ``X`` (``S × n``, the
bias 1 appended as a last column, ``n = fan_in (+ 1)``),

.. math::
  A_s = λ A_{s-1} + \frac{c T}{S} X_sᵀ X_s,

which is eq. (27) (``c = 1``, ``S = M``, ``T = 1``: exact least squares) and,
for a single row ``X_s = x̄ᵀ`` with ``c = k``, eq. (35) (the paper's rank-one
recursion). Woodbury's identity (the paper's "Kailath variant", after eq. 28)
updates ``P`` with an ``S × S`` solve:

.. math::
  W = X P_{s-1},\quad R = \frac{λ S}{c T} I + W Xᵀ,\quad
  P_s = \frac{1}{λ}\big(P_{s-1} - Wᵀ R^{-1} W\big).

The transform keeps ``S`` with ``P = S Sᵀ`` and applies this update in
Andrews' square-root form (`second_moment_square_root_layer_step`), so ``P``
stays symmetric positive semi-definite in float32 on any input stream, where
the update of ``P`` itself (`second_moment_layer_step`, kept as the
reference) can lose definiteness once ``(c T / S) tr(X P Xᵀ)`` nears
``1/eps``, and its Cholesky factor then fails (NaN).

The direction keeps eq. (63)'s form, ``(η/h_s) P_{s-1} ∇_Θ``. Eq. (63)'s
``h = λ + k x̄ᵀ P x̄`` is ``λ + tr(P · k x̄ x̄ᵀ)``; replacing ``k x̄ x̄ᵀ`` by the
second moment it approximates (eq. 33) gives

.. math::
  h_s = λ + \frac{c T}{S} \operatorname{tr}(X P_{s-1} Xᵀ)
      = λ + c T \operatorname{tr}\Big(P_{s-1} \frac{X_sᵀ X_s}{S}\Big),

so for one row ``X_s = x̄ᵀ`` and ``c = k`` both the direction and ``P_s`` are
exactly `rls.conventional.rls_layer_step`'s. Like the paper's, ``h`` is one
number per layer: it damps the first steps (``P_{s-1}`` still ``≈ P_0``) and
tends to ``λ`` once ``P`` has absorbed the inputs, where the direction becomes
``η P_{s-1} ∇_Θ``, a damped Gauss-Newton step for the layer's linear least
squares (eq. 45) in every input direction the minibatches excite, not only
the mean's.

``direction='updated'`` uses ``η P_s ∇_Θ`` instead, eq. (63) before its last
approximation (under eqs. 33-34, ``P_s ∇ = P_{s-1} ∇ / h``; for ``c = 1`` the
exact block-RLS step of eq. 27). It does not reduce to the paper's update
for an arbitrary gradient, but each input direction gets its own shrinkage
instead of one ``h`` summed over all of them, which on MNIST trained much
better (`docs/benchmarks/rls_second_moment.md`). With ``λ = 1`` the accumulated
``P ≈ (c s Σ̄)⁻¹`` makes the step shrink like ``1/s``; ``λ < 1`` bounds that,
but ``λ^s P_0⁻¹`` then vanishes and nothing damps rarely excited
directions (``λ = 0.99`` diverged on MNIST, ``0.999`` did not).

Inputs: a layer's entry of ``layer_inputs`` must carry the sampled rows, as
`rls.input_samples.LayerInputSamples` (``rls.layer_inputs(..., samples=S)``) or any
entry with a ``samples`` attribute of shape ``(S, fan_in)`` (without the bias
1), or a bare ``(S, fan_in)`` array. An entry with a mean only (recurrent
layers, grouped convolutions, capture without ``samples=``) raises a
ValueError naming the layer.

Cost per layer and step: ``2 n² · out`` for ``S (Sᵀ ∇)`` (the paper's
``P ∇`` is ``n² · out``), about ``3 S n²`` multiply-adds for ``F``, ``S F``
and the correction, and ``S³`` for the Cholesky factor and two triangular
inverses.

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eqs. (27), (33), (35), (53)-(55), (63).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rls import hyperparameters
from rls import layer_tree
from rls import layerwise
from rls import small_linalg
from rls.small_linalg import cholesky_factor
from rls.small_linalg import inverse_cholesky_factor
from rls.small_linalg import lower_triangular_inverse

_HIGHEST = jax.lax.Precision.HIGHEST
DIRECTIONS = ("eq63", "updated")


class ScaleByRLSSecondMomentState(NamedTuple):
  """State of `scale_by_rls_second_moment`.

  Attributes:
    inverse_correlation_factor: ``S`` with ``P = S Sᵀ`` for every
      preconditioned layer, laid out as `rls.ScaleByRLSState`'s ``P`` (a
      nested dict mirroring the params down to the layer, each of shape
      ``(n, n)``, ``n = fan_in + 1`` with a bias). ``P`` is positive
      semi-definite by construction, whatever the rounding.
  """

  inverse_correlation_factor: Any

  @property
  def inverse_correlation(self) -> Any:
    """Every layer's ``P = S Sᵀ`` (formed, and symmetrised, on access)."""
    return jax.tree.map(
      small_linalg.factor_product, self.inverse_correlation_factor
    )

  def times_inverse_correlation(
    self, path: layer_tree.Path, matrix: jax.Array
  ) -> jax.Array:
    """``P M = S (Sᵀ M)`` for the layer at `path` (KeyError if none)."""
    s = layer_tree.nested_get(self.inverse_correlation_factor, path)
    return s @ (s.T @ matrix.astype(s.dtype))


def layer_samples_of(entry: Any) -> jax.Array | None:
  """The ``(S, fan_in)`` sampled input rows of a `layer_inputs` entry, or
  None when the entry holds a mean only."""
  samples = getattr(entry, "samples", None)
  if samples is not None:
    return samples
  if hasattr(entry, "shape") and len(entry.shape) == 2:
    return entry  # A bare (S, fan_in) array of rows.
  return None


def is_sample_entry(node: Any) -> bool:
  """Whether `node` is one layer's entry of `layer_inputs` (not a sub-tree):
  a `rls.LayerInput`, anything with ``samples``, or an array."""
  return hasattr(node, "samples") or layerwise.is_layer_input_entry(node)


def augmented_samples(
  layer: layer_tree.Layer, entry: Any, dtype
) -> tuple[jax.Array, jax.Array]:
  """``(X with a column of ones if the layer has a bias, T)``."""
  where = layer_tree.format_path(layer.path)
  samples = layer_samples_of(entry)
  if samples is None:
    raise ValueError(
      f"layer_inputs[{where!r}] has no sampled input rows, which the "
      "second-moment RLS needs (it holds only a mean). Capture them with "
      "rls.layer_inputs(..., samples=S); they are recorded for "
      "flax.linen.Dense, flax.linen.Conv (feature_group_count=1) and layers "
      "that pass samples= to rls.record_layer_input. Recurrent layers "
      "(rls.RNN, rls.LSTM) record means only: train them with "
      "rls.scale_by_rls through optax.multi_transform."
    )
  if jnp.ndim(samples) != 2 or jnp.shape(samples)[1] != layer.fan_in:
    raise ValueError(
      f"layer_inputs[{where!r}].samples has shape "
      f"{tuple(jnp.shape(samples))}; expected (S, {layer.fan_in}): S input "
      "rows of the layer without the bias 1, fan_in = "
      f"prod(kernel.shape[:-1]) for kernel shape "
      f"{tuple(layer.kernel.shape)}."
    )
  if jnp.shape(samples)[0] < 1:
    raise ValueError(
      f"layer_inputs[{where!r}].samples has no rows; the sample count S "
      "must be >= 1 (rls.layer_inputs(..., samples=S) with S >= 1)."
    )
  steps = getattr(entry, "steps", 1)
  layerwise.check_steps(layer, steps)
  rows = jnp.asarray(samples, dtype)
  if layer.bias is not None:
    rows = jnp.concatenate([rows, jnp.ones((rows.shape[0], 1), dtype)], 1)
  return rows, jnp.asarray(steps, dtype)


def second_moment_layer_step(
  p: jax.Array,
  rows: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  forgetting_factor,
  ratio,
  gradient_scale,
  direction: str = "eq63",
) -> tuple[jax.Array, jax.Array]:
  r"""One layer's update: ``(direction, P_s)`` from ``P = P_{s-1}``.

  With ``X = rows`` (``S × n``, bias column included), ``c = ratio``,
  ``T = steps``:

  .. math::
    W = X P,\quad h = λ + \frac{c T}{S}\operatorname{tr}(W Xᵀ),\quad
    \text{direction} = \frac{η}{h} P \nabla_Θ,\quad
    P_s = \frac{1}{λ}\Big(P - Wᵀ \big(\tfrac{λ S}{c T} I + W Xᵀ\big)^{-1}
    W\Big).

  ``P_s`` is the inverse of ``λ P^{-1} + (c T / S) Xᵀ X``; with ``S = 1``
  everything equals `rls.conventional.rls_layer_step`. With ``direction =
  'updated'`` the direction is ``η P_s ∇_Θ`` instead (no ``h``): what eq.
  (63) is before its last approximation (under eqs. 33-34, ``P_s ∇ =
  P_{s-1} ∇ / h``), and for ``c = 1`` the exact block-RLS step of eq. (27).
  Computed in ``P``'s dtype; ``P_s`` is symmetrised, since rounding in
  ``P - Vᵀ V`` is not.
  """
  dtype = p.dtype
  lam = jnp.asarray(forgetting_factor, dtype)
  c_t = jnp.asarray(ratio, dtype) * steps
  eta = jnp.asarray(gradient_scale, dtype)
  num_rows = rows.shape[0]
  # W and X P Xᵀ feed the recursion for P: full precision on GPU/TPU.
  w = jnp.matmul(rows, p, precision=_HIGHEST)  # X P (P is symmetric).
  gram = jnp.matmul(w, rows.T, precision=_HIGHEST)  # X P Xᵀ, S × S.
  h = lam + (c_t / num_rows) * jnp.trace(gram)
  old_p = p
  inner = (lam * num_rows / c_t) * jnp.eye(num_rows, dtype=dtype) + gram
  inverse_factor = inverse_cholesky_factor(0.5 * (inner + inner.T))
  v = jnp.matmul(inverse_factor, w, precision=_HIGHEST)  # L⁻¹ W.
  new_p = (p - jnp.matmul(v.T, v, precision=_HIGHEST)) / lam
  new_p = 0.5 * (new_p + new_p.T)
  if direction == "updated":
    return eta * (new_p @ grad), new_p
  return (eta / h) * (old_p @ grad), new_p  # Eq. (63) with P_{s-1}.


def second_moment_square_root_layer_step(
  factor: jax.Array,
  rows: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  forgetting_factor,
  ratio,
  gradient_scale,
  direction: str = "eq63",
) -> tuple[jax.Array, jax.Array]:
  r"""`second_moment_layer_step` on a square root ``S`` of ``P = S Sᵀ``:
  ``(direction, S_s)``.

  Andrews' block form of Potter's square-root update. With ``X = rows``
  (``N × n``, ``N`` sampled rows, bias column included), ``F = Sᵀ Xᵀ``,
  ``r² = λ N / (c T)``, ``M = r² I + Fᵀ F = L Lᵀ`` (Cholesky) and
  ``A = L^{-T} (L + r I)^{-1}``:

  .. math::
    S_s = rac{1}{\sqrt{λ}}ig(S - (S F) A Fᵀig),\qquad
    S_s S_sᵀ = rac{1}{λ}ig(P - P Xᵀ M^{-1} X Pig),

  the Woodbury update of `second_moment_layer_step`, because ``(I - F A
  Fᵀ)(I - F A Fᵀ)ᵀ = I - F M^{-1} Fᵀ``; for ``N = 1`` it is
  `rls.square_root.rls_square_root_layer_step`. Whatever the rounding (even
  in ``L``, whose pivots are kept ``>= r²``, their exact lower bound),
  ``P = S Sᵀ`` stays symmetric positive semi-definite. ``h = λ + (c T / N)
  ‖F‖²``; the direction is ``(η/h) S (Sᵀ ∇_Θ)`` (``'eq63'``) or ``η S_s
  (S_sᵀ ∇_Θ)`` (``'updated'``).
  """
  dtype = factor.dtype
  lam = jnp.asarray(forgetting_factor, dtype)
  c_t = jnp.asarray(ratio, dtype) * steps
  eta = jnp.asarray(gradient_scale, dtype)
  num_rows = rows.shape[0]
  # F and S F feed the recursion for S: full precision on GPU/TPU.
  f = jnp.matmul(factor.T, rows.T, precision=_HIGHEST)  # Sᵀ Xᵀ, n × N.
  p_rows = jnp.matmul(factor, f, precision=_HIGHEST)  # P Xᵀ, n × N.
  gram = jnp.matmul(f.T, f, precision=_HIGHEST)  # X P Xᵀ, N × N.
  h = lam + (c_t / num_rows) * jnp.sum(f * f)
  r_squared = lam * num_rows / c_t
  identity = jnp.eye(num_rows, dtype=dtype)
  lower = cholesky_factor(
    r_squared * identity + 0.5 * (gram + gram.T), min_pivot=r_squared
  )
  shifted_inverse = lower_triangular_inverse(
    lower + jnp.sqrt(r_squared) * identity
  )
  gain = jnp.matmul(
    lower_triangular_inverse(lower).T, shifted_inverse, precision=_HIGHEST
  )  # A = L⁻ᵀ (L + r I)⁻¹.
  correction = jnp.matmul(
    jnp.matmul(p_rows, gain, precision=_HIGHEST), f.T, precision=_HIGHEST
  )
  new_factor = (factor - correction) / jnp.sqrt(lam)
  if direction == "updated":
    return eta * (new_factor @ (new_factor.T @ grad)), new_factor
  return (eta / h) * (factor @ (factor.T @ grad)), new_factor  # Eq. (63).


def scale_by_rls_second_moment(
  forgetting_factor: float = 1.0,
  ratio: float = 1.0,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  passthrough: bool = False,
  preconditioner_dtype: Any | None = None,
  direction: str = "eq63",
) -> optax.GradientTransformationExtraArgs:
  r"""RLS preconditioning with ``P`` built from sampled layer-input rows.

  Zhang et al. (2021) approximate each minibatch's input second moment by
  ``k x̄ x̄ᵀ`` (eq. 33); this form keeps it: with ``X`` the ``S`` sampled
  input rows of a layer (bias column appended), ``P_s`` is the inverse of
  ``λ P_{s-1}^{-1} + (c T / S) Xᵀ X`` (eq. 27 for ``c = 1``), by Woodbury,

  .. math::
    h_s = λ + \frac{c T}{S}\operatorname{tr}(X P_{s-1} Xᵀ),\quad
    P_s = \frac{1}{λ}\Big(P_{s-1} - P_{s-1} Xᵀ \big(\tfrac{λ S}{c T} I
    + X P_{s-1} Xᵀ\big)^{-1} X P_{s-1}\Big),

  and the direction is eq. (63)'s ``(η/h_s) P_{s-1} ∇_Θ`` (or ``η P_s
  ∇_Θ``, ``direction='updated'``). For one row ``x̄`` and ``c = k`` this is
  the paper's update, eqs. (53)-(55), (63). The state keeps ``S`` with ``P =
  S Sᵀ``, updated in square-root form
  (`second_moment_square_root_layer_step`), so ``P`` stays symmetric positive
  semi-definite in float32 whatever the inputs.

  The contract is `rls.scale_by_rls`'s: ``update(updates, state, params=None,
  *, layer_inputs, **extra_args)`` returns the direction per layer, split
  back into kernel and bias (follow with a negative scaling to descend);
  masked-out layers (`optax.multi_transform`) are skipped; other parameters
  raise a ValueError naming them unless ``passthrough``. Each layer's entry
  of ``layer_inputs`` must carry its sampled rows (`rls.layer_inputs(...,
  samples=S)`, ``S >= 1``).

  Args:
    forgetting_factor: ``λ`` in (0, 1] (eq. 19).
    ratio: ``c > 0``, the weight of each minibatch's second moment
      ``Xᵀ X / S`` in ``P⁻¹``; 1 is the exact least squares of eq. (27),
      and with one row ``x̄`` it plays the paper's ``k`` (eq. 35).
    gradient_scale: ``η > 0``: one number, or a dict mirroring the params.
    init_scale: ``P_0 = init_scale · I``; ``1/(c · init_scale)`` is the
      damping of the accumulated second moment, and ``η · init_scale / h``
      the step size in input directions no minibatch has excited yet.
    passthrough: let parameters without a layer input through unchanged.
    preconditioner_dtype: floating dtype of ``S`` (default: the kernel's, at
      least float32).
    direction: ``'eq63'``, ``(η/h_s) P_{s-1} ∇`` (reduces to the paper's
      RLS for one row), or ``'updated'``, ``η P_s ∇`` (see
      `second_moment_layer_step`).

  Returns:
    An `optax.GradientTransformationExtraArgs` whose state is a
    `ScaleByRLSSecondMomentState`.

  References:
    Zhang et al., 2021, eqs. (27), (33), (35), (53)-(55), (63).
  """
  hyperparameters.check_hyperparameters(
    forgetting_factor, ratio, gradient_scale, init_scale
  )
  hyperparameters.check_preconditioner_dtype(preconditioner_dtype)
  if direction not in DIRECTIONS:
    raise ValueError(
      f"direction must be one of {DIRECTIONS}, got {direction!r}."
    )

  def init_layer(layer):
    dtype = layerwise.matrix_dtype(layer, preconditioner_dtype)
    return layerwise.scaled_identity(
      layer, jnp.sqrt(jnp.asarray(init_scale, dtype)), dtype
    )

  def update_layer(factor, layer, entry, grad, eta):
    rows, steps = augmented_samples(layer, entry, factor.dtype)
    return second_moment_square_root_layer_step(
      factor, rows, steps, grad, forgetting_factor, ratio, eta, direction
    )

  return layerwise.layerwise_transform(
    ScaleByRLSSecondMomentState,
    init_layer,
    update_layer,
    is_entry=is_sample_entry,
    gradient_scale=gradient_scale,
    passthrough=passthrough,
  )
