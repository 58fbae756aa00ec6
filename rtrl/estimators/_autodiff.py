"""Estimators for any cell by autodiff: exact RTRL, UORO and SnAp-1.

They work on the flattened state `s (d,)` and parameters `θ (p,)`
(`jax.flatten_util.ravel_pytree`) of the one-step map `s' = f(θ, s, x)`,
with `H = ∂f/∂s (d, d)` and `F = ∂f/∂θ (d, p)` from JAX's forward and
reverse mode: nothing to derive per cell, and no Lemma-1 structure assumed
(a `CustomCell`, or any other cell seen through its step,
`rtrl.cells.as_custom`). The estimators that rely on that structure
(`F = hhat ⊗ D`: KF, OK, KTP...) do not exist here.

    G' = H G + F                    exact RTRL, G (d, p)
    G ≈ u vᵀ,  sign trick           UORO, u (d,), v (p,)
    J' = (H J + F) ⊙ M              SnAp-1, J on the one-step pattern M

References:
  Williams & Zipser 1989 (RTRL). Tallec & Ollivier, "Unbiased Online
  Recurrent Optimization", ICLR 2018 (UORO). Menick et al., "Practical Real
  Time Recurrent Learning with a Sparse Approximation", ICLR 2021 (SnAp).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np

from rtrl import kronecker
from rtrl import linalg
from rtrl.cells.custom import CustomCell
from rtrl.cells.custom import as_custom
from rtrl.estimators import _sparsity as sparsity
from rtrl.estimators._base import Estimator
from rtrl.estimators._base import assemble


def _flat_step(cell: CustomCell, unravel_params, unravel_state, x):
  """`(θ (p,), s (d,)) -> s' (d,)`: the cell's step on flat vectors."""

  def flat_step(theta, s):
    return ravel_pytree(cell.step(unravel_params(theta), unravel_state(s), x))[
      0
    ]

  return flat_step


def _as_custom(cell) -> CustomCell:
  """`cell` as a `CustomCell` (any `rtrl.cells` cell is one through its
  step)."""
  if isinstance(cell, CustomCell):
    return cell
  if not all(hasattr(cell, a) for a in ("step", "init", "initial_state")):
    raise ValueError(
      f"cell must be an rtrl.cells cell (a CustomCell, a Cell or an LRU), "
      f"got {cell!r}"
    )
  return as_custom(cell)


def _build(
  name: str,
  cell: CustomCell,
  zeros: Callable,
  update: Callable,
  readout: Callable,
  layout: Callable = lambda params, state: None,
  random: bool = True,
):
  """The `Estimator` contract around three flat pieces (`base.assemble`).

  Args:
    zeros: `(layout, theta, s) -> tangent`, the tangent at a sequence start.
    update: `(layout, tangent, flat_step, theta, s, key) -> (tangent, s')`.
    readout: `(layout, tangent, g (d,)) -> dL/dθ (p,)`.
    layout: `(params, state) -> static data` the three share, from shapes.
    random: `update` reads its key (split at every step); False: it does
      not, and the key is kept.
  """

  def init_tangent(params, state):
    cell.check_params(params)
    cell.check_state(state)
    theta, s = ravel_pytree(params)[0], ravel_pytree(state)[0]
    return zeros(layout(params, state), theta, s)

  def advance(params):
    theta, unravel_params = ravel_pytree(params)

    def advance_fn(tangent, state, x, key):
      s, unravel_state = ravel_pytree(state)
      flat_step = _flat_step(cell, unravel_params, unravel_state, x)
      tangent, new_s = update(
        layout(params, state), tangent, flat_step, theta, s, key
      )
      return tangent, unravel_state(new_s)

    return advance_fn

  def gradient(params, tangent, dloss_dstate):
    unravel_params = ravel_pytree(params)[1]
    g = ravel_pytree(dloss_dstate)[0]
    return unravel_params(readout(layout(params, dloss_dstate), tangent, g))

  return assemble(
    name,
    f"autodiff_{name}",
    zeros=init_tangent,
    advance=advance,
    readout=gradient,
    splits_key=random,
  )


