"""`scale_by_rls`: the RLS preconditioner of Zhang et al. (2021), choosing
its form.

Three peer transforms implement RLS preconditioning, each over the per-layer
loop of `rls.layerwise`, each with its own state type:

* `rls.conventional.scale_by_rls_conventional` (`ScaleByRLSState`): the
  paper's update of ``P`` itself, eqs. (53)-(55), (63);
* `rls.square_root.scale_by_rls_square_root` (`ScaleByRLSSquareRootState`):
  the same recursion on ``S``, ``P = S Sᵀ`` (Potter), positive semi-definite
  in any precision;
* `rls.second_moment.scale_by_rls_second_moment`
  (`ScaleByRLSSecondMomentState`): ``P`` from sampled input rows instead of
  the mean (a rank-S Woodbury update).

`scale_by_rls` returns one of them from its options; by default the
conventional form where ``P`` is float64 and the square-root form where it is
narrower (float32), decided in ``init`` from the params' dtypes.

The names that used to live here (`LayerInput`, `ScaleByRLSState`,
`rls_layer_step`, `precondition_by`, ...) still read from here with a
`DeprecationWarning` naming their module; they are removed in 0.3.0.
"""

from __future__ import annotations

import importlib
from typing import Any
import warnings

import jax.numpy as jnp
import optax

from rls import conventional
from rls import hyperparameters
from rls import layer_tree
from rls import layerwise
from rls import square_root as square_root_lib
from rls.second_moment import scale_by_rls_second_moment

__all__ = [
  "needs_square_root",
  "scale_by_rls",
  "square_root_where_needed",
]

# The release that removes the names below from this module.
_REMOVED_IN = "0.3.0"
# Names that lived here before the forms became peer modules: where they
# live now. Read from here, they warn (`__getattr__`).
_MOVED = {
  "LayerInput": "layerwise",
  "ScalarOrTree": "hyperparameters",
  "ScaleByRLSSquareRootState": "square_root",
  "ScaleByRLSState": "conventional",
  "augment": "layerwise",
  "check_gradient_scale": "hyperparameters",
  "inverse_correlation": "layerwise",
  "is_layer_input_entry": "layerwise",
  "precondition_by": "layerwise",
  "rls_layer_step": "conventional",
  "rls_square_root_layer_step": "square_root",
  "scale_by_rls_conventional": "conventional",
  "scale_by_rls_square_root": "square_root",
  "split_augmented": "layerwise",
}


def __getattr__(name: str) -> Any:
  """A moved name, with a `DeprecationWarning` saying where it lives."""
  if name not in _MOVED:
    raise AttributeError(f"module 'rls.transform' has no attribute {name!r}")
  home = f"rls.{_MOVED[name]}"
  warnings.warn(
    f"rls.transform.{name} is deprecated and will be removed in "
    f"{_REMOVED_IN}: use {home}.{name}",
    DeprecationWarning,
    stacklevel=2,
  )
  return getattr(importlib.import_module(home), name)


INPUT_STATISTICS = ("mean", "second_moment")


def needs_square_root(params: Any, preconditioner_dtype: Any = None) -> bool:
  """Whether any layer's ``P`` would be narrower than float64.

  In float32 the conventional update loses positive definiteness once ``k T
  x̄ᵀ P x̄`` nears ``1/eps ≈ 8e6``; in float64 only past ``≈ 4e15``, out of
  reach of the paper's hyper-parameters.
  """
  layers, _, _ = layer_tree.scan_layers(params)
  return any(
    jnp.finfo(layerwise.matrix_dtype(layer, preconditioner_dtype)).bits < 64
    for layer in layers
  )


