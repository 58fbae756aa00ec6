"""The task suite (`rtrl.tasks.suite` and the task modules): each stream's
shapes, statistics and resets, generated inside jit and vmapped over keys;
bad settings raise ValueErrors naming them; the metrics count what they
claim across chunk boundaries."""

from helpers import load_config
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rtrl.online import StepBatch
from rtrl.tasks import adding
from rtrl.tasks import anbn
from rtrl.tasks import copy_memory
from rtrl.tasks import dynamical_streams
from rtrl.tasks import henon
from rtrl.tasks import lorenz
from rtrl.tasks import rotation
from rtrl.tasks import series
from rtrl.tasks import suite
from rtrl.tasks import task_metrics

KEY = jax.random.PRNGKey(0)
# Short episodes: the generic tests compile every task once.
SMALL = {
  "adding": dict(length=6),
  "copy_memory": dict(num_recall=2, delay=3),
  "rotation": dict(dim=3, length=6),
  "rotation_recall": dict(dim=3, length=6, recall=2),
  "anbn": dict(n_max=4),
}


def run_stream(task, batch_size, num_steps, key=KEY):
  """The task's first `num_steps` steps, generated inside jit."""
  return jax.jit(
    lambda key: task.chunk(task.init_stream(key, batch_size), num_steps)
  )(key)


def test_registry_lists_the_tasks_and_checks_names():
  assert "adding" in suite.names()
  with pytest.raises(ValueError, match="name must be one of"):
    suite.make_task("no_such_task")
  with pytest.raises(ValueError, match="not settings of task 'adding'"):
    suite.make_task("adding", lenght=5)


@pytest.mark.parametrize("name", suite.names())
def test_every_task_streams_time_major_batches_and_vmaps_over_keys(name):
  task = suite.make_task(name, **SMALL.get(name, {}))
  keys = jax.random.split(KEY, 2)

  def first_chunk(key):
    return task.chunk(task.init_stream(key, 3), 7)[1]

  both = jax.jit(jax.vmap(first_chunk))(keys)
  chunk = jax.jit(first_chunk)(keys[1])
  np.testing.assert_allclose(both.inputs[1], chunk.inputs, rtol=1e-6)
  assert not np.array_equal(both.inputs[0], both.inputs[1])
  assert chunk.inputs.shape == (7, 3, task.input_size)
  assert chunk.weights.shape == chunk.resets.shape == (7, 3)
  assert bool(chunk.resets[0].all())  # every lane starts a sequence
  predictions = jnp.zeros((3, task.output_size))
  one_step = jax.tree_util.tree_map(lambda a: a[0], chunk)
  assert (
    jax.eval_shape(task.loss, predictions[0], one_step.targets[0]).shape == ()
  )
  state = task.metric.init(3)
  for leaf in jax.tree_util.tree_leaves(state):
    assert leaf.shape[0] == 3
  task.metric.update(state, predictions, one_step)


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
  task = suite.make_task("adding", length=2)
  _, chunk = run_stream(task, 512, 20)
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


def lane_sequences(chunk, lane):
  """Lane `lane`'s complete sequences: lists of step indices between
  resets (the last, possibly cut, one dropped)."""
  starts = list(np.flatnonzero(np.asarray(chunk.resets[:, lane])))
  return [list(range(a, b)) for a, b in zip(starts, starts[1:])]


