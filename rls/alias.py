"""The complete RLS optimiser (plain, momentum and L1 variants) as optax chains.

References:
  Zhang et al., "Revisiting Recursive Least Squares for Training Deep Neural
  Networks", 2021: eq. (63) (plain update), (98) (L1), (99)-(100) (momentum).
"""

from __future__ import annotations

from typing import Any, NamedTuple
import warnings

import jax
import jax.numpy as jnp
import optax

from rls import hyperparameters
from rls import layerwise
from rls.damped_second_moment import scale_by_rls_damped_second_moment
from rls.transform import scale_by_rls

# The paper's gradient clip for its dense and convolutional networks (Section
# VI), `rls.rls`'s default: without it plain RLS diverges on small MLPs.
DEFAULT_CLIP_NORM = 5.0


class RLSDirectionState(NamedTuple):
  """State of `scale_by_rls_with_momentum_and_l1`.

  Attributes:
    rls: the state of the RLS form inside (`rls.ScaleByRLSState` holding
      every layer's ``P``, `rls.ScaleByRLSSquareRootState` holding ``S``, or
      `rls.ScaleByRLSSecondMomentState`).
    velocity: `optax.TraceState` (minus the paper's ``Ω``, eq. 99) when
      ``momentum`` is set, else `optax.EmptyState`.
  """

  rls: Any
  velocity: Any


def _check_momentum_and_l1(momentum, l1) -> None:
  """Checks untraced values (traced ones were checked when injected)."""
  if (
    momentum is not None
    and not isinstance(momentum, jax.core.Tracer)
    and not 0.0 <= float(momentum) < 1.0
  ):
    raise ValueError(
      f"momentum must be in [0, 1) (α of eq. 99), got {momentum!r}."
    )
  if (
    l1 is not None
    and not isinstance(l1, jax.core.Tracer)
    and not float(l1) >= 0.0
  ):
    raise ValueError(f"l1 must be >= 0 (γ of eq. 98), got {l1!r}.")


def _add_l1(direction, params, rls_state, l1):
  """``direction + γ P_s sgn(Θ)`` on RLS layers (eq. 98), in the direction's
  dtype."""
  signs = jax.tree.map(jnp.sign, params)
  penalty = layerwise.precondition_by(rls_state, signs)
  return jax.tree.map(
    lambda d, p: (d + jnp.asarray(l1, p.dtype) * p).astype(d.dtype),
    direction,
    penalty,
  )


