"""Bad input gets a ValueError whose message names the offending argument."""

from helpers import copy_config
import jax
import jax.numpy as jnp
import optax
import pytest

from experiments.loop import workdir as workdir_lib
from experiments.online import copy_experiment
from rtrl import bptt
from rtrl import cells
from rtrl import estimators
from rtrl import online
from rtrl.tasks import copy_task


@pytest.fixture(scope="module")
def rhn():
  cell = cells.RHN(hidden_size=3)
  return cell, cell.init(jax.random.PRNGKey(0), 2)


@pytest.mark.parametrize("shape", [(3,), (1,), (2, 2), ()])
def test_wrong_input_size_to_step(rhn, shape):
  """`step` with x of the wrong shape names `x` and the expected shape."""
  cell, params = rhn
  with pytest.raises(ValueError, match=r"x must have shape \(2,\)"):
    cell.step(params, cell.initial_state(), jnp.zeros(shape))


def test_batched_x_to_single_example_step(rhn):
  """A batch passed to the per-example `step` is rejected (hint: vmap)."""
  cell, params = rhn
  with pytest.raises(ValueError, match=r"x must have shape.*vmap"):
    cell.step(params, cell.initial_state(), jnp.zeros((4, 2)))


def test_wrong_input_size_to_estimator_and_trainer(rhn):
  """The estimator step and the online trainer reject x of the wrong size."""
  cell, params = rhn
  est = estimators.make("rtrl", cell)
  tstate = est.init(params, cell.initial_state(), jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=r"x must have shape \(2,\)"):
    est.step(params)(tstate, cell.initial_state(), jnp.zeros((5,)))
  trainer = online.make_online_trainer(cell, est, optax.sgd(0.1))
  full = {
    "cell": params,
    "readout": {"w": jnp.zeros((3, 4)), "b": jnp.zeros((4,))},
  }
  state = trainer.init(full, jax.random.PRNGKey(0), 2)
  chunk = online.StepBatch(
    inputs=jnp.zeros((1, 2, 5)),
    targets=jnp.zeros((1, 2), jnp.int32),
    weights=jnp.ones((1, 2)),
    resets=jnp.zeros((1, 2), bool),
  )
  with pytest.raises(ValueError, match=r"x must have shape \(2,\)"):
    trainer.run(state, chunk)


def test_params_of_another_cell(rhn):
  """Params whose `W` does not fit the cell are rejected, naming params['W']."""
  _, params = rhn
  lstm = cells.LSTM(hidden_size=3)
  with pytest.raises(ValueError, match=r"params\['W'\]"):
    lstm.step(params, lstm.initial_state(), jnp.zeros((2,)))


def test_unknown_cell_name():
  """`cells.make('elman')` names `cell` and lists the valid names."""
  with pytest.raises(ValueError, match=r"cell must be one of.*'gru'.*'rhn'"):
    cells.make("elman", 4)


def test_unknown_estimator_name(rhn):
  """`estimators.make('bogus')` names `estimator` and lists the valid ones."""
  cell, _ = rhn
  with pytest.raises(ValueError, match=r"estimator must be one of.*'rtrl'"):
    estimators.make("bogus", cell)


def test_estimator_rejects_hparam_it_does_not_take(rhn):
  """`estimators.make('rtrl', cell, rank=2)` names the unknown `rank`."""
  cell, _ = rhn
  with pytest.raises(ValueError, match=r"'rtrl' does not take rank"):
    estimators.make("rtrl", cell, rank=2)


def test_estimator_needs_a_cell():
  """Something that is not a cell is rejected, naming `cell`."""
  with pytest.raises(ValueError, match=r"cell must be"):
    estimators.make("rtrl", "rhn")


@pytest.mark.parametrize("cls", [cells.RNN, cells.RHN, cells.LSTM])
@pytest.mark.parametrize("size", [0, -3, 2.5, True])
def test_non_positive_hidden_size(cls, size):
  """hidden_size must be a positive int (0, negative, float, bool rejected)."""
  with pytest.raises(ValueError, match="hidden_size"):
    cls(hidden_size=size)


@pytest.mark.parametrize("size", [0, -1])
def test_non_positive_input_size(size):
  """`init(key, input_size)` rejects non-positive sizes, naming input_size."""
  with pytest.raises(ValueError, match="input_size"):
    cells.LSTM(hidden_size=2).init(jax.random.PRNGKey(0), size)


