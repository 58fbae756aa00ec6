"""`reproduce.py TARGET --status --workdir W`: each program's job, state,
steps reached and ETA, and for a failed one its log and the command that
reruns it alone.

States come from the program's own output first (DONE: it finished, as
`--collect` sees it), then from what ran it (`records.py`): a SLURM job's
state from `squeue` while it is queued or running, else from `sacct` where
the cluster keeps accounting, else from the result file submitit writes
when the job's function returns or raises; a local process from its exit
code, or whether it is alive. Steps reached and the step rate are the last
record of the program's `metrics.jsonl`; the ETA is the steps left at that
rate, for a running program.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import math
import os
import pickle
import shlex
import socket
import subprocess
import time

from experiments.loop import workdir as workdir_lib
from experiments.reproduce import common
from experiments.reproduce import plan
from experiments.reproduce import programs as programs_lib
from experiments.reproduce import records

# What a SLURM job raises when SIGTERM stopped its program at a checkpoint
# and it was not requeued (`launch_slurm.ProgramJob`).
STOPPED = (
  "stopped by SIGTERM at a checkpoint (cancelled, preempted or timed out)"
)
# The record key of the job that runs `--collect` after the programs.
COLLECT_KEY = "(collect)"
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED")
ACTIVE += ("RESIZING", "SUSPENDED", "PREEMPTED", "REQUEUE_HOLD", "STAGE_OUT")


@dataclasses.dataclass
class Row:
  key: str
  label: str
  job: str  # job id or pid, '-' if never launched
  state: str
  steps: str  # 'reached/total'
  eta: str
  record: dict

  @property
  def failed(self) -> bool:
    return self.state.startswith(
      ("FAILED", "ENDED", "CANCELLED", "TIMEOUT", "STOPPED")
    )


def _command(argv: list[str]) -> list[str]:
  """`argv`'s output lines, or [] when the command is missing or fails."""
  try:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.TimeoutExpired):
    return []
  return done.stdout.splitlines() if done.returncode == 0 else []