def with_momentum_and_l1(
  preconditioner: optax.GradientTransformationExtraArgs,
  momentum: float | None = None,
  l1: float | None = None,
) -> optax.GradientTransformationExtraArgs:
  r"""The paper's momentum and L1 options around any RLS form.

  With ``g_s`` the direction of `preconditioner` (any of
  `rls.scale_by_rls`, `rls.scale_by_rls_conventional`,
  `rls.scale_by_rls_square_root`, `rls.scale_by_rls_second_moment`; for the
  paper ``g_s = (η/h_s) P_{s-1} ∇_{Θ_{s-1}}``, eq. 63), returns the
  direction ``d`` to be *subtracted* from the params:

  .. math::
    v_s = α v_{s-1} + g_s, \quad
    d_s = v_s + γ P_s \,\mathrm{sgn}(Θ_{s-1})

  so that ``Θ_s = Θ_{s-1} - d_s`` is eq. (100) with ``Ω_s = -v_s`` (eq. 99),
  and without momentum (``v_s = g_s``) eq. (98); without ``l1`` as well,
  eq. (63). The L1 term uses the *updated* ``P_s`` (read from the
  preconditioner's state, which is why this is one transform and not a
  chain) and the sign of the augmented ``[kernel; bias]``, and is applied to
  RLS layers only (other parameters, with ``passthrough=True``, get no L1
  term). It sits outside the momentum buffer, as in eq. (100).

  Args:
    preconditioner: an RLS transform whose state has
      ``times_inverse_correlation`` (every form's state does).
    momentum: ``α`` in [0, 1) (eq. 99; paper: 0.5), or None for no momentum
      buffer.
    l1: ``γ >= 0`` (eq. 98; paper: 1e-5 for FNN/CNN, 1e-6 for LSTM), or None
      for no L1 term. Needs ``params`` in update.

  Returns:
    An `optax.GradientTransformationExtraArgs` taking ``layer_inputs=``, whose
    state is a `RLSDirectionState`.

  References:
    Zhang et al., 2021, eqs. (63), (98), (99), (100).
  """
  _check_momentum_and_l1(momentum, l1)
  trace = (
    optax.trace(decay=momentum, nesterov=False)
    if momentum is not None
    else None
  )

  def init_fn(params):
    velocity = trace.init(params) if trace is not None else optax.EmptyState()
    return RLSDirectionState(preconditioner.init(params), velocity)

  def update_fn(updates, state, params=None, **extra_args):
    if l1 is not None and params is None:
      raise ValueError(
        "rls(l1=...) needs params in update(grads, state, "
        "params, layer_inputs=...): the L1 term uses sgn(Θ)."
      )
    direction, rls_state = preconditioner.update(
      updates, state.rls, params, **extra_args
    )
    velocity = state.velocity
    if trace is not None:
      direction, velocity = trace.update(direction, velocity, params)
    if l1 is not None:
      direction = _add_l1(direction, params, rls_state, l1)
    return direction, RLSDirectionState(rls_state, velocity)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def scale_by_rls_with_momentum_and_l1(
  forgetting_factor: float = 1.0,
  ratio: float = 0.1,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  momentum: float | None = None,
  l1: float | None = None,
  passthrough: bool = False,
  square_root: bool | None = None,
  input_statistics: str = "mean",
  second_moment_direction: str = "eq63",
) -> optax.GradientTransformationExtraArgs:
  """Deprecated (removed in 0.3.0): ``with_momentum_and_l1(scale_by_rls(
  ...), momentum, l1)``, which this is; the arguments are theirs.

  References:
    Zhang et al., 2021, eqs. (63), (98), (99), (100).
  """
  warnings.warn(
    "rls.scale_by_rls_with_momentum_and_l1 is deprecated and will be "
    "removed in 0.3.0: use rls.with_momentum_and_l1(rls.scale_by_rls(...), "
    "momentum, l1)",
    DeprecationWarning,
    stacklevel=2,
  )
  preconditioner = scale_by_rls(
    forgetting_factor=forgetting_factor,
    ratio=ratio,
    gradient_scale=gradient_scale,
    init_scale=init_scale,
    passthrough=passthrough,
    square_root=square_root,
    input_statistics=input_statistics,
    second_moment_direction=second_moment_direction,
  )
  return with_momentum_and_l1(preconditioner, momentum, l1)


def clipped(
  inner: optax.GradientTransformationExtraArgs, clip_norm: float | None
) -> optax.GradientTransformationExtraArgs:
  """`inner` applied to the gradient clipped by global norm `clip_norm`
  (`optax.clip_by_global_norm`, stateless), with `inner`'s own state, so
  that a chain's state has the same structure with and without the clip;
  `inner` itself when `clip_norm` is None."""
  if clip_norm is None:
    return inner
  hyperparameters.check_range("clip_norm", clip_norm)
  clip = optax.clip_by_global_norm(clip_norm)

  def update_fn(updates, state, params=None, **extra_args):
    updates, _ = clip.update(updates, clip.init(updates))
    return inner.update(updates, state, params, **extra_args)

  return optax.GradientTransformationExtraArgs(inner.init, update_fn)