@pytest.mark.parametrize("protocol", copy_memory.PROTOCOLS)
def test_copy_memory_layout(protocol):
  """k = 2 symbols, delay 3: `s1 s2 _ _ _ ? ?` (recall: cue on the recall
  steps) or `s1 s2 _ _ # _ _` (arjovsky: the delimiter at step k + T - 1),
  targets the symbols at the last k steps."""
  task = suite.make_task(
    "copy_memory", num_symbols=4, num_recall=2, delay=3, protocol=protocol
  )
  assert task.input_size == 6
  assert task.output_size == (4 if protocol == "recall" else 5)
  _, chunk = run_stream(task, 3, 21)
  tokens = np.argmax(np.asarray(chunk.inputs), -1)
  blank, cue = 4, 5
  for lane in range(3):
    sequences = lane_sequences(chunk, lane)
    assert len(sequences) == 2 and all(len(s) == 7 for s in sequences)
    for steps in sequences:
      shown, targets = (
        tokens[steps, lane],
        np.asarray(chunk.targets)[steps, lane],
      )
      weights = np.asarray(chunk.weights)[steps, lane]
      assert (shown[:2] < 4).all()
      np.testing.assert_array_equal(targets[-2:], shown[:2])
      if protocol == "recall":
        np.testing.assert_array_equal(shown[2:], [blank] * 3 + [cue] * 2)
        np.testing.assert_array_equal(weights, [0] * 5 + [1] * 2)
      else:
        np.testing.assert_array_equal(
          shown[2:], [blank, blank, cue, blank, blank]
        )
        np.testing.assert_array_equal(targets[:5], [blank] * 5)
        np.testing.assert_array_equal(weights, [1] * 7)


def test_copy_memory_metric_counts_recall_steps_only():
  """The targets as logits: accuracy 1; a constant blank: 0 (arjovsky,
  where the blank is right on most steps)."""
  task = suite.make_task(
    "copy_memory", num_symbols=4, num_recall=2, delay=3, protocol="arjovsky"
  )
  _, chunk = run_stream(task, 3, 21)
  update = jax.vmap(task.metric.update, in_axes=(None, 0, 0))
  perfect = jax.nn.one_hot(chunk.targets, 5)
  assert float(task_metrics.value(update((), perfect, chunk)[1])) == 1.0
  blanks = jax.nn.one_hot(jnp.full(chunk.targets.shape, 4), 5)
  assert float(task_metrics.value(update((), blanks, chunk)[1])) == 0.0
  assert copy_memory.arjovsky_baseline(8, 10, 100) == pytest.approx(
    10 * np.log(8) / 120
  )


def test_rotation_targets_rotate_the_shown_vector():
  task = suite.make_task("rotation_recall", dim=3, length=5, recall=2)
  rotation_matrix = np.asarray(rotation.rotation_matrix(0, 3))
  np.testing.assert_allclose(
    rotation_matrix @ rotation_matrix.T, np.eye(3), atol=1e-6
  )
  assert np.linalg.det(rotation_matrix) == pytest.approx(1.0, abs=1e-5)
  _, chunk = run_stream(task, 2, 15)
  inputs, targets = np.asarray(chunk.inputs), np.asarray(chunk.targets)
  for lane in range(2):
    for steps in lane_sequences(chunk, lane):
      v = inputs[steps[0], lane, :3]
      assert inputs[steps[0], lane, 3] == 1.0
      assert not inputs[steps[1:], lane].any()
      assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-6)
      for t, step in enumerate(steps):
        expected = np.linalg.matrix_power(rotation_matrix, t + 1) @ v
        np.testing.assert_allclose(targets[step, lane], expected, atol=1e-5)
      np.testing.assert_array_equal(chunk.weights[steps, lane], [0, 0, 0, 1, 1])


def test_rotation_baseline_is_exact():
  """Unit-vector targets: predicting 0 has MSE 1/d per entry exactly."""
  task = suite.make_task("rotation", dim=4, length=6)
  assert task.metric.baseline == 0.25
  _, chunk = run_stream(task, 5, 20)
  zeros = jnp.zeros(chunk.targets.shape)
  _, sums = jax.vmap(task.metric.update, in_axes=(None, 0, 0))((), zeros, chunk)
  assert float(task_metrics.value(sums)) == pytest.approx(0.25, rel=1e-5)


@pytest.mark.parametrize("start_symbol", [False, True])
def test_anbn_strings_are_well_formed(start_symbol):
  task = suite.make_task("anbn", n_min=2, n_max=5, start_symbol=start_symbol)
  assert task.input_size == 3 + start_symbol
  _, chunk = run_stream(task, 4, 80)
  tokens = np.argmax(np.asarray(chunk.inputs), -1)
  targets = np.asarray(chunk.targets)
  seen = set()
  for lane in range(4):
    for steps in lane_sequences(chunk, lane):
      n = (len(steps) - 1) // 2
      assert 2 <= n <= 5
      seen.add(n)
      inputs, expected = anbn.encode(n, start_symbol)
      np.testing.assert_array_equal(tokens[steps, lane], inputs)
      np.testing.assert_array_equal(targets[steps, lane], expected)
  assert len(seen) > 2  # n varies, so lanes drift apart
  assert not np.array_equal(chunk.resets[:, 0], chunk.resets[:, 1])


