"""sketched-rtrl's side of `scripts/bench_peers.py` (sonaradarcn/
sketched-rtrl, PyTorch, MIT: the SK-RTRL paper's code). Its `skrtrl`
package is imported from the fetched snapshot under the peer's own venv
(`scripts/peers/setup_sketched_rtrl.sh`); none of it is copied here.

Its model is our tanh RNN: `TanhRNNCell` computes `tanh(W h + U x + b)`,
and its per-unit parameter row `[W[i], U[i], b[i]]` is column `i` of our
`W` (rows `[x, h, 1]`) reordered. Its training step is its own
`skrtrl.train.OnlineLearner.step` (cell, `jac_pieces`, the estimator's
`step_state` and `grad_rows`, an `nn.Linear` readout, cross-entropy,
`torch.optim.Adam`), fed our data through a task object with its
interface, eager PyTorch on the CPU, one Python step per time step.

Pairs (ours <- theirs): exact RTRL <- `ExactRTRL`; SnAp-1 <- `SnAp1`
(= `SKRTRL(r=0)`); SK-RTRL at rank r <- `SKRTRL(r)` (checked at its
deterministic limits r = 0 and r = n, and at r = 4 with the pre-projection
at full width, c = n, and at the default c = max(4, ⌈r/4⌉) with ours
taking the top-c by SVD as theirs does, `preprojection='svd'`: equal to
rounding; timed so. Our default pre-projection, subspace iteration, is
reported beside them); UORO <- `UORO`, KF-RTRL <- `KFRTRL` (random:
their means over
many draws against exact RTRL); RFLO <- `RFLO(tau)`, which is a different
algorithm by definition (a fixed decay `1 - 1/tau` on the immediate
Jacobian of a non-leaky tanh RNN, where ours follows the cell's direct
state path, zero for the tanh RNN): the two coincide at tau = 1, which is
what is checked and timed. Their TBPTT baseline is a task script, not a
library class: not compared.

Their `OnlineLearner` takes `delta = dL/dh` of the batch-mean loss and
then `grad_rows` averages over the batch again, so its cell gradient is
1/B of the batch-mean gradient (its readout's is not); Adam's scale
invariance hides this from training (the float32 loss trajectories agree).
The checks call `step_state`/`grad_rows` with per-example deltas (B x
their delta), as their own `tests/test_numerics.py` does.
"""

from __future__ import annotations

import functools
import subprocess
import time

import numpy as np
from skrtrl import algos as their_algos
from skrtrl import baselines as their_baselines
from skrtrl.cells import TanhRNNCell
from skrtrl.train import OnlineLearner
import torch
import torch.nn.functional as F

from rtrl import estimators
from scripts.benchlib.peers_common import Pair
from scripts.benchlib.peers_common import Side
from scripts.benchlib.peers_common import check_setting
from scripts.benchlib.peers_common import compare_steps
from scripts.benchlib.peers_common import in_distribution
from scripts.benchlib.peers_sketched_rtrl_cases import cases  # noqa: F401

SK_RANK = 4  # the timed SK-RTRL rank (the paper's r4; r16 > n at n = 32/64)
# Theirs takes the top-c pre-projection by a full SVD; ours the same so.
SK_HPARAMS = {"rank": SK_RANK, "preprojection": "svd"}


def their_estimator(name: str, cell, batch_size: int):
  """Their estimator object for our pair name."""
  if name == "rflo_tau1":
    return their_baselines.RFLO(cell, batch_size, tau=1.0)
  if name.startswith("skrtrl-r"):  # skrtrl-r<rank>[-c<pre-projection>]
    rank, _, c = name[len("skrtrl-r") :].partition("-c")
    return their_algos.SKRTRL(
      cell, batch_size, r=int(rank), c=int(c) if c else None
    )
  return {
    "exact": their_algos.ExactRTRL,
    "snap1": their_algos.SnAp1,
    "uoro": their_baselines.UORO,
    "kfrtrl": their_baselines.KFRTRL,
  }[name](cell, batch_size)


def load_weights(cell, readout, params) -> None:
  """Our `{'cell': {'W'}, 'readout': {'w', 'b'}}` into their modules."""
  W = torch.from_numpy(np.array(params["cell"]["W"]))
  m = W.shape[0] - cell.n - 1
  with torch.no_grad():
    cell.U.copy_(W[:m].T)
    cell.W.copy_(W[m:-1].T)
    cell.b.copy_(W[-1])
    readout.weight.copy_(torch.from_numpy(np.array(params["readout"]["w"])).T)
    readout.bias.copy_(torch.from_numpy(np.array(params["readout"]["b"])))