def rls(
  learning_rate: optax.ScalarOrSchedule = 1.0,
  forgetting_factor: float = 1.0,
  ratio: float = 0.1,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  momentum: float | None = None,
  l1: float | None = None,
  *,
  clip_norm: float | None = DEFAULT_CLIP_NORM,
  passthrough: bool = False,
  square_root: bool | None = None,
  input_statistics: str = "mean",
  second_moment_direction: str = "eq63",
) -> optax.GradientTransformationExtraArgs:
  """The RLS optimiser of Zhang et al. (2021) as an optax chain, with the
  gradient clipping of the paper's experiments.

  ``optax.chain(clipped(with_momentum_and_l1(scale_by_rls(...), momentum,
  l1), clip_norm), optax.scale_by_learning_rate(learning_rate))``: the
  gradient is clipped by its global norm at ``clip_norm`` (the paper's
  experiments clip at 5.0 for dense and convolutional networks, 1.0 for
  LSTMs), then ``Θ_s = Θ_{s-1} - learning_rate · d_s`` with ``d_s`` the
  RLS direction with the paper's momentum and L1 (`with_momentum_and_l1`
  around the form `scale_by_rls` picks). ``clip_norm=None`` and
  ``learning_rate = 1`` (the default) is exactly the paper's update, eq.
  (63), (98) or (99)-(100). The paper has no separate learning rate (``η``
  plays that role); this one scales the whole step, L1 term included, like
  ``optax.add_decayed_weights`` before ``optax.scale_by_learning_rate``,
  and may be a schedule.

  Why the clip by default: with ``P_0 = I`` and ``λ = 1``, ``P`` is
  shrunk only along the minibatch means it has seen, so for many steps the
  direction is close to the raw gradient and plain RLS behaves like SGD at
  learning rate ``η = 1``: a 6-64-2 MLP (tanh or ReLU, batch 32) reaches
  NaN within 5-27 steps without it, in every form and at ``ratio=0.01``
  too, and trains with it (docs/concepts/rls_as_optax.md, "Safe
  defaults"; ``python -m experiments.studies.rls_default_stability``).
  With ``λ = 1`` and ``P_0 = I``, ``P ⪯ I``, so the clip bounds every step
  of the direction by ``η · clip_norm`` (a ``λ < 1`` lets ``P`` grow along
  directions the inputs do not excite, which no gradient clip bounds).

  Every ``update`` needs ``layer_inputs=`` (see `rls.layer_inputs`), and
  ``params`` when ``l1`` is set. Works under `optax.inject_hyperparams`
  (numeric arguments become injectable), inside `optax.multi_transform`
  (layers owned by another optimiser are masked out and do not count in the
  clip's norm; give it the whole ``layer_inputs`` tree, which
  `optax.multi_transform` forwards unchanged). The state is the same with
  and without the clip: ``state[0]`` is the direction's
  `RLSDirectionState`.

  Args:
    learning_rate: a global step size or schedule (1 in the paper).
    forgetting_factor: ``λ`` in (0, 1] (paper: 1).
    ratio: ``k > 0`` (paper: 0.1).
    gradient_scale: ``η``, a number or per-layer dict (paper: 1).
    init_scale: ``P_0 = init_scale · I`` (paper: 1).
    momentum: ``α`` of eq. (99) or None (paper: 0.5 when used).
    l1: ``γ`` of eq. (98) or None (paper: 1e-5 for FNN/CNN, 1e-6 for LSTM).
    clip_norm: the global norm (> 0) the gradient is clipped to before
      RLS, or None for no clip (the bare eq. 63). Default 5.0, the paper's
      value for its dense and convolutional networks (1.0 for its LSTMs).
      A chain that already clips at a smaller norm (``optax.chain(
      optax.clip_by_global_norm(1.0), rls.rls())``) is unchanged by it.
    passthrough: let parameters with no layer input (embeddings, norms)
      through with their raw gradient (times ``-learning_rate``) instead of
      raising a ValueError that names them.
    square_root: None (default): Potter's square-root form ``P = S Sᵀ``
      where ``P`` is narrower than float64 (float32), positive
      semi-definite by construction, and the paper's update of ``P`` where
      it is float64, decided in ``init`` from the params' dtypes; True or
      False forces one form (see `scale_by_rls`).
    input_statistics: ``'mean'`` (the paper) or ``'second_moment'`` (``P``
      from sampled input rows; `rls.second_moment`); see `scale_by_rls`.
    second_moment_direction: ``'eq63'`` or ``'updated'`` (second moment).

  Returns:
    An `optax.GradientTransformationExtraArgs`.

  Raises:
    ValueError: a hyper-parameter out of its range (named).

  References:
    Zhang et al., 2021, Algorithms 1 and 2, eqs. (63), (98)-(100); its
    Section VI for the clipping.
  """
  preconditioner = scale_by_rls(
    forgetting_factor=forgetting_factor,
    ratio=ratio,
    gradient_scale=gradient_scale,
    init_scale=init_scale,
    passthrough=passthrough,
    square_root=square_root,
    input_statistics=input_statistics,
    second_moment_direction=second_moment_direction,
  )
  direction = clipped(
    with_momentum_and_l1(preconditioner, momentum, l1), clip_norm
  )
  return optax.chain(direction, optax.scale_by_learning_rate(learning_rate))