def test_anbn_encodings():
  assert anbn.encode(2, start_symbol=True) == (
    [anbn.S, anbn.A, anbn.A, anbn.B, anbn.B],
    [anbn.A, anbn.A, anbn.B, anbn.B, anbn.T],
  )
  assert anbn.encode(2) == (
    [anbn.A, anbn.A, anbn.B, anbn.B, anbn.T],
    [anbn.A, anbn.B, anbn.B, anbn.T, anbn.T],
  )


def anbn_solved(task, chunk, logits):
  """The metric's value over `chunk` for `(T, B, 3)` logits."""

  def body(state, inputs):
    logits, batch = inputs
    return task.metric.update(state, logits, batch)

  _, sums = jax.lax.scan(
    body, task.metric.init(chunk.resets.shape[1]), (logits, chunk)
  )
  return float(task_metrics.value(sums))


def test_anbn_sequences_solved():
  """The targets as predictions solve every sequence; reading only the
  current symbol (a -> a, b -> b, T -> T after the first b... here: the
  best memoryless guess, b after b) solves none but n = 1; a wrong
  prediction on a nondeterministic step (after an a) costs nothing."""
  task = suite.make_task("anbn", n_min=1, n_max=4)
  assert task.metric.baseline == 0.25
  _, chunk = run_stream(task, 16, 200)
  targets = np.asarray(chunk.targets)
  perfect = jax.nn.one_hot(targets, 3)
  assert anbn_solved(task, chunk, perfect) == 1.0
  after_a = np.argmax(np.asarray(chunk.inputs), -1) == anbn.A
  sloppy = jax.nn.one_hot(np.where(after_a, anbn.T, targets), 3)
  assert anbn_solved(task, chunk, sloppy) == 1.0
  tokens = np.argmax(np.asarray(chunk.inputs), -1)
  memoryless = np.where(tokens == anbn.B, anbn.B, targets)
  value = anbn_solved(task, chunk, jax.nn.one_hot(memoryless, 3))
  assert value == 0.0  # every n >= 1 ends with b -> T, predicted b


@pytest.mark.parametrize("name", ["henon", "lorenz"])
def test_series_match_a_numpy_reference(name):
  """The first steps of each lane equal the map / Euler scheme in NumPy
  float64 from the lane's state, standardised; resets every
  `sequence_length` steps."""
  module = {"henon": henon, "lorenz": lorenz}[name]
  task = suite.make_task(name, sequence_length=4)
  stream = task.init_stream(KEY, 3)
  _, chunk = jax.jit(task.chunk, static_argnums=1)(stream, 10)
  for lane in range(3):
    state = np.asarray(stream.state[lane], np.float64)
    if name == "henon":
      orbit = henon.reference_orbit(state[0], state[1], 10)
    else:
      orbit = lorenz.reference_orbit(state, 10)
    standardised = (orbit - module.MEAN) / module.STD
    np.testing.assert_allclose(
      chunk.inputs[:, lane, 0], standardised[:-1], atol=1e-4
    )
    np.testing.assert_allclose(
      chunk.targets[:, lane, 0], standardised[1:], atol=1e-4
    )
  np.testing.assert_array_equal(
    chunk.resets[:, 0], [1, 0, 0, 0, 1, 0, 0, 0, 1, 0]
  )
  assert chunk.weights.shape == (10, 3) and bool((chunk.weights == 1).all())