def rows_as_ours(g_rows: torch.Tensor, m: int) -> np.ndarray:
  """Their `(n, p)` rows `[W_hh[i], U[i], b[i]]` as our `(m + n + 1, n)`."""
  g = g_rows.detach().numpy()
  n = g.shape[0]
  return np.concatenate([g[:, n : n + m].T, g[:, :n].T, g[:, n + m :].T])


def their_step_grads(name, params, inputs, targets, seed=0):
  """Per-step cell and readout gradients of the batch-mean loss with the
  parameters fixed (float64), their estimator driven as their own tests
  drive it."""
  torch.manual_seed(seed)
  steps, batch_size, m = inputs.shape
  n = params["cell"]["W"].shape[1]
  cell = TanhRNNCell(m, n, dtype=torch.float64)
  readout = torch.nn.Linear(n, params["readout"]["b"].shape[0]).double()
  load_weights(cell, readout, params)
  algo = their_estimator(name, cell, batch_size)
  xs = torch.from_numpy(np.array(inputs))
  ys = torch.from_numpy(np.array(targets)).long()
  h = cell.init_state(batch_size)
  grads = {"W": [], "w": [], "b": []}
  for t in range(steps):
    h_prev = h
    h = cell(xs[t], h_prev).detach()
    algo.step_state(*cell.jac_pieces(xs[t], h_prev, h))
    h_leaf = h.clone().requires_grad_(True)
    readout.zero_grad()
    F.cross_entropy(readout(h_leaf), ys[t]).backward()
    grads["W"].append(rows_as_ours(algo.grad_rows(h_leaf.grad * batch_size), m))
    grads["w"].append(readout.weight.grad.T.numpy().copy())
    grads["b"].append(readout.bias.grad.numpy().copy())
  stacked = {k: np.stack(v) for k, v in grads.items()}
  return {"W": stacked["W"]}, {"w": stacked["w"], "b": stacked["b"]}


def deterministic_check(ours, theirs, cell="rnn", hparams=None):
  def check(args):
    pair = Pair(ours, ours, cell, theirs, None, None, hparams or {})
    _, params, inputs, targets, our = check_setting(
      pair, args.check_n, 4, 6, args.vocab
    )
    return compare_steps(our, their_step_grads(theirs, params, inputs, targets))

  return check


def sk_rtrl_check(args) -> dict:
  """SK-RTRL at its deterministic limits (rank 0 = SnAp-1, rank n = exact
  RTRL), and at rank 4 with the exact top-c pre-projection (c = n, and the
  default c with ours `preprojection='svd'`, theirs' way) must agree; rank
  4 with our default pre-projection (subspace iteration: an approximate
  top-c) is reported."""
  n = args.check_n
  runs = {
    "rank 0": ("sk_rtrl", "skrtrl-r0", {"rank": 0}),
    "rank n": ("sk_rtrl", f"skrtrl-r{n}", {"rank": n}),
    f"rank {SK_RANK}, c = n": (
      estimators.sk_rtrl,
      f"skrtrl-r{SK_RANK}-c{n}",
      {"rank": SK_RANK, "preprojection_rank": n},
    ),
    f"rank {SK_RANK}, default c, svd": (
      "sk_rtrl",
      f"skrtrl-r{SK_RANK}",
      SK_HPARAMS,
    ),
    f"rank {SK_RANK}, default c, our subspace iteration": (
      "sk_rtrl",
      f"skrtrl-r{SK_RANK}",
      {"rank": SK_RANK},
    ),
  }
  found = {
    label: deterministic_check(ours, theirs, hparams=hparams)(args)
    for label, (ours, theirs, hparams) in runs.items()
  }
  required = list(found)[:4]
  return {
    "check": "per-step gradients, float64",
    "ok": all(found[k]["ok"] for k in required),
    "summary": "; ".join(
      f"{k} {v['cell_max_rel']:.1e}" for k, v in found.items()
    )
    + " (max rel; the last reported, the others < 1e-10)",
    "runs": found,
  }


def random_check(ours, theirs):
  """Both unbiased for exact RTRL's per-step gradient (in distribution)."""

  def samples(params, inputs, targets, groups):
    return np.stack(
      [
        their_step_grads(theirs, params, inputs, targets, seed=1000 + g)[0]["W"]
        for g in range(groups)
      ]
    )

  return lambda args: in_distribution(ours, "rnn", samples, args)


