r"""RLS with a damped running input second moment, refreshed every few steps.

The second-moment RLS (`rls.second_moment`) accumulates ``P⁻¹ = λ^s P_0⁻¹ +
c Σ λ^{s-i} X_iᵀ X_i / S``: its damping ``λ^s / P_0`` fades, so the first
steps (``P ≈ P_0``) and, with ``λ < 1``, rarely excited directions later get
steps of the size ``P_0`` allows, and ``λ``, ``P_0`` and ``c`` needed tuning
per task (`docs/benchmarks/rls_second_moment.md`). This form keeps the same
per-layer preconditioner of the input side only, but estimates and damps it
the way K-FAC does its activation factor (Martens & Grosse 2015, sections 5-6,
8; kfac-jax's ``estimation_frequency`` / ``inverse_update_period``):

.. math::
  A_s = β A_{s-1} + (1 - β)\,\frac{T}{S} X_sᵀ X_s,\quad
  Â_s = \frac{A_s}{1 - β^{s}},\quad
  P_s = \big(Â_s + γ\,\tfrac{\operatorname{tr} Â_s}{n} I\big)^{-1},

with ``X_s`` the ``S`` sampled input rows (bias column appended, ``n`` columns)
and the direction ``η P_s ∇_Θ``. The bias correction (Adam's, Kingma & Ba
2015) makes ``Â_1`` the first minibatch's own second moment, a warm start of
``P`` with no ``P_0``; the Tikhonov damping ``γ`` is relative to the mean
eigenvalue ``tr Â / n``, so it never fades and does not depend on the scale
of the layer's inputs (one ``γ`` for pixels and for conv features). ``A`` and
``P`` are refreshed every ``update_every`` steps (the first step always), ``P``
by a Cholesky factorisation; the steps between reuse ``P``.

With ``update_every = 1`` the first step equals `rls.second_moment`'s
``direction='updated'`` step with ``c = 1``, ``init_scale = λ / (γ tr Â_1 /
n)`` (both are ``η (X_1ᵀ X_1 / S + γ' I)⁻¹ ∇``); later steps differ by the
normalisation and the damping that stays.

Inputs: as `rls.second_moment`: each layer's entry of ``layer_inputs`` must
carry sampled rows (``rls.layer_inputs(..., samples=S)``).

Cost per layer and step: ``n² · out`` for ``P ∇`` (as the paper's RLS); every
``update_every`` steps ``S n²`` for ``Xᵀ X`` and ``n³/3`` for the Cholesky
factor and ``n³`` for the inverse.

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eqs. (27), (33), (63).
  Martens & Grosse, "Optimizing Neural Networks with Kronecker-factored
  Approximate Curvature", ICML 2015: the activation factor ``A``, its
  exponential average, Tikhonov damping and periodic inversion.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rls import hyperparameters
from rls import layer_tree
from rls import layerwise
from rls import second_moment

_HIGHEST = jax.lax.Precision.HIGHEST
# Subspace iterations of the low-rank form's first refresh (from a random
# basis); later refreshes start from the last basis.
FIRST_SUBSPACE_ITERATIONS = 4


class DampedLayerState(NamedTuple):
  """One layer's state in `ScaleByRLSDampedSecondMomentState`.

  Attributes:
    second_moment: ``A_s``, the running (not yet bias-corrected) input second
      moment, ``(n, n)``, ``n = fan_in (+ 1 with a bias)``.
    inverse_correlation: ``P``, the damped inverse of ``Â`` from the last
      refresh, ``(n, n)``; None in the low-rank form.
    step: steps taken (int32 scalar); ``A`` and ``P`` are refreshed when
      ``step % update_every == 0``.
    refreshes: refreshes so far (int32 scalar), for the bias correction.
    basis: the low-rank form's ``U`` ``(n, k)``, ``Â``'s top-``k``
      eigenvectors (orthonormal columns); None in the full form.
    gains: the low-rank form's ``1 / (s_i + δ) - 1 / δ`` ``(k,)`` for the
      eigenvalues ``s_i`` of ``Â`` along ``U``.
    floor: the low-rank form's ``1 / δ``, ``δ = γ tr Â / n``, so that
      ``P = floor I + U diag(gains) Uᵀ``.
  """

  second_moment: jax.Array
  inverse_correlation: jax.Array | None
  step: jax.Array
  refreshes: jax.Array
  basis: jax.Array | None = None
  gains: jax.Array | None = None
  floor: jax.Array | None = None

  @property
  def dtype(self):
    """The preconditioner's dtype (`rls.layerwise` reads it)."""
    return self.second_moment.dtype

  def times(self, matrix: jax.Array) -> jax.Array:
    """``P M`` (``2 n k`` per column in the low-rank form, ``n²`` else)."""
    matrix = matrix.astype(self.dtype)
    if self.basis is None:
      assert self.inverse_correlation is not None  # the full form
      return jnp.matmul(self.inverse_correlation, matrix, precision=_HIGHEST)
    assert self.gains is not None and self.floor is not None
    coordinates = jnp.matmul(self.basis.T, matrix, precision=_HIGHEST)
    return self.floor * matrix + jnp.matmul(
      self.basis, self.gains[:, None] * coordinates, precision=_HIGHEST
    )

  def dense(self) -> jax.Array:
    """``P`` as an ``(n, n)`` matrix."""
    if self.inverse_correlation is not None:
      return self.inverse_correlation
    return self.times(jnp.eye(self.second_moment.shape[0], dtype=self.dtype))


