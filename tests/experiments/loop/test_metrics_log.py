"""`metrics.jsonl` (`experiments/loop/metrics_log.py`): strict JSON, each
step once and in order; a cut-off last line dropped, any other bad line
named by file and line; a failed append leaves no partial line."""

from __future__ import annotations

import errno
import json
import math

import pytest
import run_faults

from experiments.loop import errors
from experiments.loop import metrics_log


def write_lines(tmp_path, *lines: str, end: str = "\n"):
  path = tmp_path / metrics_log.METRICS_FILE
  path.write_text("\n".join(lines) + end)
  return path


def test_nonfinite_values_are_strict_json_and_read_back_as_floats(tmp_path):
  log = metrics_log.MetricsLog(str(tmp_path))
  log.append({"step": 1, "loss": math.nan, "runs": [1.0, math.inf, -math.inf]})
  text = (tmp_path / metrics_log.METRICS_FILE).read_text()
  assert text == (
    '{"step": 1, "loss": "NaN", "runs": [1.0, "Infinity", "-Infinity"]}\n'
  )
  json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}"))
  (record,) = metrics_log.read_metrics(str(tmp_path))
  assert math.isnan(record["loss"])
  assert record["runs"] == [1.0, math.inf, -math.inf]


def test_cut_off_last_line_is_dropped_and_reported(tmp_path):
  path = write_lines(tmp_path, '{"step": 1}', '{"step": 2, "lo', end="")
  scanned = metrics_log.scan(str(path))
  assert scanned.steps == [1] and scanned.cut_line == 2
  assert metrics_log.read_metrics(str(tmp_path)) == [{"step": 1}]
  metrics_log.MetricsLog(str(tmp_path)).truncate_after(10)
  assert path.read_text() == '{"step": 1}\n'


def test_bad_line_in_the_middle_names_file_and_line(tmp_path):
  path = write_lines(tmp_path, '{"step": 1}', '{"step": 2, "lo', '{"step": 3}')
  with pytest.raises(errors.MetricsLogError, match=f"{path}:2 is not JSON"):
    metrics_log.read_metrics(str(tmp_path))


@pytest.mark.parametrize(
  "lines, problem",
  [
    (('{"step": 1}', '{"step": 3}', '{"step": 2}'), "step 2 after step 3"),
    (('{"step": 1}', '{"step": 1}'), "step 1 after step 1"),
    (('{"step": 1}', "[1, 2]"), "no integer 'step'"),
  ],
)
def test_records_out_of_order_or_without_step_are_refused(
  tmp_path, lines, problem
):
  path = write_lines(tmp_path, *lines)
  with pytest.raises(errors.MetricsLogError, match=problem) as error:
    metrics_log.scan(str(path))
  assert f"{path}:" in str(error.value)


def test_failed_append_leaves_no_partial_line(tmp_path, monkeypatch):
  log = metrics_log.MetricsLog(str(tmp_path))
  log.append({"step": 1})
  full = OSError(errno.ENOSPC, "No space left on device")
  with (
    run_faults.die_at_write(monkeypatch, 1, error=full),
    pytest.raises(errors.WorkdirWriteError) as error,
  ):
    log.append({"step": 2, "loss": 1.0})
  assert "no space left" in str(error.value) and log.path in str(error.value)
  line = len(metrics_log.encode({"step": 2, "loss": 1.0})) + 1
  assert f"needs {line} bytes" in str(error.value)
  assert (tmp_path / metrics_log.METRICS_FILE).read_text() == '{"step": 1}\n'
  log.append({"step": 2})
  assert [r["step"] for r in metrics_log.read_metrics(str(tmp_path))] == [1, 2]
