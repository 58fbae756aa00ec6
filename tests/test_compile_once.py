"""Each chunk shape is traced (so compiled) once: by the run loop over a
whole run, across a checkpoint and resume, and by the online trainer's
jitted `run` over successive chunks (`chex.assert_max_traces` wraps the
function that is jitted; a second trace raises).

A retrace would mean that a chunk's output state does not have its input's
shapes and dtypes (a weak type, an int64 after a restore, a Python scalar):
every chunk would then pay a compilation.
"""

import chex
from helpers import copy_config
import jax
import jax.numpy as jnp
import optax
import pytest

from experiments.loop import runner
from experiments.online import copy_experiment
import rtrl
from rtrl import online


@pytest.fixture(autouse=True)
def fresh_trace_counter():
  chex.clear_trace_counter()
  yield
  chex.clear_trace_counter()


def run_copy_task(workdir, num_steps, **overrides):
  """The Copy task through `runner.run`, its `train_chunk` (what the run
  loop jits) allowed a single trace; returns the metrics records."""
  config = copy_config(
    hidden_size=8,
    batch_size=4,
    chunk_steps=5,
    log_every=5,
    checkpoint_every=10,
    num_steps=num_steps,
    **overrides,
  )
  experiment = copy_experiment.make_experiment(config)
  chunk, traces = experiment.train_chunk, []

  def train_chunk(*args):  # runs only while jit traces it
    traces.append(args)
    return chunk(*args)

  once = chex.assert_max_traces(train_chunk, n=1)
  experiment = experiment._replace(train_chunk=once)
  records = runner.run(config, str(workdir), experiment, log=lambda m: None)
  assert len(traces) == 1  # traced, and (chex would have raised) only once
  return records


@pytest.mark.parametrize("num_seeds", [1, 2])
def test_run_loop_traces_the_chunk_once_per_run_and_resume(tmp_path, num_seeds):
  records = run_copy_task(tmp_path, num_steps=20, num_seeds=num_seeds)
  assert [r["step"] for r in records] == [5, 10, 15, 20]
  # Resuming from the step-20 checkpoint: a new program, traced once for
  # the restored state and the states it returns.
  chex.clear_trace_counter()
  records = run_copy_task(tmp_path, num_steps=35, num_seeds=num_seeds)
  assert [r["step"] for r in records][-3:] == [25, 30, 35]


def make_trainer(estimate_traces: int, accumulate_steps: int = 1):
  """`rtrl.online`'s trainer of an RHN-8 by UORO, built by
  `trainer_from_estimate` as `make_online_trainer` builds it, its per-step
  estimate (traced inside the jitted `run`) allowed `estimate_traces`."""
  cell = rtrl.cells.make("rhn", hidden_size=8)
  estimator = rtrl.estimators.make("uoro", cell)

  def initial_states(params, key, batch_size):
    keys = jax.random.split(key, batch_size)
    state0 = cell.initial_state()
    tstate = jax.vmap(estimator.init, in_axes=(None, None, 0))(
      params["cell"], state0, keys
    )
    return tstate, online.broadcast_state(state0, batch_size)

  def estimate(params, tstate, cell_state, batch):
    return online.estimate_step(
      cell, estimator, params, tstate, cell_state, batch
    )

  estimate = chex.assert_max_traces(estimate, n=estimate_traces)
  trainer = online.trainer_from_estimate(
    initial_states, estimate, optax.adam(1e-3), accumulate_steps
  )
  return cell, trainer


def echo_chunk(key, length, batch_size, num_symbols):
  symbols = jax.random.randint(key, (length, batch_size), 0, num_symbols)
  return rtrl.StepBatch(
    inputs=jax.nn.one_hot(symbols, num_symbols),
    targets=symbols,
    weights=jnp.ones(symbols.shape),
    resets=jnp.zeros(symbols.shape, bool),
  )


# accumulate_steps 2: optax.MultiSteps' state must keep its types too.
@pytest.mark.parametrize("accumulate_steps", [1, 2])
def test_online_trainer_run_traces_once_per_chunk_shape(accumulate_steps):
  cell, trainer = make_trainer(1, accumulate_steps)
  key = jax.random.PRNGKey(0)
  params = {
    "cell": cell.init(key, 3),
    "readout": rtrl.readout.linear().init(key, 8, 3),
  }
  state = trainer.init(params, key, 4)
  for seed in range(3):
    state, metrics = trainer.run(state, echo_chunk(key + seed, 6, 4, 3))
  assert int(state.step) == 18
  assert metrics.loss_sum.shape == (6,)


def test_a_second_trace_fails():
  # The check itself: a state whose dtype changes (here float64 parameters
  # under x64) retraces `run`, and the wrapped estimate says so.
  cell, trainer = make_trainer(estimate_traces=1)
  key = jax.random.PRNGKey(0)
  params = {
    "cell": cell.init(key, 3),
    "readout": rtrl.readout.linear().init(key, 8, 3),
  }
  state = trainer.init(params, key, 4)
  state, _ = trainer.run(state, echo_chunk(key, 6, 4, 3))
  with jax.enable_x64(True):
    params64 = jax.tree.map(lambda a: a.astype(jnp.float64), params)
    with pytest.raises(AssertionError, match="traced > 1 times"):
      trainer.run(trainer.init(params64, key, 4), echo_chunk(key, 6, 4, 3))