def square_root_where_needed(
  conventional: optax.GradientTransformationExtraArgs,
  square_root: optax.GradientTransformationExtraArgs,
  preconditioner_dtype: Any = None,
) -> optax.GradientTransformationExtraArgs:
  """`square_root` if some ``P`` is narrower than float64, else
  `conventional`: chosen in ``init`` from the params' (static) dtypes, and in
  ``update`` from the state's type."""

  def init_fn(params):
    if needs_square_root(params, preconditioner_dtype):
      return square_root.init(params)
    return conventional.init(params)

  def update_fn(updates, state, params=None, *, layer_inputs=None, **extra):
    form = (
      square_root
      if isinstance(state, square_root_lib.ScaleByRLSSquareRootState)
      else conventional
    )
    return form.update(
      updates, state, params, layer_inputs=layer_inputs, **extra
    )

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def scale_by_rls(
  forgetting_factor: float = 1.0,
  ratio: float = 0.1,
  gradient_scale: hyperparameters.ScalarOrTree = 1.0,
  init_scale: float = 1.0,
  passthrough: bool = False,
  preconditioner_dtype: Any | None = None,
  square_root: bool | None = None,
  input_statistics: str = "mean",
  second_moment_direction: str = "eq63",
) -> optax.GradientTransformationExtraArgs:
  r"""Preconditions each layer's gradient by its RLS inverse autocorrelation.

  Zhang et al. (2021), eqs. (53)-(55), (63): every layer with an entry ``x̄,
  T`` in ``layer_inputs`` gets the direction ``(η/h_s) P_{s-1} ∇_Θ`` and
  the update of its ``P``,

  .. math::
    u = P_{s-1} x,\quad h_s = λ + k T\, x^T u,\quad
    P_s = \frac{1}{λ}\Big(P_{s-1} - \frac{k T}{h_s} u u^T\Big),

  ``x = [x̄; 1]``, ``∇_Θ`` the loss gradient of ``Θ = [kernel.reshape(fan_in,
  out); bias]``, the direction split back into the kernel and bias shapes.
  Follow with a negative scaling (as `rls.rls` does) to descend.

  Which form runs it: ``input_statistics='second_moment'`` is
  `rls.scale_by_rls_second_moment`; otherwise ``square_root=True`` is
  `rls.scale_by_rls_square_root` (``P = S Sᵀ``), ``square_root=False`` is
  `rls.scale_by_rls_conventional` (``P`` itself, the paper's arithmetic), and
  the default ``square_root=None`` decides in ``init``: the conventional
  form when every ``P`` is float64 (the paper's update, to rounding), the
  square-root form when some ``P`` is narrower (float32, or bfloat16 params
  without ``preconditioner_dtype``), where the conventional ``P`` can lose
  positive definiteness and ``h`` its sign on ill-conditioned input streams
  (a nearly collinear bias column). The state type says which form ran.

  Parameters that are not the kernel or bias of a layer and layers with no
  entry in ``layer_inputs`` raise a ValueError naming them unless
  ``passthrough``; masked-out leaves (`optax.multi_transform`) are skipped.

  Args:
    forgetting_factor: ``λ`` in (0, 1] (eq. 19; paper: 1).
    ratio: ``k > 0``, the average-approximation ratio (eq. 33; paper: 0.1).
    gradient_scale: ``η > 0`` (eq. 47; paper: 1): one number, or a dict
      mirroring the params whose numbers apply to the layer / sub-tree at
      their path.
    init_scale: ``P_0 = init_scale · I`` (paper: 1).
    passthrough: let parameters without a layer input through unchanged
      instead of raising.
    preconditioner_dtype: floating dtype of ``P``; by default the kernel's
      dtype promoted to at least float32.
    square_root: True, False or None (the default: by ``P``'s dtype), see
      above.
    input_statistics: ``'mean'`` (the paper: ``P`` accumulates ``k x̄ x̄ᵀ``,
      eq. 33) or ``'second_moment'`` (``P`` accumulates ``(k T / S) Xᵀ X`` of
      ``S`` sampled input rows; `rls.scale_by_rls_second_moment`; capture
      with ``rls.layer_inputs(..., samples=S)``). Not combined with
      ``square_root=True``.
    second_moment_direction: with ``'second_moment'``, ``'eq63'`` (``(η/h)
      P_{s-1} ∇``) or ``'updated'`` (``η P_s ∇``); see `rls.second_moment`.

  Returns:
    An `optax.GradientTransformationExtraArgs` whose ``update(updates, state,
    params=None, *, layer_inputs, **extra_args)`` needs ``layer_inputs`` (from
    `rls.layer_inputs`); its state is a `ScaleByRLSState`,
    `ScaleByRLSSquareRootState` or `rls.ScaleByRLSSecondMomentState`.

  Raises:
    ValueError: an unknown ``input_statistics``, ``'second_moment'`` with
      ``square_root=True``, or a hyper-parameter out of range (named).

  References:
    Zhang et al., 2021, eqs. (51)-(55), (63), (72)-(75), (92)-(97).
  """
  if input_statistics not in INPUT_STATISTICS:
    raise ValueError(
      f"input_statistics must be one of {INPUT_STATISTICS}, got "
      f"{input_statistics!r}."
    )
  options: dict[str, Any] = dict(
    forgetting_factor=forgetting_factor,
    ratio=ratio,
    gradient_scale=gradient_scale,
    init_scale=init_scale,
    passthrough=passthrough,
    preconditioner_dtype=preconditioner_dtype,
  )
  if input_statistics == "second_moment":
    if square_root:
      raise ValueError(
        "square_root=True is not available with "
        "input_statistics='second_moment', which keeps the full P."
      )
    return scale_by_rls_second_moment(
      **options, direction=second_moment_direction
    )
  if square_root is None:
    return square_root_where_needed(
      conventional.scale_by_rls_conventional(**options),
      square_root_lib.scale_by_rls_square_root(**options),
      preconditioner_dtype,
    )
  if square_root:
    return square_root_lib.scale_by_rls_square_root(**options)
  return conventional.scale_by_rls_conventional(**options)