def autodiff_rtrl(cell) -> Estimator:
  """Exact RTRL (Williams & Zipser 1989) for any cell, by autodiff.

  `G' = H G + F` with the dense influence `G (d, p)` over the flat state
  `(d,)` and parameters `(p,)`, `H` and `F` from reverse mode: the gradient
  equals BPTT's. `make('rtrl', custom_cell)` builds it.

  Cost per example and step: memory `d p`, time `d` reverse passes plus
  `d² p` (for a cell of `n` units, `~ n^3` and `~ n^4`).

  Args:
    cell: a `CustomCell`, or any `rtrl.cells` cell (seen through its step,
      `rtrl.cells.as_custom`; a Lemma-1 cell is cheaper with `exact_rtrl`).

  Returns:
    The `Estimator` (`name='rtrl'`, `implementation='autodiff_rtrl'`).

  Raises:
    ValueError: not a cell.
  """
  cell = _as_custom(cell)

  def zeros(layout, theta, s):
    del layout
    return jnp.zeros((s.size, theta.size), jnp.result_type(theta, s))

  def update(layout, influence, flat_step, theta, s, key):
    del layout, key  # exact: no randomness
    # Reverse mode: the step has d outputs and p + d inputs, so d VJPs give
    # both F and H (forward mode would take p + d JVPs, and p >> d).
    (jac_theta, jac_s), new_s = jax.jacrev(
      lambda th, st: (flat_step(th, st),) * 2, argnums=(0, 1), has_aux=True
    )(theta, s)
    return linalg.matmul(jac_s, influence) + jac_theta, new_s

  def readout(layout, influence, g):
    del layout
    return linalg.matmul(g, influence)

  return _build("rtrl", cell, zeros, update, readout, random=False)


def autodiff_uoro(cell) -> Estimator:
  """UORO (Tallec & Ollivier, ICLR 2018) for any cell, by autodiff.

  `G ≈ u vᵀ` with `u (d,)`, `v (p,)`; `H u` by one JVP and `νᵀ F` by one
  VJP (no Jacobian is formed), mixed by the sign trick with norm balancing
  exactly as `rtrl.estimators.uoro` does for Lemma-1 cells. Unbiased.
  `make('uoro', cell)` builds it for a `CustomCell` or an `LRU`.

  Cost per example and step: memory `d + p`, time one JVP and one VJP of
  the step (a small multiple of the step).

  Args:
    cell: a `CustomCell`, or any `rtrl.cells` cell (through its step).

  Returns:
    The `Estimator` (`name='uoro'`, `implementation='autodiff_uoro'`).

  Raises:
    ValueError: not a cell.
  """
  cell = _as_custom(cell)

  def zeros(layout, theta, s):
    del layout
    dtype = jnp.result_type(theta, s)
    return jnp.zeros(s.shape, dtype), jnp.zeros(theta.shape, dtype)

  def update(layout, tangent, flat_step, theta, s, key):
    del layout
    state_vector, param_vector = tangent
    new_s, propagated = jax.jvp(
      lambda st: flat_step(theta, st), (s,), (state_vector.astype(s.dtype),)
    )
    sign_key, mix_key = jax.random.split(key)
    nu = jax.random.rademacher(sign_key, new_s.shape, dtype=new_s.dtype)
    nu_F = jax.vjp(lambda th: flat_step(th, s), theta)[1](nu)[0]
    mixed = kronecker.sign_trick_mix(
      propagated, param_vector, nu, nu_F, mix_key
    )
    return tuple(a.astype(b.dtype) for a, b in zip(mixed, tangent)), new_s

  def readout(layout, tangent, g):
    del layout
    state_vector, param_vector = tangent
    return jnp.vdot(g, state_vector) * param_vector

  return _build("uoro", cell, zeros, update, readout)


def _shape_key(tree):
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef, tuple((a.shape, jnp.dtype(a.dtype).name) for a in leaves)


def _concrete_zeros(tree):
  return jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), tree)