class OurDataTask:
  """The task interface their `OnlineLearner` reads, over our chunk."""

  loss_type = "ce"

  def __init__(self, inputs, targets):
    self.xs = torch.from_numpy(np.array(inputs))
    self.ys = torch.from_numpy(np.array(targets)).long()
    self.n_in, self.B = self.xs.shape[2], self.xs.shape[1]
    self.n_out = int(self.xs.shape[2])
    self.t = 0
    self.no_reset = torch.zeros(self.B, dtype=torch.bool)

  def step(self):
    t = self.t % self.xs.shape[0]
    self.t += 1
    return self.xs[t], self.ys[t], self.no_reset


def state_floats(algo) -> int:
  names = ("J", "S", "L", "R", "s", "th", "u", "Bm", "e")
  return int(sum(getattr(algo, k).numel() for k in names if hasattr(algo, k)))


def their_side(name, threads, params, inputs, targets, optimizer, n) -> Side:
  """Their `OnlineLearner` on our weights and chunk; Adam at our rate;
  torch on `threads` threads (set at every call: each way is timed)."""
  del optimizer  # theirs is torch.optim.Adam, same defaults as optax.adam
  task = OurDataTask(inputs, targets)
  task.n_out = params["readout"]["b"].shape[0]
  learner = OnlineLearner(
    task, n, "rflo" if name == "rflo_tau1" else name, lr=1e-3, device="cpu"
  )
  learner.algo = their_estimator(name, learner.cell, task.B)
  load_weights(learner.cell, learner.readout, params)
  learner.opt = torch.optim.Adam(
    list(learner.cell.parameters()) + list(learner.readout.parameters()),
    lr=1e-3,
  )
  steps = inputs.shape[0]

  def chunk():
    torch.set_num_threads(threads)
    return [learner.step()["loss"] for _ in range(steps)]

  start = time.perf_counter()
  losses = np.array(chunk())
  first = time.perf_counter() - start

  def run():
    start = time.perf_counter()
    chunk()
    return time.perf_counter() - start

  return Side(run, losses, state_floats(learner.algo), first)


def versions() -> dict:
  try:
    commit = subprocess.run(
      [
        "git",
        "-C",
        their_algos.__file__.rsplit("/skrtrl/", 1)[0],
        "rev-parse",
        "--short",
        "HEAD",
      ],
      capture_output=True,
      text=True,
      check=False,
    ).stdout.strip()
  except OSError:
    commit = "?"
  return {"sketched-rtrl": commit, "torch": torch.__version__}


def pairs(args) -> list:
  """Each pair once per `--torch_threads` (default 1 and 2: eager
  PyTorch's small ops lose to thread hand-offs on a loaded 2-core machine,
  its large GEMMs gain); the faster is reported."""
  return [
    pair._replace(
      theirs=f"{pair.theirs}, {threads} thread{'s' if threads > 1 else ''}",
      build=functools.partial(pair.build, threads),
    )
    for pair in _pairs()
    for threads in getattr(args, "torch_threads", (1, 2))
  ]


def _pairs() -> list:
  def build(name):
    return lambda *a: their_side(name, *a)

  exact = deterministic_check("rtrl", "exact")
  return [
    Pair(
      "exact", "rtrl", "rnn", "ExactRTRL", exact, build("exact"), exponent=4
    ),
    Pair(
      "snap1",
      "snap1",
      "rnn",
      "SnAp1",
      deterministic_check("snap1", "snap1"),
      build("snap1"),
    ),
    Pair(
      f"sk_rtrl r={SK_RANK}",
      "sk_rtrl",
      "rnn",
      f"SKRTRL(r={SK_RANK})",
      sk_rtrl_check,
      build(f"skrtrl-r{SK_RANK}"),
      hparams=SK_HPARAMS,
      exponent=2,
    ),
    Pair(
      "uoro",
      "uoro",
      "rnn",
      "UORO",
      random_check("uoro", "uoro"),
      build("uoro"),
      random=True,
    ),
    Pair(
      "kf",
      "kf",
      "rnn",
      "KFRTRL",
      random_check("kf", "kfrtrl"),
      build("kfrtrl"),
      random=True,
    ),
    Pair(
      "rflo",
      "rflo",
      "rnn",
      "RFLO(tau=1)",
      deterministic_check("rflo", "rflo_tau1"),
      build("rflo_tau1"),
    ),
  ]