class ScaleByRLSDampedSecondMomentState(NamedTuple):
  """State of `scale_by_rls_damped_second_moment`.

  Attributes:
    layers: a nested dict mirroring the params down to each preconditioned
      layer, holding its `DampedLayerState`.
  """

  layers: Any

  @property
  def inverse_correlation(self) -> Any:
    """Every layer's ``P`` as a nested dict mirroring the params."""
    return jax.tree.map(
      lambda layer: layer.dense(),
      self.layers,
      is_leaf=lambda node: isinstance(node, DampedLayerState),
    )

  def times_inverse_correlation(
    self, path: layer_tree.Path, matrix: jax.Array
  ) -> jax.Array:
    """``P M`` for the layer at `path` (KeyError if none)."""
    return layer_tree.nested_get(self.layers, path).times(matrix)


def damped_inverse(second_moment_estimate: jax.Array, damping) -> jax.Array:
  """``(Â + γ (tr Â / n) I)⁻¹`` by a Cholesky factorisation.

  The mean eigenvalue is floored at the dtype's eps, so an all-zero input
  (a dead layer) gives ``P = I / (γ eps)`` instead of a NaN.
  """
  size = second_moment_estimate.shape[0]
  dtype = second_moment_estimate.dtype
  mean_eigenvalue = jnp.maximum(
    jnp.trace(second_moment_estimate) / size, jnp.finfo(dtype).eps
  )
  damped = 0.5 * (second_moment_estimate + second_moment_estimate.T)
  damped = damped + (damping * mean_eigenvalue) * jnp.eye(size, dtype=dtype)
  factor = jax.scipy.linalg.cho_factor(damped, lower=True)
  inverse = jax.scipy.linalg.cho_solve(factor, jnp.eye(size, dtype=dtype))
  return 0.5 * (inverse + inverse.T)


