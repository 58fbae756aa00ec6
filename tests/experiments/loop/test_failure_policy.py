"""A failed run never passes as a finished one (`experiments/loop/health.py`):
skipped updates are counted and stop the run after
`max_consecutive_skips` in a row; a loss past `divergence_factor` x the
uninformed loss is flagged and stops the run; stacked runs fail one by one."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
import run_faults

from experiments.loop import errors
from experiments.loop import health
from experiments.loop import workdir as workdir_lib


def test_skipped_updates_are_counted_and_stop_the_run(tmp_path, capsys):
  """The issue's case: `skip_nonfinite_updates` with an infinite learning
  rate no longer logs NaN to the end and exits 0."""
  with pytest.raises(errors.TrainingFailedError) as error:
    run_faults.train(
      tmp_path,
      num_steps=1000,
      skip_nonfinite_updates=True,
      learning_rate=math.inf,
      max_consecutive_skips=60,
    )
  assert error.value.exit_code == 3
  message = str(error.value)
  assert "99 updates in a row were skipped" in message
  assert "by step 100" in message and "max_consecutive_skips = 60" in message
  assert "No checkpoint was written yet" in message
  records = workdir_lib.read_metrics(str(tmp_path))
  assert [r["step"] for r in records] == [50]
  assert records[0]["skipped_updates"] == 49  # The first update went through.
  assert "skipped=49" in capsys.readouterr().out
  run_faults.assert_strict_log(tmp_path)


def test_default_limit_is_100_in_a_row(tmp_path):
  with pytest.raises(errors.TrainingFailedError, match="149 updates in a row"):
    run_faults.train(
      tmp_path, skip_nonfinite_updates=True, learning_rate=math.inf
    )


def test_diverged_loss_is_flagged_and_stops_the_run(tmp_path, capsys):
  """The issue's case: learning rate 1e6 finished at 2.6e6 bits without a
  word; now the record is flagged on the progress line and the run stops
  (exit 3) without checkpointing the diverged state."""
  with pytest.raises(errors.TrainingFailedError) as error:
    run_faults.train(tmp_path, learning_rate=1e6)
  message = str(error.value)
  assert message.startswith("Diverged: loss_bits = ")
  assert "above 10 x the loss of an uninformed prediction (2)" in message
  records = workdir_lib.read_metrics(str(tmp_path))
  assert records[-1]["loss_bits"] > 20
  step = records[-1]["step"]
  line = next(
    x for x in capsys.readouterr().out.splitlines() if f"step {step}/" in x
  )
  assert line.endswith("DIVERGED")
  assert not any(tmp_path.glob(f"checkpoint_{step:010d}*"))


def test_divergence_factor_zero_turns_the_check_off(tmp_path):
  records = run_faults.train(tmp_path, learning_rate=1e6, divergence_factor=0)
  assert records[-1]["step"] == 300 and records[-1]["loss_bits"] > 20


def test_a_diverging_stacked_run_is_reported_and_the_others_go_on(tmp_path):
  messages = []
  records = run_faults.train(
    tmp_path,
    learning_rates=(1e-2, 1e6),
    log=messages.append,
  )
  assert records[-1]["step"] == 300
  assert any("Run 1" in m and "Diverged" in m for m in messages), messages
  summary = json.loads((tmp_path / workdir_lib.SUMMARY_FILE).read_text())
  (failed,) = summary["failed_runs"]
  assert failed["run"] == 1 and "Diverged" in failed["reason"]
  assert summary["runs"][1]["learning_rate"] == 1e6


def test_every_stacked_run_failing_stops(tmp_path):
  with pytest.raises(errors.TrainingFailedError, match="Every run failed"):
    run_faults.train(tmp_path, learning_rates=(1e6, 2e6))


def _finite_state(max_errors: int = 10):
  tx = optax.apply_if_finite(optax.sgd(1.0), max_errors)
  params = {"w": jnp.ones(3)}
  return tx, params, tx.init(params)


def test_skip_counters_read_optax_apply_if_finite():
  tx, params, state = _finite_state()
  bad = {"w": jnp.full(3, jnp.nan)}
  for grads in (bad, bad, {"w": jnp.ones(3)}, bad):
    _, state = tx.update(grads, state, params)
  holder = {"trainer": {"opt_state": state}}
  assert health.has_skip_counters(holder)
  counters = jax.jit(lambda s: health.skip_counters(s, stacked=False))(holder)
  assert int(counters["consecutive"]) == 1 and int(counters["total"]) == 3
  stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, 2 * a]), holder)
  counters = health.skip_counters(stacked, stacked=True)
  np.testing.assert_array_equal(counters["total"], [3, 6])
  assert not health.has_skip_counters(
    {"opt_state": optax.sgd(1.0).init(params)}
  )


def test_occasional_skips_do_not_stop_a_run():
  config = ml_collections.ConfigDict(
    {"skip_nonfinite_updates": True, "max_consecutive_skips": 3}
  )
  watch = health.Health(config, [{"seed": 0}], chunk_steps=50)
  nan = {"loss": np.float32(np.nan)}
  watch.check_chunk(nan, {"consecutive": 2, "total": 7}, step=50)
  record = {"step": 50}
  watch.add_skips(record, {"consecutive": 2, "total": 7})
  assert record["skipped_updates"] == 7 and not watch.failed
  with pytest.raises(errors.TrainingFailedError, match="3 updates in a row"):
    watch.check_chunk(nan, {"consecutive": 3, "total": 10}, step=100)
