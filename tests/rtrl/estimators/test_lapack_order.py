"""No two batched LAPACK calls of an estimator's step can run at once.

jaxlib runs a batched LAPACK call (QR, SVD) over XLA:CPU's intra-op thread
pool and blocks a thread of it until the batch is done; XLA runs
independent operations at the same time. Two such calls at once can hold
every thread of a small pool and deadlock: SK-RTRL's per-unit QR beside its
pre-projection's SVD hung 3 runs in 4 at n = 64, batch 16, on 2 cores
(`rtrl.linalg.after` now chains them). Checked on the compiled program of
the vmapped step: every pair of LAPACK custom calls is ordered by a data
dependency.
"""

import re

import jax
import jax.numpy as jnp
import pytest

from rtrl import cells
from rtrl import estimators
from rtrl import linalg
from rtrl import online


def unordered_lapack_calls(hlo: str) -> list[tuple[str, str]]:
  """Pairs of LAPACK custom calls of the entry computation neither of
  which depends on the other."""
  entry = hlo[hlo.index("\nENTRY") :]
  entry = entry[: entry.index("\n}")]
  operands, calls = {}, []
  for line in entry.split("\n"):
    m = re.match(
      r"\s*(?:ROOT )?%([\w.\-]+) = .*?\b[\w\-]+\((.*?)\)(?:,|$)", line
    )
    if m:
      operands[m.group(1)] = set(re.findall(r"%([\w.\-]+)", m.group(2)))
      if 'custom_call_target="lapack_' in line:
        calls.append(m.group(1))

  def ancestors(name):
    seen, todo = set(), [name]
    while todo:
      for parent in operands.get(todo.pop(), ()):
        if parent not in seen:
          seen.add(parent)
          todo.append(parent)
    return seen

  before = {c: ancestors(c) for c in calls}
  return [
    (a, b)
    for i, a in enumerate(calls)
    for b in calls[i + 1 :]
    if a not in before[b] and b not in before[a]
  ]


def step_hlo(name, cell_name, **hparams) -> str:
  cell = cells.make(cell_name, 8)
  estimator = estimators.make(name, cell, **hparams)
  params = cell.init(jax.random.PRNGKey(0), 3)
  keys = jax.random.split(jax.random.PRNGKey(1), 4)
  tstate = jax.vmap(lambda k: estimator.init(params, cell.initial_state(), k))(
    keys
  )
  state = online.broadcast_state(cell.initial_state(), 4)
  step = jax.jit(jax.vmap(estimator.step(params)))
  return step.lower(tstate, state, jnp.ones((4, 3))).compile().as_text()


@pytest.mark.parametrize(
  "name, cell_name, hparams",
  [
    ("sk_rtrl", "rnn", {"rank": 2}),
    ("sk_rtrl", "rnn", {"rank": 2, "preprojection": "svd"}),
    ("sk_rtrl", "lstm", {"rank": 3}),
    ("sk_rtrl", "rnn", {"rank": 8}),  # full rank: QR, then the core's SVD
    ("ok", "lstm", {"rank": 4}),
    ("kf_approx", "rnn", {"rank": 2}),
  ],
)
def test_lapack_calls_run_one_at_a_time(name, cell_name, hparams):
  hlo = step_hlo(name, cell_name, **hparams)
  assert unordered_lapack_calls(hlo) == []


def test_the_check_sees_two_independent_calls():
  def two(a, b):
    return jnp.linalg.qr(a)[0], jnp.linalg.svd(b)[0]

  a = jnp.ones((4, 6, 3)) + jnp.eye(6, 3)
  hlo = jax.jit(two).lower(a, a[:, :3]).compile().as_text()
  assert len(unordered_lapack_calls(hlo)) >= 1
  chained = lambda a, b: two(a, linalg.after(b, jnp.linalg.qr(a)[0]))
  hlo = jax.jit(chained).lower(a, a[:, :3]).compile().as_text()
  assert unordered_lapack_calls(hlo) == []


def test_after_is_exact():
  x = jnp.arange(6.0).reshape(2, 3)
  out = linalg.after(x, jnp.full((4,), 0.5), jnp.ones((2, 2)))
  assert out.dtype == x.dtype and bool(jnp.all(out == x))