def _squeue(job_ids: Sequence[str]) -> dict[str, tuple[str, float]]:
  """`squeue`'s state of each queued or running job (array tasks one by
  one, `123_4`), with the reason of a pending one (`PENDING
  (Dependency)`), and when it started (seconds since the epoch; nan if
  it has not)."""
  bases = sorted({j.split("_")[0] for j in job_ids})
  if not bases:
    return {}
  lines = _command(
    ["squeue", "-h", "-r", "-o", "%i|%T|%r|%S", "-j", ",".join(bases)]
  )
  found = {}
  for line in lines:
    job, state, reason, start = (line.split("|") + ["", "", ""])[:4]
    wait = f" ({reason})" if state == "PENDING" and reason != "None" else ""
    try:
      started = time.mktime(time.strptime(start.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
      started = math.nan
    found[job.strip()] = (state.strip() + wait, started)
  return found


def queue_states(job_ids: Sequence[str]) -> dict[str, str]:
  """`squeue`'s state of each queued or running job (`_squeue`)."""
  return {job: state for job, (state, _) in _squeue(job_ids).items()}


def accounting_states(job_ids: Sequence[str]) -> dict[str, str]:
  """`sacct`'s state of each job; empty where the cluster keeps no
  accounting (`sacct` then fails)."""
  bases = sorted({j.split("_")[0] for j in job_ids})
  if not bases:
    return {}
  lines = _command(
    ["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(bases)]
  )
  return dict(
    (line.split("|")[0], line.split("|")[1].split()[0])
    for line in lines
    if "|" in line and line.split("|")[1]
  )


def submitit_outcome(record: dict) -> tuple[str, str]:
  """`('success', value)` or `('error', traceback)` from the result file
  submitit writes when the job's function returns or raises; `('', '')`
  when there is none (the job was killed, cancelled, or is not over)."""
  path = record.get("result", "")
  if not path or not os.path.exists(path):
    return "", ""
  try:
    with open(path, "rb") as f:
      outcome, value = pickle.load(f)
  except (OSError, EOFError, pickle.UnpicklingError, ValueError):
    return "", ""
  return str(outcome), str(value)


def _alive(pid: str) -> bool:
  try:
    with open(f"/proc/{int(pid)}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except (OSError, ValueError, IndexError):
    return False


def job_state(record: dict, queued: dict, accounted: dict) -> str:
  """The state of the job or process of `record` (its program not done)."""
  job = record.get("job_id", "")
  if record.get("launcher") == "local":
    if "returncode" in record:
      code = record["returncode"]
      return f"FAILED (exit {code})" if code else "ENDED without its output"
    here = record.get("host") == socket.gethostname()
    if here and _alive(job):
      return "RUNNING"
    return "ENDED (its launcher stopped)"
  if job in queued:
    return queued[job]
  if job in accounted and accounted[job] not in ACTIVE:
    state = accounted[job]
    return state if state != "COMPLETED" else "ENDED without its output"
  outcome, text = submitit_outcome(record)
  if outcome == "error" and STOPPED in text:
    return (
      "STOPPED at a checkpoint (SIGTERM: cancelled, preempted or timed out)"
    )
  if outcome == "error":
    return "FAILED"
  if outcome == "success":
    return "ENDED without its output"
  return "ENDED (no result: cancelled, timed out or killed)"


def progress(program: common.Program) -> tuple[int | None, int, float]:
  """`(steps reached or None, steps in all, steps per second or nan)` from
  the last record of the program's `metrics.jsonl`."""
  total = plan._full_steps(program.experiment, program.config)  # pylint: disable=protected-access
  if not os.path.isdir(program.path):
    return None, total, float("nan")
  records_ = workdir_lib.read_metrics(program.path)
  if not records_:
    return None, total, float("nan")
  last = records_[-1]
  rate = last.get("steps_per_second")
  return int(last.get("step", 0)), total, float(rate or "nan")


def _eta(left: int, rate: float, reached: int, started: float) -> str:
  """The time `left` steps take at the program's last steps per second, or
  (`~`, rough: compilation and a resumed run's earlier steps included) at
  the mean rate since its job or process started."""
  if rate > 0:
    return plan.duration(max(0, left) / rate)
  elapsed = time.time() - (started or math.nan)
  if reached > 0 and elapsed > 0:
    return "~" + plan.duration(max(0, left) * elapsed / reached)
  return "-"


def rows(
  target: programs_lib.Target, programs: Sequence[common.Program]
) -> list[Row]:
  """One row per program, in the target's order."""
  launched = records.latest(target.folder)
  slurm_ids = [
    r["job_id"] for r in launched.values() if r.get("launcher") == "slurm"
  ]
  in_queue = _squeue(slurm_ids)
  queued = {job: state for job, (state, _) in in_queue.items()}
  accounted = accounting_states(slurm_ids) if slurm_ids else {}
  out = []
  for program in programs:
    key = target.key(program)
    record = launched.get(key, {})
    reached, total, rate = progress(program)
    if program.done:
      state = "DONE"
    elif record:
      state = job_state(record, queued, accounted)
    else:
      state = (
        "NOT STARTED" if reached is None else "UNFINISHED (no job recorded)"
      )
    eta = "-"
    if state == "RUNNING" and reached is not None:
      since = in_queue.get(record.get("job_id", ""), ("", record.get("time")))
      eta = _eta(total - reached, rate, reached, since[1])
    steps = f"{reached if reached is not None else 0:,}/{total:,}"
    job = record.get("job_id", "-")
    out.append(Row(key, program.label, job, state, steps, eta, record))
  record = launched.get(COLLECT_KEY)
  if record:  # The job that builds the figures once the programs end.
    state = job_state(record, queued, accounted)
    if state == "ENDED without its output":  # It has none but the figures.
      state = "DONE"
    out.append(Row(COLLECT_KEY, "", record["job_id"], state, "-", "-", record))
  return out


def report(target: programs_lib.Target, table: Sequence[Row]) -> str:
  """The status table, then each failed program's log and rerun command."""
  lines = [
    f"# {target.name} --scale {target.scale} in {target.workdir}",
    "",
    "| program | job | state | steps | ETA |",
    "|---|---|---|---|---|",
  ]
  lines += [
    f"| {r.key} | {r.job} | {r.state} | {r.steps} | {r.eta} |" for r in table
  ]
  programs = [r for r in table if r.key != COLLECT_KEY]
  done = sum(r.state == "DONE" for r in programs)
  lines += ["", f"{done} of {len(programs)} programs done."]
  for r in table:
    if not r.failed:
      continue
    command = r.record.get("command") or target.command(r.key)
    lines += [
      "",
      f"{r.state}: {r.key}",
      f"  log: {r.record.get('log', '-')}",
    ]
    if r.record.get("err") not in (None, r.record.get("log")):
      lines.append(f"  errors: {r.record['err']}")
    lines.append(f"  rerun it alone: {shlex.join(command)}")
  return "\n".join(lines)
