"""The peers' own test cases run against our implementation
(`scripts/bench_peers.py --cases`), one function per peer, each run in that
peer's venv; each returns `[{'case', 'passed', 'detail'}]`. sketched-rtrl's
are in `peers_sketched_rtrl_cases.py` (its test file runs as written).

- snapjax (no licence: its test module is imported from the snapshot and
  run, never copied): `tests/snap_test.py::test_snap_n_masks` with its
  two mask builders replaced by `OurSnapMask`, the pattern our SnAp-n keeps
  (`rtrl.cells.recurrent_mask.reachability`, what `estimators.snap`
  builds its kept pairs from), in its layout.
- jax_rtrl: `test_jax_rtrl/test_ctrnn.py`'s cases restated on our
  `LeakyRNN` (its CTRNN with one tau for every unit; the test draws a tau
  per unit, which our cell does not have), 5 units, 3 inputs, 10 steps, MSE
  to a fixed target, its tolerance (atol 1e-5): one step, exact RTRL, RFLO
  and SnAp-1 (its e-prop) equal BPTT; over 10 steps exact RTRL equals BPTT
  and RFLO and SnAp-1 do not on a dense network; SnAp-1 does on a diagonal
  one (`recurrent_mask` = identity).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from experiments.online.setup import init_params
from rtrl import cells
from rtrl import estimators
from rtrl.cells.recurrent_mask import reachability


class OurSnapMask:
  """Our SnAp-n pattern in snapjax's mask layout: rows are units, columns
  the nonzero weights `W[a, b]` (`b` feeds `a`, row-major); kept where
  unit `a` reaches the row's unit within `n - 1` steps."""

  def __init__(self, W, n: int):
    indices = np.asarray(W.indices)
    units = W.shape[0]
    feeds = np.zeros((units, units), bool)  # ours: [j, i] = j feeds i
    feeds[indices[:, 1], indices[:, 0]] = True
    reach = reachability(feeds, units, n - 1)
    order = np.lexsort((indices[:, 1], indices[:, 0]))
    targets = indices[order, 0]
    self.jacobian_mask = jnp.asarray(reach[targets].T, dtype=float)


def snapjax_cases() -> list:
  # pylint: disable=g-import-not-at-top (its test module, from the snapshot)
  from snapjax.tests import snap_test

  snap_test.snap_n_mask_bcoo = OurSnapMask
  snap_test.sparse_mask_to_mask = lambda mask: mask
  try:
    snap_test.test_snap_n_masks()
    result = {"passed": True, "detail": "SnAp-1..4 masks as expected"}
  except Exception as err:
    result = {"passed": False, "detail": f"{type(err).__name__}: {err}"}
  finally:
    jax.config.update("jax_enable_x64", False)  # its import turns it on
    jax.config.update("jax_numpy_rank_promotion", "allow")
  return [{"case": "snapjax/tests/snap_test.py::test_snap_n_masks", **result}]


def online_and_bptt(name, cell, params, xs, target):
  """Our estimator's gradient summed online over the steps, and BPTT's,
  of `sum_t mean((h_t - target)^2)`."""
  estimator = estimators.make(name, cell)
  step = estimator.step(params)
  dloss = jax.grad(lambda h: jnp.mean((h - target) ** 2))

  def online(carry, x):
    tstate, state, total = carry
    tstate, state = step(tstate, state, x)
    grads = estimator.gradient(params, tstate, dloss(state))
    return (tstate, state, total + grads["W"]), None

  state = cell.initial_state()
  tstate = estimator.init(params, state, jax.random.PRNGKey(0))
  zero = jnp.zeros_like(params["W"])
  total = jax.lax.scan(online, (tstate, state, zero), xs)[0][2]

  def loss(W):
    def body(state, x):
      state = cell.step({"W": W}, state, x)
      return state, jnp.mean((state - target) ** 2)

    return jax.lax.scan(body, state, xs)[1].sum()

  return total, jax.grad(loss)(params["W"])


def jax_rtrl_cases(atol: float = 1e-5) -> list:
  xs = jax.random.normal(jax.random.PRNGKey(0), (10, 3))
  target = jax.random.normal(jax.random.PRNGKey(1), (5,))
  results = []
  for wiring, kwargs in (
    ("dense", {}),
    ("diagonal", {"recurrent_mask": np.eye(5, dtype=bool)}),
  ):
    cell = cells.make("leaky_rnn", 5, leak=0.25, **kwargs)
    # x2: larger weights than the default, so that influence propagates.
    W = init_params(cell, jax.random.PRNGKey(3), 3, 3)["cell"]["W"]
    params = {"W": 2.0 * W}
    for name, ours in (("rtrl", "rtrl"), ("rflo", "rflo"), ("eprop", "snap1")):
      for steps in (1, 10):
        online, bptt = online_and_bptt(ours, cell, params, xs[:steps], target)
        equal = bool(jnp.allclose(online, bptt, atol=atol))
        expected = (
          steps == 1
          or ours == "rtrl"
          or (ours == "snap1" and wiring == "diagonal")
        )
        if wiring == "diagonal" and ours != "snap1":
          continue  # its diagonal class tests e-prop only (RFLO skipped)
        results.append(
          {
            "case": f"test_ctrnn.py {wiring} {name} {steps}-step",
            "passed": equal == expected,
            "detail": (
              f"ours '{ours}' {'equals' if equal else 'differs from'} BPTT "
              f"(max |diff| {float(jnp.abs(online - bptt).max()):.1e}; "
              f"expected to {'equal' if expected else 'differ'})"
            ),
          }
        )
  return results