@pytest.mark.parametrize("name", ["henon", "lorenz"])
def test_series_are_standardised_and_baselines_hold(name):
  """Long streams have mean ~0, variance ~1 (predicting the mean: MSE 1),
  and the documented last-value MSE."""
  module = {"henon": henon, "lorenz": lorenz}[name]
  task = suite.make_task(name)
  _, chunk = run_stream(task, 8, 4000)
  assert abs(float(chunk.inputs.mean())) < 0.1
  assert float(chunk.inputs.std()) == pytest.approx(1.0, abs=0.05)
  last_value = float(dynamical_streams.last_value_mse(chunk))
  assert last_value == pytest.approx(module.LAST_VALUE_MSE, rel=0.1)
  assert task.metric.baseline == 1.0


BAD_SETTINGS = [
  ("copy_memory", dict(num_symbols=0), "num_symbols"),
  ("copy_memory", dict(num_recall=-1), "num_recall"),
  ("copy_memory", dict(delay=0), "delay"),
  ("copy_memory", dict(protocol="copy"), "protocol"),
  ("rotation", dict(dim=0), "dim"),
  ("rotation", dict(length=0), "length"),
  ("rotation_recall", dict(recall=65), "recall"),
  ("rotation", dict(rotation_seed=-1), "rotation_seed"),
  ("anbn", dict(n_min=0), "n_min"),
  ("anbn", dict(n_min=5, n_max=4), "n_max"),
  ("anbn", dict(metric="bits"), "metric"),
  ("henon", dict(sequence_length=-1), "sequence_length"),
  ("lorenz", dict(sample_every=0), "sample_every"),
  ("mackey_glass", dict(sample_every=0), "sample_every"),
  ("mackey_glass", dict(sequence_length=1.5), "sequence_length"),
]


@pytest.mark.parametrize("name,settings,argument", BAD_SETTINGS)
def test_bad_settings_name_the_argument(name, settings, argument):
  with pytest.raises(ValueError, match=argument):
    suite.make_task(name, **settings)


@pytest.mark.parametrize("name", ["henon", "anbn", "rotation"])
def test_bad_sizes_name_the_argument_for_every_stream(name):
  task = suite.make_task(name, **SMALL.get(name, {}))
  with pytest.raises(ValueError, match="batch_size"):
    task.init_stream(KEY, 0)
  with pytest.raises(ValueError, match="num_steps"):
    task.chunk(task.init_stream(KEY, 2), 0)


def test_mackey_glass_stream_continues_the_series():
  """The streamed lanes' targets, over two chunks, are `mackey_glass`'s
  samples for the same key; inputs are the previous samples."""
  task = suite.make_task("mackey_glass", sample_every=3, sequence_length=5)
  run = jax.jit(
    lambda key: jax.lax.scan(
      lambda stream, _: task.chunk(stream, 4),
      task.init_stream(key, 2),
      None,
      length=2,
    )[1]
  )
  chunks = run(KEY)
  targets = np.asarray(chunks.targets).reshape(8, 2)
  inputs = np.asarray(chunks.inputs).reshape(8, 2)
  reference = np.asarray(series.mackey_glass(KEY, 2, 8, sample_every=3))
  np.testing.assert_allclose(targets, reference, atol=1e-5)
  np.testing.assert_allclose(inputs[1:], reference[:-1], atol=1e-5)
  np.testing.assert_array_equal(
    np.asarray(chunks.resets).reshape(8, 2)[:, 0], [1, 0, 0, 0, 0, 1, 0, 0]
  )


CHAOTIC = ("henon", "lorenz", "mackey_glass")


def test_presets_follow_the_peer_protocol():
  """configs/suite_task.py has a preset per task at sketched-rtrl's
  protocol (run_m3.py's defaults) and steps, with every setting of its task
  listed."""
  protocol = dict(
    cell="rnn",
    hidden_size=64,
    batch_size=8,
    optimizer="adam",
    learning_rate=1e-3,
    truncation=25,
  )
  for name in suite.names():
    config = load_config("suite_task", name)
    assert config.task == name
    assert config.num_steps == (15_000 if name in CHAOTIC else 20_000) + (
      10_000 if name == "rotation_recall" else 0
    )
    assert {key: config[key] for key in protocol} == protocol
    task = suite.make_task(name, **dict(config.task_settings))
    assert dict(config.task_settings) == task.settings