def damped_rls_adam(
  learning_rate: float = 2e-3,
  *,
  rank: int | None = 16,
  damping: float = 16.0,
  decay: float = 0.9,
  update_every: int = 20,
  clip_norm: float | None = 5.0,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-8,
  passthrough: bool = False,
) -> optax.GradientTransformationExtraArgs:
  r"""RLS-DA: the damped, low-rank second-moment RLS direction, scaled by Adam.

  ``optax.chain(clip_by_global_norm(clip_norm),
  scale_by_rls_damped_second_moment(decay, damping, update_every=...,
  rank=...), scale_by_adam(b1, b2, eps), scale_by_learning_rate(lr))``:
  each layer's gradient is preconditioned on its input side by ``P =
  U diag(1/(s + δ)) Uᵀ + (I - U Uᵀ)/(ρ + δ)`` (``U``, ``s`` the top-``rank``
  eigenpairs of the running input second moment ``Â``, ``ρ`` the mean of the
  others, ``δ = damping · tr Â / n``), then normalised per coordinate by
  Adam. With a large ``damping`` ``P`` mostly shrinks the gradient along
  the dominant input directions (the mean input first: what the paper's
  RLS ``P`` does to the mean image), and Adam sets the step size. Layers
  with ``n <= rank`` keep the full ``P``.

  The defaults are one setting for the MNIST FNN and the CIFAR-10 small
  mini-VGG of the RLS paper (`docs/benchmarks/second_order.md`): below
  Adam's training loss at every epoch on both, at about 1.2x Adam's step
  time on the FNN.

  Inputs: as `scale_by_rls_damped_second_moment`, ``update(..., params,
  layer_inputs=...)`` with each layer's sampled rows
  (``rls.layer_inputs(apply_fn, variables, x, samples=S)``).

  Args:
    learning_rate: Adam's step size (> 0; a schedule is accepted).
    rank: the rank of ``P``'s eigen-part (int >= 1), None for the full
      ``n x n`` inverse.
    damping: ``γ > 0``, relative to the mean eigenvalue ``tr Â / n``.
    decay: ``β`` in (0, 1) of the running second moment.
    update_every: steps between refreshes of ``Â`` and ``P`` (int >= 1).
    clip_norm: the global-norm clip applied first (the paper's 5), None
      for none.
    b1, b2, eps: Adam's.
    passthrough: let parameters without a layer input through the RLS
      stage unchanged (Adam still scales them).

  Returns:
    An `optax.GradientTransformationExtraArgs`.

  Raises:
    ValueError: a hyper-parameter out of its range (named).

  References:
    Zhang et al., "Revisiting Recursive Least Squares for Training Deep
    Neural Networks", 2021; Martens & Grosse, "Optimizing Neural Networks
    with Kronecker-factored Approximate Curvature", 2015 (the damped running
    activation factor); Kingma & Ba, "Adam", 2015.
  """
  if clip_norm is not None:
    hyperparameters.check_range("clip_norm", clip_norm)
  stages = [] if clip_norm is None else [optax.clip_by_global_norm(clip_norm)]
  stages += [
    scale_by_rls_damped_second_moment(
      decay=decay,
      damping=damping,
      update_every=update_every,
      rank=rank,
      passthrough=passthrough,
    ),
    optax.scale_by_adam(b1=b1, b2=b2, eps=eps),
    optax.scale_by_learning_rate(learning_rate),
  ]
  return optax.chain(*stages)
