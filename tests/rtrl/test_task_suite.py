"""The task suite (`rtrl.tasks.suite` and the task modules): each stream's
shapes, statistics and resets, generated inside jit and vmapped over keys;
bad settings raise ValueErrors naming them; the metrics count what they
claim across chunk boundaries."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl.online import StepBatch
from rtrl.tasks import adding
from rtrl.tasks import suite
from rtrl.tasks import task_metrics

KEY = jax.random.PRNGKey(0)


def run_stream(task, batch_size, num_steps, key=KEY):
  """The task's first `num_steps` steps, generated inside jit."""
  stream = task.init_stream(key, batch_size)
  return jax.jit(task.chunk, static_argnums=1)(stream, num_steps)


def test_registry_lists_the_tasks_and_checks_names():
  assert "adding" in suite.names()
  with pytest.raises(ValueError, match="name must be one of"):
    suite.make_task("no_such_task")
  with pytest.raises(ValueError, match="not settings of task 'adding'"):
    suite.make_task("adding", lenght=5)


@pytest.mark.parametrize("name", suite.names())
def test_every_task_streams_time_major_batches(name):
  task = suite.make_task(name)
  _, chunk = run_stream(task, 3, 7)
  assert chunk.inputs.shape == (7, 3, task.input_size)
  assert chunk.weights.shape == chunk.resets.shape == (7, 3)
  assert bool(chunk.resets[0].all())  # every lane starts a sequence
  predictions = jnp.zeros((3, task.output_size))
  one_step = jax.tree_util.tree_map(lambda a: a[0], chunk)
  jax.eval_shape(task.loss, predictions[0], one_step.targets[0])
  state = task.metric.init(3)
  for leaf in jax.tree_util.tree_leaves(state):
    assert leaf.shape[0] == 3
  task.metric.update(state, predictions, one_step)


@pytest.mark.parametrize("name", suite.names())
def test_streams_vmap_over_keys(name):
  task = suite.make_task(name)
  keys = jax.random.split(KEY, 2)

  def first_chunk(key):
    return task.chunk(task.init_stream(key, 2), 5)[1]

  both = jax.vmap(first_chunk)(keys)
  np.testing.assert_array_equal(both.inputs[1], first_chunk(keys[1]).inputs)
  assert not np.array_equal(both.inputs[0], both.inputs[1])


def test_adding_targets_are_the_sum_of_the_marked_values():
  length, lanes = 6, 4
  _, chunk = run_stream(suite.make_task("adding", length=length), lanes, 30)
  values, markers = np.asarray(chunk.inputs[..., 0]), chunk.inputs[..., 1]
  markers = np.asarray(markers)
  for lane in range(lanes):
    for start in range(0, 30 - length + 1, length):
      steps = slice(start, start + length)
      assert (
        chunk.resets[start, lane]
        and not chunk.resets[start + 1 : start + length, lane].any()
      )
      marked = markers[steps, lane]
      assert marked[: length // 2].sum() == 1 == marked[length // 2 :].sum()
      np.testing.assert_allclose(
        chunk.targets[start + length - 1, lane, 0],
        (values[steps, lane] * marked).sum(),
        rtol=1e-6,
      )
      np.testing.assert_array_equal(
        chunk.weights[steps, lane], [0] * (length - 1) + [1]
      )


def test_adding_baseline_is_one_sixth():
  """Predicting 1 at the last steps has MSE Var(u1 + u2) = 1/6."""
  task = suite.make_task("adding", length=4)
  _, chunk = run_stream(task, 512, 40)
  ones = jnp.ones(chunk.targets.shape)
  _, sums = jax.vmap(task.metric.update, in_axes=(None, 0, 0))((), ones, chunk)
  assert abs(float(task_metrics.value(sums)) - adding.BASELINE_MSE) < 0.01


@pytest.mark.parametrize("length", [1, 0, 2.5, True])
def test_adding_bad_length(length):
  with pytest.raises(ValueError, match="length"):
    suite.make_task("adding", length=length)


def test_bad_sizes_name_the_argument():
  task = suite.make_task("adding")
  with pytest.raises(ValueError, match="batch_size"):
    task.init_stream(KEY, 0)
  with pytest.raises(ValueError, match="num_steps"):
    task.chunk(task.init_stream(KEY, 2), 0)


def test_sequences_solved_counts_sequences_across_chunks():
  """Lane 0: sequences of 2, 3 steps; a wrong deterministic step fails only
  its own sequence, counted when the next one starts (even in a later
  chunk)."""
  metric = task_metrics.sequences_solved(lambda batch: batch.weights > 0)
  resets = np.array([1, 0, 1, 0, 0, 1, 0], bool)[:, None]
  targets = np.zeros((7, 1), np.int32)
  wrong = np.array([0, 0, 0, 1, 0, 0, 0], bool)  # step 3: 2nd sequence
  logits = np.where(wrong[:, None, None], [[0.0, 1.0]], [[1.0, 0.0]])
  batch = StepBatch(
    jnp.zeros((7, 1, 1)), targets, jnp.ones((7, 1)), jnp.asarray(resets)
  )
  state = metric.init(1)
  sums = []
  for t in range(7):
    step = jax.tree_util.tree_map(lambda a, t=t: a[t], batch)
    state, s = metric.update(state, jnp.asarray(logits[t]), step)
    sums.append(s)
  counted = [float(s.weight_sum) for s in sums]
  solved = [float(s.value_sum) for s in sums]
  assert counted == [0, 0, 1, 0, 0, 1, 0]
  assert solved == [0, 0, 1, 0, 0, 0, 0]