@pytest.mark.parametrize("truncation", [0, -5])
def test_non_positive_truncation(truncation):
  """TBPTT rejects a non-positive horizon, naming truncation."""
  with pytest.raises(ValueError, match="truncation"):
    bptt.make_tbptt_trainer(
      cells.RHN(hidden_size=2), optax.sgd(0.1), truncation
    )


def test_chunk_not_multiple_of_truncation():
  """A TBPTT chunk whose length is not a multiple of the horizon is
  rejected, naming truncation."""
  cell = cells.RHN(hidden_size=2)
  params = {
    "cell": cell.init(jax.random.PRNGKey(0), 1),
    "readout": {"w": jnp.zeros((2, 2)), "b": jnp.zeros((2,))},
  }
  chunk = online.StepBatch(
    inputs=jnp.zeros((5, 1, 1)),
    targets=jnp.zeros((5, 1), jnp.int32),
    weights=jnp.ones((5, 1)),
    resets=jnp.zeros((5, 1), bool),
  )
  state0 = online.broadcast_state(cell.initial_state(), 1)
  with pytest.raises(ValueError, match="truncation"):
    bptt.tbptt_gradients(cell, params, state0, chunk, 2)


@pytest.mark.parametrize("steps", [0, -2])
def test_non_positive_accumulate_steps(rhn, steps):
  """The online trainer rejects accumulate_steps < 1, naming it."""
  cell, _ = rhn
  with pytest.raises(ValueError, match="accumulate_steps"):
    online.make_online_trainer(
      cell,
      estimators.make("rtrl", cell),
      optax.sgd(0.1),
      accumulate_steps=steps,
    )


@pytest.mark.parametrize("max_length", [0, -1])
def test_non_positive_max_length(max_length):
  """The Copy-task stream rejects max_length < 1, naming it."""
  with pytest.raises(ValueError, match="max_length"):
    copy_task.stream_init(jax.random.PRNGKey(0), 2, max_length)


@pytest.mark.parametrize("bits", [[], [0, 2], "012"])
def test_encode_rejects_non_binary(bits):
  """`encode` accepts only a non-empty 0/1 sequence, naming bits."""
  with pytest.raises(ValueError, match="bits"):
    copy_task.encode(bits)


@pytest.mark.parametrize(
  "field,value",
  [
    ("hidden_size", 0),
    ("batch_size", -1),
    ("num_steps", 0),
    ("chunk_steps", 0),
    ("max_length", 0),
  ],
)
def test_copy_experiment_rejects_non_positive_config(tmp_path, field, value):
  """`experiments.copy_task.train` rejects non-positive sizes, naming the
  config field, before doing any work."""
  with pytest.raises(ValueError, match=f"config.{field}"):
    copy_experiment.train(copy_config(**{field: value}), str(tmp_path))


@pytest.mark.parametrize("truncation", [0, -4])
def test_copy_experiment_rejects_non_positive_truncation(tmp_path, truncation):
  """estimator=tbptt with truncation <= 0 is a ValueError naming truncation
  (not a ZeroDivisionError from `chunk_steps % truncation`)."""
  config = copy_config(estimator="tbptt", truncation=truncation)
  with pytest.raises(ValueError, match="truncation"):
    copy_experiment.train(config, str(tmp_path))


@pytest.mark.parametrize(
  "field,value,match",
  [
    ("cell", "elman", "cell must be one of"),
    ("estimator", "bogus", "estimator must be one of"),
    ("accumulate_steps", 0, "accumulate_steps"),
  ],
)
def test_copy_experiment_rejects_bad_names(tmp_path, field, value, match):
  """Unknown cell / estimator names and accumulate_steps=0 in the config are
  ValueErrors naming the field."""
  with pytest.raises(ValueError, match=match):
    copy_experiment.train(copy_config(**{field: value}), str(tmp_path))


def test_num_steps_not_multiple_of_chunk_steps(tmp_path):
  """num_steps=15 with chunk_steps=10 either is rejected (a ValueError naming
  num_steps / chunk_steps) or trains exactly 15 steps: never silently more."""
  config = copy_config(
    estimator="tbptt",
    truncation=5,
    hidden_size=2,
    batch_size=1,
    num_steps=15,
    chunk_steps=10,
    log_every=10,
    checkpoint_every=10,
  )
  try:
    copy_experiment.train(config, str(tmp_path))
  except ValueError as e:
    assert "num_steps" in str(e) and "chunk_steps" in str(e)
    return
  steps = [r["step"] for r in workdir_lib.read_metrics(str(tmp_path))]
  assert max(steps) == 15, f"asked for 15 steps, logged steps {steps}"