def autodiff_snap1(cell, pattern=None) -> Estimator:
  """SnAp-1 (Menick et al., ICLR 2021) for any cell, by autodiff.

  The influence kept on the pattern `M` of the one-step Jacobian `F`,
  `J' = (H J + F) ⊙ M`, stored compressed (`sparsity.layout`).
  `make('snap1', custom_cell)` builds it.

  Cost per example and step: memory `nnz(M)`, not `d p`; time one VJP per
  row colour for `F`'s entries on `M` (a single one when no parameter
  reaches two units) and the dense `H` by `d` JVPs, of which only the
  diagonal blocks
  on each group's rows are used: a generic step offers no cheaper way to
  them, where the Lemma-1 path reads them off the cell's structure. Exact
  at the first step after a reset (`J = F`), and at every step when `H`
  never carries a group's rows to others (e.g. a diagonal recurrence).

  Args:
    cell: a `CustomCell`, or any `rtrl.cells` cell (through its step).
    pattern: optional `(d, p)` bool `M` over the flat state and parameters
      (`ravel_pytree` order). By default it is read from `F` at a few random
      points when the estimator first sees the shapes
      (`sparsity.one_step_pattern`: exact zeros at every point are taken as
      structural, wrong for ReLU-like cells, which should pass it).

  Returns:
    The `Estimator` (`name='snap1'`, `implementation='autodiff_snap1'`).

  Raises:
    ValueError: not a cell; a `pattern` of the wrong shape (at `init`).
  """
  cell = _as_custom(cell)
  layouts = {}

  def layout(params, state):
    key = (_shape_key(params), _shape_key(state))
    if key not in layouts:
      layouts[key] = sparsity.layout(one_step_pattern(params, state))
    return layouts[key]

  def one_step_pattern(params, state):
    num_params = sum(a.size for a in jax.tree_util.tree_leaves(params))
    num_states = sum(a.size for a in jax.tree_util.tree_leaves(state))
    if pattern is not None:
      given = np.asarray(pattern)
      if given.shape != (num_states, num_params):
        raise ValueError(
          f"pattern must have shape (d, p) = ({num_states}, "
          f"{num_params}) for these params and state, got "
          f"{given.shape}"
        )
      return given.astype(bool)
    # Concrete even when first called inside a jit trace: only shapes come
    # from the arguments.
    with jax.ensure_compile_time_eval():
      theta, unravel_params = ravel_pytree(_concrete_zeros(params))
      s, unravel_state = ravel_pytree(_concrete_zeros(state))
      jacobian = jax.jit(
        lambda th, st, x: jax.jacrev(
          _flat_step(cell, unravel_params, unravel_state, x)
        )(th, st)
      )
      return sparsity.one_step_pattern(
        jacobian,
        num_params,
        num_states,
        cell.input_size(params),
        jnp.result_type(theta, s),
      )

  def zeros(layout, theta, s):
    dtype = jnp.result_type(theta, s)
    return tuple(
      jnp.zeros(b.rows.shape + b.cols.shape[-1:], dtype) for b in layout.buckets
    )

  def update(layout, blocks, flat_step, theta, s, key):
    del key  # deterministic
    new_s, vjp = jax.vjp(lambda th: flat_step(th, s), theta)
    coloured = jax.vmap(lambda c: vjp(c)[0])(
      jnp.asarray(layout.cotangents, new_s.dtype)
    )  # (C, p)
    jac_s = jax.jacfwd(lambda st: flat_step(theta, st))(s)  # (d, d)
    new_blocks = []
    for b, block in zip(layout.buckets, blocks):
      diagonal = jac_s[b.rows[:, :, None], b.rows[:, None, :]]  # (G, r, r)
      immediate = coloured[b.colours[:, :, None], b.cols[:, None, :]]
      new_blocks.append(
        jnp.einsum(
          "gij,gjm->gim", diagonal, block, precision=linalg.matmul_precision()
        )
        + immediate
      )
    return tuple(new_blocks), new_s

  def readout(layout, blocks, g):
    per_group = [
      jnp.einsum(
        "gr,grm->gm", g[b.rows], block, precision=linalg.matmul_precision()
      ).reshape(-1)
      for b, block in zip(layout.buckets, blocks)
    ]
    values = jnp.concatenate(per_group + [jnp.zeros((1,), g.dtype)])
    return values[layout.gather]

  return _build("snap1", cell, zeros, update, readout, layout, random=False)


__all__ = ["autodiff_rtrl", "autodiff_snap1", "autodiff_uoro"]
