"""sketched-rtrl's own test cases run against our estimators
(`scripts/bench_peers.py --cases`): its `tests/test_numerics.py` (R001
exact RTRL equals BPTT, R002 SK-RTRL at rank n equals exact RTRL at every
step, R003 SK-RTRL's certificate bounds its influence's error at ranks 2,
4 and 8) is imported from the snapshot and its `main()` run as written,
with its `ExactRTRL` and `SKRTRL` replaced by `OursAsTheirs`: their
estimator interface over ours. Nothing of theirs is copied.
"""

from __future__ import annotations

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import torch

from rtrl import cells
from rtrl import estimators


class OursAsTheirs:
  """Their `OnlineGrad` interface (`step_state(A, imm)`, `grad_rows`, the
  dense influence `J` / `residual_dense()`, the certificate `e`) over one
  of our estimators, per example under vmap, float64. The weights are read
  from their cell at construction (their tests hold them fixed); `x` and
  `h_prev` are recovered from their immediate Jacobian (`imm[b, i] =
  tanh'_i [h_prev, x, 1]`)."""

  def __init__(self, name, cell, batch, **hparams):
    self.n, self.m, self.B = cell.n, cell.m, batch
    self.p = cell.p
    self.P = self.n * self.p
    self.preproject = hparams.get("rank", self.n) < self.n
    W = np.concatenate(
      [
        cell.U.detach().numpy().T,
        cell.W.detach().numpy().T,
        cell.b.detach().numpy()[None],
      ]
    )
    self.params = {"W": jnp.asarray(W, jnp.float64)}
    ours = cells.make("rnn", self.n)
    self.estimator = estimators.make(name, ours, **hparams)
    keys = jax.random.split(jax.random.PRNGKey(0), batch)
    zeros = jnp.zeros((batch, self.n), jnp.float64)
    self.tstate = jax.vmap(self.estimator.init, in_axes=(None, 0, 0))(
      self.params, zeros, keys
    )
    self._step = jax.jit(
      jax.vmap(self.estimator.step(self.params), in_axes=(0, 0, 0))
    )
    self._grad = jax.jit(
      jax.vmap(self.estimator.gradient, in_axes=(None, 0, 0))
    )

  def step_state(self, A, imm):
    del A  # our step recomputes the cell's Jacobians from (h_prev, x)
    imm = imm.detach().numpy()
    feats = (imm / imm[..., -1:]).mean(axis=1)  # (B, p): [h_prev, x, 1]
    h_prev, x = feats[:, : self.n], feats[:, self.n : self.n + self.m]
    self.tstate, _ = self._step(
      self.tstate, jnp.asarray(h_prev), jnp.asarray(x)
    )

  def rows(self, grads_W) -> np.ndarray:
    """Our `(..., m + n + 1, n)` as their `(..., n, p)` rows."""
    g = np.swapaxes(np.asarray(grads_W), -1, -2)  # (..., n, m + n + 1)
    m = self.m
    return np.concatenate(
      [g[..., m : m + self.n], g[..., :m], g[..., -1:]], axis=-1
    )

  def grad_rows(self, delta):
    grads = self._grad(self.params, self.tstate, jnp.asarray(delta.numpy()))
    return torch.from_numpy(self.rows(grads["W"]).mean(0))

  @property
  def J(self):
    """The dense influence `(B, n, P)`: row i is the gradient of unit i."""
    basis = jnp.broadcast_to(jnp.eye(self.n), (self.B, self.n, self.n))
    per_unit = jax.vmap(self._grad, in_axes=(None, None, 1), out_axes=1)(
      self.params, self.tstate, basis
    )["W"]  # (B, n_units, m + n + 1, n)
    return torch.from_numpy(self.rows(per_unit).reshape(self.B, self.n, self.P))

  def residual_dense(self):
    return self.J

  @property
  def e(self):
    metrics = jax.vmap(self.estimator.metrics)(self.tstate)
    return torch.from_numpy(np.asarray(metrics["certificate"]))


def cases() -> list:
  """Runs their `tests/test_numerics.main()` with our estimators; one
  result per printed check line."""
  # pylint: disable=g-import-not-at-top (their test module, from the snapshot)
  from tests import test_numerics

  jax.config.update("jax_enable_x64", True)
  test_numerics.ExactRTRL = lambda cell, batch: OursAsTheirs(
    "rtrl", cell, batch
  )
  test_numerics.SKRTRL = lambda cell, batch, r: OursAsTheirs(
    "sk_rtrl", cell, batch, rank=r
  )
  printed = io.StringIO()
  try:
    with contextlib.redirect_stdout(printed):
      test_numerics.main()
  except Exception as err:
    return [
      {
        "case": "tests/test_numerics.py",
        "passed": False,
        "detail": f"{type(err).__name__}: {err}",
      }
    ]
  finally:
    jax.config.update("jax_enable_x64", False)
  return [
    {
      "case": "tests/test_numerics.py "
      + " ".join(
        line.split()[:1] + [w for w in line.split() if w.startswith("r=")]
      ).rstrip(":"),
      "passed": line.rstrip().endswith("PASS"),
      "detail": line.strip(),
    }
    for line in printed.getvalue().splitlines()
    if line.startswith("R0")
  ]