def low_rank_damped_inverse(
  second_moment_estimate: jax.Array,
  basis: jax.Array,
  damping,
  iterations,
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``(U, gains, floor)`` of ``P = floor I + U diag(gains) Uᵀ = (Â_k + δ
  I)⁻¹``, ``Â_k`` the rank-``k`` truncation of ``Â`` with its other ``n - k``
  eigenvalues replaced by their mean ``ρ = (tr Â - Σ s_i) / (n - k)``, and
  ``δ = γ tr Â / n``: ``floor = 1 / (ρ + δ)``, ``gains = 1 / (s + δ) -
  floor``.

  ``U`` comes from ``iterations`` (traced int >= 1) steps of subspace
  iteration on ``Â`` from ``basis`` (the last refresh's ``U``: ``Â`` moves
  little between refreshes) and a Rayleigh-Ritz step; the small
  eigendecomposition is an SVD of the ``k x k`` PSD matrix.
  """
  size = second_moment_estimate.shape[0]
  dtype = second_moment_estimate.dtype
  symmetric = 0.5 * (second_moment_estimate + second_moment_estimate.T)
  mean_eigenvalue = jnp.maximum(
    jnp.trace(symmetric) / size, jnp.finfo(dtype).eps
  )
  shift = damping * mean_eigenvalue

  def power_step(_, q):
    return jnp.linalg.qr(jnp.matmul(symmetric, q, precision=_HIGHEST))[0]

  q = jax.lax.fori_loop(0, iterations, power_step, basis)
  ritz = jnp.matmul(
    q.T, jnp.matmul(symmetric, q, precision=_HIGHEST), precision=_HIGHEST
  )
  vectors, values, _ = jnp.linalg.svd(0.5 * (ritz + ritz.T))
  # The other n - k eigenvalues of Â, as their mean (tr Â minus the kept).
  rest = jnp.maximum(jnp.trace(symmetric) - jnp.sum(values), 0) / max(
    size - q.shape[1], 1
  )
  floor = 1 / (rest + shift)
  gains = 1 / (values + shift) - floor
  return jnp.matmul(q, vectors, precision=_HIGHEST), gains, floor


def damped_layer_step(
  state: DampedLayerState,
  rows: jax.Array,
  steps: jax.Array,
  grad: jax.Array,
  decay,
  damping,
  gradient_scale,
  update_every: int,
  subspace_iterations: int = 1,
) -> tuple[jax.Array, DampedLayerState]:
  r"""One layer's ``(η P ∇_Θ, new state)``, refreshing ``A`` and ``P`` first
  when ``step % update_every == 0``.

  With ``X = rows`` (``S × n``, bias column included) and ``T = steps``:
  ``A ← β A + (1 - β) (T/S) Xᵀ X``, ``Â = A / (1 - β^u)`` after ``u``
  refreshes, ``P = (Â + γ (tr Â / n) I)⁻¹`` (in the low-rank form, a state
  with a ``basis``: `low_rank_damped_inverse`, ``subspace_iterations`` per
  refresh).
  """
  dtype = state.dtype
  beta = jnp.asarray(decay, dtype)

  def refresh(state):
    moment = jnp.matmul(rows.T, rows, precision=_HIGHEST) * (
      steps / rows.shape[0]
    )
    new_moment = beta * state.second_moment + (1 - beta) * moment
    refreshes = state.refreshes + 1
    estimate = new_moment / (1 - beta ** refreshes.astype(dtype))
    state = state._replace(second_moment=new_moment, refreshes=refreshes)
    if state.basis is None:
      return state._replace(
        inverse_correlation=damped_inverse(estimate, damping)
      )
    # The first refresh starts from a fixed random basis: more iterations.
    iterations = jnp.where(
      refreshes == 1,
      jnp.maximum(FIRST_SUBSPACE_ITERATIONS, subspace_iterations),
      subspace_iterations,
    ).astype(jnp.int32)
    basis, gains, floor = low_rank_damped_inverse(
      estimate, state.basis, damping, iterations
    )
    return state._replace(basis=basis, gains=gains, floor=floor)

  state = jax.lax.cond(
    state.step % update_every == 0, refresh, lambda s: s, state
  )
  direction = jnp.asarray(gradient_scale, dtype) * state.times(grad)
  return direction, state._replace(step=state.step + 1)


def _check_arguments(
  decay,
  damping,
  gradient_scale,
  update_every,
  rank,
  subspace_iterations,
  preconditioner_dtype,
) -> None:
  """`scale_by_rls_damped_second_moment`'s checks (its Raises)."""
  hyperparameters.check_range(
    "decay", decay, upper=1.0, hint=" It is β of the running average."
  )
  if not hyperparameters.is_traced(decay) and float(decay) >= 1.0:
    raise ValueError(
      f"decay must be in (0, 1), got {decay!r}: with 1 the running average "
      "never takes a minibatch in."
    )
  hyperparameters.check_range(
    "damping", damping, hint=" It is γ, relative to tr(Â)/n."
  )
  hyperparameters.check_gradient_scale(gradient_scale)
  if (
    isinstance(update_every, bool)
    or not isinstance(update_every, int)
    or update_every < 1
  ):
    raise ValueError(f"update_every must be an int >= 1, got {update_every!r}.")
  if rank is not None and (
    isinstance(rank, bool) or not isinstance(rank, int) or rank < 1
  ):
    raise ValueError(
      f"rank must be None or an int >= 1 (a shape: with "
      f"optax.inject_hyperparams, list it in static_args), got {rank!r}."
    )
  # An injected (traced) count is a loop bound as well.
  if not hyperparameters.is_traced(subspace_iterations) and (
    isinstance(subspace_iterations, bool)
    or int(subspace_iterations) != subspace_iterations
    or subspace_iterations < 1
  ):
    raise ValueError(
      f"subspace_iterations must be an int >= 1, got {subspace_iterations!r}."
    )
  hyperparameters.check_preconditioner_dtype(preconditioner_dtype)


def _initial_layer_state(
  layer, rank: int | None, preconditioner_dtype: Any | None
) -> DampedLayerState:
  """A layer's state before its first step: a zero `Â`, and `P = I` (full
  form) or a fixed random orthonormal `(n, rank)` basis (low rank, where
  `n > rank`)."""
  dtype = layerwise.matrix_dtype(layer, preconditioner_dtype)
  size = layer.augmented_size
  zeros = jnp.zeros((size, size), dtype)
  counters = dict(
    step=jnp.zeros((), jnp.int32), refreshes=jnp.zeros((), jnp.int32)
  )
  if rank is None or size <= rank:
    return DampedLayerState(zeros, jnp.eye(size, dtype=dtype), **counters)
  # A fixed random start (no key: the same for every run), refined by the
  # first refresh's subspace iterations.
  start = jax.random.normal(jax.random.PRNGKey(size), (size, rank), dtype)
  return DampedLayerState(
    zeros,
    None,
    basis=jnp.linalg.qr(start)[0],
    gains=jnp.zeros((rank,), dtype),
    floor=jnp.ones((), dtype),
    **counters,
  )


def scale_by_rls_damped_second_moment(
  decay: float = 0.95,
  damping: float = 0.1,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  update_every: int = 10,
  passthrough: bool = False,
  preconditioner_dtype: Any | None = None,
  rank: int | None = None,
  subspace_iterations: int = 1,
) -> optax.GradientTransformationExtraArgs:
  r"""RLS preconditioning by a damped running input second moment.

  Each layer's direction is ``η P ∇_Θ`` with ``P = (Â + γ (tr Â / n) I)⁻¹``
  and ``Â`` the bias-corrected exponential average (``β``) of the sampled
  input rows' second moment ``(T/S) Xᵀ X``: the second-moment RLS
  (`rls.second_moment`, Zhang et al. 2021 eq. 27 without eq. 33's rank-one
  approximation) with K-FAC's estimate of the activation factor (Martens &
  Grosse 2015: running average, Tikhonov damping, inverse refreshed every
  ``update_every`` steps by Cholesky). See the module docstring.

  The contract is `rls.scale_by_rls`'s: ``update(updates, state, params=None,
  *, layer_inputs, **extra_args)`` returns the direction per layer, split
  back into kernel and bias (follow with a negative scaling to descend);
  masked-out layers (`optax.multi_transform`) are skipped; other parameters
  raise a ValueError naming them unless ``passthrough``. Each layer's entry
  of ``layer_inputs`` must carry its sampled rows (`rls.layer_inputs(...,
  samples=S)`, ``S >= 1``).

  Args:
    decay: ``β`` in (0, 1): weight of the previous average at each refresh.
    damping: ``γ > 0``, the Tikhonov damping relative to the mean
      eigenvalue ``tr Â / n`` of the layer's input second moment.
    gradient_scale: ``η > 0``: one number, or a dict mirroring the params.
    update_every: refresh ``A`` and ``P`` every this many steps (int >= 1;
      the first step always refreshes).
    passthrough: let parameters without a layer input through unchanged.
    preconditioner_dtype: floating dtype of ``A`` and ``P`` (default: the
      kernel's, at least float32).
    rank: None (the full ``n x n`` ``P``), or an int ``k >= 1``: layers with
      ``n > k`` keep ``Â``'s top-``k`` eigendirections ``U`` (eigenvalues
      ``s``) and use ``P = U diag(1/(s + δ)) Uᵀ + (I - U Uᵀ)/(ρ + δ)``,
      ``ρ`` the mean of ``Â``'s other eigenvalues, applied in ``2 n k`` per
      output column instead of ``n²``. ``U`` is refreshed by warm-started
      subspace iteration (`low_rank_damped_inverse`).
    subspace_iterations: subspace-iteration steps per refresh of the
      low-rank form (int >= 1; the first refresh takes at least
      `FIRST_SUBSPACE_ITERATIONS`).

  Returns:
    An `optax.GradientTransformationExtraArgs` whose state is a
    `ScaleByRLSDampedSecondMomentState`.

  Raises:
    ValueError: for ``decay`` outside (0, 1), a non-positive ``damping`` or
      ``gradient_scale``, an ``update_every``, ``rank`` (unless None) or
      ``subspace_iterations`` that is not an int >= 1, or a non-floating
      ``preconditioner_dtype``.

  References:
    Zhang et al., 2021, eqs. (27), (33), (63); Martens & Grosse, 2015.
  """
  _check_arguments(
    decay,
    damping,
    gradient_scale,
    update_every,
    rank,
    subspace_iterations,
    preconditioner_dtype,
  )

  def init_layer(layer):
    return _initial_layer_state(layer, rank, preconditioner_dtype)

  def update_layer(state, layer, entry, grad, eta):
    rows, steps = second_moment.augmented_samples(layer, entry, state.dtype)
    return damped_layer_step(
      state,
      rows,
      steps,
      grad,
      decay,
      damping,
      eta,
      update_every,
      subspace_iterations,
    )

  return layerwise.layerwise_transform(
    ScaleByRLSDampedSecondMomentState,
    init_layer,
    update_layer,
    is_entry=second_moment.is_sample_entry,
    gradient_scale=gradient_scale,
    passthrough=passthrough,
  )
