"""The `Estimator` contract and the plumbing every estimator shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rtrl import linalg
from rtrl import routing as routing_lib
from rtrl.cells import Cell
from rtrl.cells import StepJacobians
from rtrl.routing import Routing


class Estimator(NamedTuple):
  """An RTRL-style gradient estimator: pure functions, optax style.

  Attributes:
    init: `(params, state, key) -> tstate`, per example; the PRNG key lives in
      `tstate`, split at every step by a random estimator (UORO, KF-RTRL,
      r-OK, KTP...) and kept as it is by a deterministic one (exact RTRL,
      SnAp-n, RFLO, r-B-OK, SK-RTRL: no threefry in their step).
    step: `params -> fn` with `fn(tstate, state, x) -> (tstate, state)`, the
      `(carry, x) -> carry` shape that goes into `lax.scan` and `vmap`.
      Where `folds_reset`, `fn(tstate, state, x, reset)` also takes the
      example's reset flag and drops the tangent's history within the step
      (equal to calling `reset` first, without a pass over the tangent).
    gradient: `(params, tstate, dloss_dstate) -> grads`, the estimate of
      `dL_t/dθ` at this step, with the structure of the cell's params.
    reset: `tstate -> tstate` with the tangent zeroed and the key kept (a new
      sequence starts; the trainer calls it where the reset mask is set).
    name: the registry name (`make`'s), for logs: 'rtrl' for every exact
      RTRL, whichever implementation.
    folds_reset: `step` takes the reset flag (the trainers then pass it
      instead of calling `reset`).
    batch_gradient: optional `(params, tstates, dloss_dstates) -> grads`,
      `gradient` summed over a batch (every argument but `params` with a
      leading batch axis), for estimators that can contract the batch
      inside their products instead of forming every example's gradient;
      None: `gradient` vmapped and summed (`rtrl.online.summed_gradient`).
    implementation: the factory that built it (`'exact_rtrl'`,
      `'autodiff_rtrl'`, `'diagonal_rtrl'`, `'ok'`, ...): which algorithm
      and code computes the estimate.
    routing: the speed choices it was built with (`rtrl.routing.Routing`),
      None for an estimator with no routed operation.
    metrics: optional `tstate -> dict[str, scalar]`, per example: what the
      estimator reports about its own state (SK-RTRL's `'certificate'`, a
      bound on its influence's error); None: nothing (every other
      estimator). vmap it over a batch of tangent states.
  """

  init: Callable[..., Any]
  step: Callable[..., Callable[..., Any]]
  gradient: Callable[..., Any]
  reset: Callable[..., Any]
  name: str
  folds_reset: bool = False
  batch_gradient: Callable[..., Any] | None = None
  implementation: str = ""
  routing: Routing | None = None
  metrics: Callable[..., dict[str, Any]] | None = None


class TangentState(NamedTuple):
  """Per-example estimator state: the (approximate) influence and a key."""

  tangent: Any
  key: jax.Array


def _zeros_like(tree: Any) -> Any:
  return jax.tree_util.tree_map(jnp.zeros_like, tree)


def assemble(
  name: str,
  implementation: str,
  *,
  zeros: Callable[[Any, Any], Any],
  advance: Callable[[Any], Callable[..., tuple[Any, Any]]],
  readout: Callable[[Any, Any, Any], Any],
  batch_readout: Callable[[Any, Any, Any], Any] | None = None,
  routing: Routing | None = None,
  folds_reset: bool = False,
  metrics: Callable[[Any], dict[str, Any]] | None = None,
  splits_key: bool = True,
) -> Estimator:
  """The `Estimator` contract around an estimator's tangent pieces: the one
  assembly every factory's estimator goes through (`build` for Lemma-1
  cells, the autodiff estimators', the LRU's).

  Args:
    name: registry name (`Estimator.name`).
    implementation: the factory's name (`Estimator.implementation`).
    zeros: `(params, state) -> tangent` at a sequence start (checking
      `params` and `state`).
    advance: `params -> fn(tangent, state, x, key[, reset]) -> (tangent,
      new_state)`, one step of the cell and its tangent (`reset` only where
      `folds_reset`); work that depends on `params` only goes before `fn`.
    readout: `(params, tangent, dloss_dstate) -> grads`, the cell params'
      gradient estimate.
    batch_readout: optional `(params, tangents, dloss_dstates) -> grads`,
      `readout` summed over a leading batch axis in fewer products
      (`Estimator.batch_gradient`).
    routing: the resolved speed choices (`Estimator.routing`), or None.
    folds_reset: `advance` takes the reset flag (`Estimator.folds_reset`).
    metrics: optional `tangent -> dict[str, scalar]` (`Estimator.metrics`).
    splits_key: split the tangent state's key at every step and give
      `advance` the new half; False (a deterministic estimator) keeps it
      and gives `advance` the kept key, which it does not read.
  """

  def init(params, state, key):
    return TangentState(tangent=zeros(params, state), key=key)

  def step(params):
    advance_fn = advance(params)

    def step_fn(tstate: TangentState, state, x, reset=None):
      key, subkey = (
        jax.random.split(tstate.key) if splits_key else (tstate.key,) * 2
      )
      folded = () if reset is None else (reset,)
      tangent, new_state = advance_fn(tstate.tangent, state, x, subkey, *folded)
      return TangentState(tangent=tangent, key=key), new_state

    return step_fn

  def gradient(params, tstate: TangentState, dloss_dstate):
    return readout(params, tstate.tangent, dloss_dstate)

  def batch_gradient(params, tstates: TangentState, dloss_dstates):
    assert batch_readout is not None  # only returned when given
    return batch_readout(params, tstates.tangent, dloss_dstates)

  def reset(tstate: TangentState) -> TangentState:
    return tstate._replace(tangent=_zeros_like(tstate.tangent))

  def metrics_fn(tstate: TangentState) -> dict[str, Any]:
    assert metrics is not None  # only returned when given
    return metrics(tstate.tangent)

  return Estimator(
    init=init,
    step=step,
    gradient=gradient,
    reset=reset,
    name=name,
    folds_reset=folds_reset,
    batch_gradient=batch_gradient if batch_readout is not None else None,
    implementation=implementation,
    routing=routing,
    metrics=metrics_fn if metrics is not None else None,
  )


# update(tangent, jac, key) -> tangent; all shapes per example.
TangentUpdate = Callable[[Any, StepJacobians, jax.Array], Any]
# readout(tangent, g (S, n)) -> dL/dW (P, K n)
TangentReadout = Callable[[Any, jax.Array], jax.Array]


def _drop_history(tangent, jac: StepJacobians, reset, forget):
  """`(tangent, jac)` at a folded reset: the tangent zeroed by a pass over
  it (no `forget`), or `H` (`jac.history`) and what `forget` names."""
  if forget is None:  # A pass over the tangent, as `reset` makes.
    return jax.tree_util.tree_map(
      lambda t: jnp.where(reset, jnp.zeros_like(t), t), tangent
    ), jac
  keep = jnp.logical_not(reset).astype(jac.D.dtype)
  return forget(tangent, keep), jac._replace(history=keep)


def build(
  name: str,
  cell: Cell,
  zeros: Callable[[dict], Any],
  update: TangentUpdate,
  readout: TangentReadout,
  *,
  implementation: str | None = None,
  routing: Routing | None = None,
  jacobians_once: bool = False,
  forget: Callable[[Any, jax.Array], Any] | None = None,
  batch_readout: Callable[[Any, jax.Array], jax.Array] | None = None,
  metrics: Callable[[Any], dict[str, Any]] | None = None,
  random: bool = True,
) -> Estimator:
  """A Lemma-1 estimator from its three per-estimator pieces (`assemble`
  with the cell's linearised step and `W`'s gradient layout).

  Args:
    name: registry name.
    cell: the recurrent cell.
    zeros: `params -> tangent` of zeros (the state at a sequence start).
    update: the tangent recursion of one step (`G_t ≈ H_t G_{t-1} + F_t`).
    readout: turns the tangent and `dL_t/dstate` rows into `dL_t/dW`.
    implementation: the factory's name (`Estimator.implementation`);
      None: `name`.
    routing: the speed choices (`Estimator.routing`); None:
      `Routing.auto()`, resolved here, when the estimator is built.
    jacobians_once: the update combines `D` and `dfds` element-wise with a
      tangent much larger than they are (SnAp-1, RFLO, UORO): where
      `routing.jacobians_once`, evaluate them once before `update`
      (`rtrl.linalg.computed_once`) rather than inside the tangent's loop
      (docs/benchmarks/routing.md; the Kronecker-sum family and exact RTRL
      gain nothing and are left as they are).
    forget: `(tangent, keep) -> tangent`, with `keep` 0 at a sequence start
      and 1 otherwise: what must be zeroed, besides `H` (the step's
      `jac.history`), for `update` to give exactly what it gives from a
      zero tangent (the small factors: a Kronecker sum's `u`, UORO's state
      vector; nothing for exact RTRL and SnAp-1, whose tangent is only ever
      multiplied by `H`). Given, the estimator `folds_reset`: a reset costs
      no pass over the large factors (what a pass costs:
      docs/benchmarks/routing.md).
    batch_readout: optional `(tangents, g rows (B, S, n)) -> dL/dW` summed
      over the batch (tangents with a leading batch axis), for a readout
      that contracts the batch inside one product rather than forming each
      example's `(P, K n)` gradient (the Estimator's `batch_gradient`).
    metrics: optional `tangent -> dict[str, scalar]` (per example), what
      the estimator reports about its tangent (`Estimator.metrics`, which
      takes the whole `TangentState`); None: nothing.
    random: `update` draws from its key (UORO, the Kronecker sums): the
      key is split at every step; False for a deterministic `update`,
      which is then given the state's key unsplit and must not read it
      (no threefry per step; `assemble`'s `splits_key`).
  """
  routing = routing_lib.resolve(routing)
  once = jacobians_once and routing.jacobians_once

  def init_tangent(params, state):
    del state  # tangents start at zero whatever the state
    cell.check_params(params)
    return zeros(params)

  def advance(params):
    def advance_fn(tangent, state, x, key, reset=None):
      new_state, jac = cell.linearized_step(params, state, x)
      if once:
        jac = jac._replace(
          D=linalg.computed_once(jac.D), dfds=linalg.computed_once(jac.dfds)
        )
      if reset is not None:
        tangent, jac = _drop_history(tangent, jac, reset, forget)
      return update(tangent, jac, key), new_state

    return advance_fn

  def gradient(params, tangent, dloss_dstate):
    del params
    rows = cell.state_to_rows(dloss_dstate)
    return {"W": cell.mask_gradient(readout(tangent, rows))}

  def batch_gradient(params, tangents, dloss_dstates):
    del params
    assert batch_readout is not None  # only used when given
    rows = jax.vmap(cell.state_to_rows)(dloss_dstates)
    return {"W": cell.mask_gradient(batch_readout(tangents, rows))}

  return assemble(
    name,
    name if implementation is None else implementation,
    zeros=init_tangent,
    advance=advance,
    readout=gradient,
    batch_readout=batch_gradient if batch_readout is not None else None,
    routing=routing,
    folds_reset=forget is not None,
    metrics=metrics,
    splits_key=random,
  )


def zeroed_where_reset(keep: jax.Array, *small: Any) -> tuple:
  """Each of `small` (arrays or trees) with every entry an exact +0 where
  `keep` is 0: the `forget` of estimators whose small factors must read as
  a fresh tangent's."""
  return tuple(
    jax.tree_util.tree_map(
      lambda a: jnp.where(keep > 0, a, jnp.zeros_like(a)), tree
    )
    for tree in small
  )


def forget_nothing(tangent: Any, keep: jax.Array) -> Any:
  """`forget` of an estimator whose tangent enters `update` only through
  `H` (exact RTRL, SnAp-1, RFLO): zero `H` is enough."""
  del keep
  return tangent


def sizes(cell: Cell, params: dict) -> tuple[int, int, int, int]:
  """`(P, K, S, n)` of the cell's influence matrix."""
  n = cell.hidden_size
  return params["W"].shape[0], cell.num_gates, cell.num_state_rows, n


LEMMA1_FORM = (
  "a cell in the Lemma-1 form (z = [x, h, 1] @ W followed by a per-unit "
  "map, as rtrl.cells.Cell subclasses are: RNN, RHN, LSTM, GRU)"
)
# What serves the other cell kinds, for the refusals below.
FOR_CUSTOM_CELLS = "autodiff_rtrl, autodiff_uoro or autodiff_snap1"
FOR_LRUS = "diagonal_rtrl (exact and element-wise) or autodiff_uoro"


def require_lemma1_cell(
  cell: Any,
  factory: str,
  *,
  custom_instead: str = FOR_CUSTOM_CELLS,
  lru_instead: str = FOR_LRUS,
) -> Cell:
  """`cell` if it is a Lemma-1 `Cell`, else a ValueError naming what serves
  it (`custom_instead` for a `CustomCell`, `lru_instead` for an `LRU`).

  Raises:
    ValueError: any other cell, saying which factory to use instead.
  """
  from rtrl.cells import LRU  # pylint: disable=g-import-not-at-top
  from rtrl.cells import CustomCell  # pylint: disable=g-import-not-at-top

  if isinstance(cell, Cell):
    return cell
  if isinstance(cell, CustomCell):
    raise ValueError(
      f"{factory} needs {LEMMA1_FORM}; for {cell!r} use {custom_instead} "
      f"(autodiff, any step function), or write the cell as a Cell subclass"
    )
  if isinstance(cell, LRU):
    raise ValueError(
      f"{factory} needs {LEMMA1_FORM}, which a complex diagonal recurrence "
      f"is not; for {cell!r} use {lru_instead}"
    )
  raise ValueError(f"{factory} needs {LEMMA1_FORM}, got {cell!r}")


__all__ = [
  "Estimator",
  "FOR_CUSTOM_CELLS",
  "FOR_LRUS",
  "LEMMA1_FORM",
  "TangentReadout",
  "TangentState",
  "TangentUpdate",
  "assemble",
  "build",
  "forget_nothing",
  "require_lemma1_cell",
  "sizes",
  "zeroed_where_reset",
]
