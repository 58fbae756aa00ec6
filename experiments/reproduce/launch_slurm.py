"""`--launcher slurm`: a target's programs as SLURM jobs, through submitit.

Each wave of programs (`programs.stages`: a program after those it reads)
is one job array; a wave's array starts once the jobs it reads have ended
well (`--dependency=afterok`, and `--kill-on-invalid-dep=yes` cancels it
if they failed). A last job, after all of them (`afterany`), runs
`--collect`: the figures and tables, marked incomplete if a program is
missing. Every job runs exactly the command that runs its program alone
(`programs.Target.command`, what the local launchers run), in a child
process, into the same workdir; its stdout and stderr are submitit's log
files under `WORKDIR/TARGET/launch/slurm/`, and `records.py` keeps which
job runs which program.

Preemption and time limits: submitit asks SLURM to signal the job
`--signal-delay-s` before its time limit (`--signal=USR2@90`, and USR2 on
preemption where the cluster sets `preempt_send_user_signal`); it then
calls `ProgramJob.checkpoint`, which stops the program as SIGTERM does
(the run loop finishes its chunk, checkpoints and exits) and requeues the
job (`scontrol requeue`: the same job id, so the requeued program may take
over its own workdir). A SIGTERM that reaches the program first stops
it the same way; the job then requeues itself if SLURM still has it
RUNNING (`scancel --signal=TERM`), and leaves a job cancelled, preempted
(SLURM requeues it where PreemptMode=REQUEUE) or timed out to SLURM.
Requeued, the same command resumes from the checkpoint: the numbers equal
an uninterrupted run's. Time-limit requeues are capped at
`--max-num-timeout`; preemptions are not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import subprocess
import sys
import time

from experiments.reproduce import programs as programs_lib
from experiments.reproduce import records
from experiments.reproduce import slurm_checks
from experiments.reproduce import status

REPO_ROOT = os.path.dirname(os.path.dirname(programs_lib.REPRODUCE_SCRIPT))


@dataclasses.dataclass(frozen=True)
class Options:
  """The jobs' resources, named as submitit's SlurmExecutor and sbatch
  name them (`scripts/reproduce.py --help` has each default)."""

  partition: str = ""  # '' = the cluster's default partition
  gpus_per_node: int = 1
  cpus_per_task: int = 0  # 0 = the cluster's default
  mem_gb: float = 0  # 0 = the partition's default
  timeout_min: float = 24 * 60
  array_parallelism: int = 256
  signal_delay_s: int = 90
  max_num_timeout: int = 20
  sbatch: tuple[tuple[str, str | bool], ...] = ()  # more sbatch flags
  workdir_is_shared: bool = False


def preempt_signal() -> signal.Signals:
  """The signal submitit handles (USR2 unless SUBMITIT_PREEMPT_SIGNAL)."""
  return getattr(
    signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
  )


def _ignore_preempt_signal() -> None:  # In the child, before exec.
  signal.signal(preempt_signal(), signal.SIG_IGN)


def _reap(pid: int) -> None:
  with contextlib.suppress(ChildProcessError):  # Already reaped.
    os.waitpid(pid, 0)


def _still_running() -> bool:
  """This job is RUNNING for SLURM (not cancelled, preempted or timed
  out)."""
  job = os.environ.get("SLURM_JOB_ID", "")
  state = subprocess.run(
    ["squeue", "-h", "-j", job, "-o", "%T"],
    capture_output=True,
    text=True,
    timeout=60,
    check=False,
  ).stdout.strip()
  print(f"SLURM's state of job {job}: {state or 'unknown'}", flush=True)
  return bool(job) and state == "RUNNING"


class ProgramJob:
  """What a job runs: `command` in a child process; raises if it fails.

  The child ignores submitit's signal (SLURM signals every process of the
  job); on it, submitit calls `checkpoint` here, which sends the child
  SIGTERM (unless a SIGTERM already reached it) and waits for it to
  checkpoint and exit; submitit then requeues the job with a fresh
  `ProgramJob`, whose child resumes.
  """

  def __init__(self, command: list[str]):
    self.command = list(command)
    self._pid: int | None = None
    self._terms: list[int] = []

  def __getstate__(self):
    return {"command": self.command}

  def __setstate__(self, state):
    self.__init__(state["command"])

  def __call__(self) -> int:
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
      self._terms.append(signum)
      if callable(previous):
        previous(signum, frame)  # submitit's: logs it

    signal.signal(signal.SIGTERM, on_term)
    print(f"$ {' '.join(self.command)}", flush=True)
    # The job's directory is where it was submitted from, as the local
    # launcher's (relative paths, e.g. DATA_DIR, mean the same).
    process = subprocess.Popen(self.command, preexec_fn=_ignore_preempt_signal)
    self._pid = process.pid
    code = process.wait()
    self._pid = None
    if code and self._terms and _still_running():
      # SIGTERM alone (`scancel --signal=TERM`) stopped the program at a
      # checkpoint: requeue as submitit does on its own signal (its handler
      # calls `checkpoint`, requeues the job and exits). A job cancelled,
      # preempted or at its time limit is not RUNNING any more: SLURM
      # decides what follows.
      print("Stopped by SIGTERM: requeueing the job.", flush=True)
      os.kill(os.getpid(), preempt_signal())
      time.sleep(30)
    if code and self._terms:
      raise RuntimeError(f"{status.STOPPED}: {' '.join(self.command)}")
    if code:
      raise RuntimeError(
        f"the program exited with code {code}: {' '.join(self.command)}"
      )
    return code

  def checkpoint(self, *args, **kwargs):
    """submitit's signal (time limit, preemption): stop the child at a
    checkpoint; requeue a fresh job."""
    del args, kwargs
    import submitit  # pylint: disable=g-import-not-at-top

    pid = self._pid
    if pid is not None:
      if not self._terms:
        os.kill(pid, signal.SIGTERM)
      _reap(pid)
    return submitit.helpers.DelayedSubmission(ProgramJob(self.command))


def _executor(target: programs_lib.Target, options: Options, partition: str):
  import submitit  # pylint: disable=g-import-not-at-top

  folder = os.path.join(records.folder(target.folder), "slurm")
  executor = submitit.SlurmExecutor(
    folder=folder, max_num_timeout=options.max_num_timeout
  )
  params: dict = dict(
    job_name=target.name,
    partition=partition,
    time=int(math.ceil(options.timeout_min)),
    array_parallelism=options.array_parallelism,
    signal_delay_s=options.signal_delay_s,
    setup=[f"export PYTHONPATH={REPO_ROOT}${{PYTHONPATH:+:$PYTHONPATH}}"],
    additional_parameters={
      "kill-on-invalid-dep": "yes",
      **dict(options.sbatch),
    },
  )
  if options.gpus_per_node:
    params["gpus_per_node"] = options.gpus_per_node
  if options.cpus_per_task:
    params["cpus_per_task"] = options.cpus_per_task
  if options.mem_gb:
    params["mem"] = f"{int(options.mem_gb * 1024)}M"
  executor.update_parameters(**params)
  return executor


def _record(key: str, label: str, job, command: list[str], partition: str):
  return {
    "key": key,
    "label": label,
    "launcher": "slurm",
    "job_id": job.job_id,
    "partition": partition,
    "log": str(job.paths.stdout),
    "err": str(job.paths.stderr),
    "result": str(job.paths.result_pickle),
    "command": command,
  }


def check(target, programs, options: Options) -> slurm_checks.Partition:
  """Every check of `slurm_checks`, in order; returns the partition.

  Raises:
    slurm_checks.LaunchError: the first that fails.
  """
  from experiments.reproduce import plan  # pylint: disable=g-import-not-at-top

  part = slurm_checks.partition(options.partition)
  slurm_checks.check_gpus(part, options.gpus_per_node)
  planned = plan.read(os.path.join(target.folder, f"plan_{target.scale}"))
  todo = [
    (target.key(p), p, plan._full_steps(p.experiment, p.config))  # pylint: disable=protected-access
    for p in programs
    if not p.done
  ]
  unknown = slurm_checks.check_time_limit(
    todo,
    planned,
    options.timeout_min,
    options.signal_delay_s,
    part.time_limit_min,
  )
  if unknown:
    print(
      f"Note: --timeout-min not checked against the checkpoint interval of "
      f"{len(unknown)} program(s) without a measured step time (run "
      "--plan on a node like the jobs', or it is checked on resubmission "
      "from their own metrics).",
      flush=True,
    )
  if not options.workdir_is_shared:
    slurm_checks.check_visible(
      part,
      {
        "--workdir": target.workdir,
        "the checkout": REPO_ROOT,
        "the Python": sys.executable,
      },
    )
  launched = records.latest(target.folder)
  slurm_ids = [
    r["job_id"] for r in launched.values() if r.get("launcher") == "slurm"
  ]
  slurm_checks.check_not_queued(launched, status.queue_states(slurm_ids))
  return part


def submit(target, programs, options: Options, part) -> list[dict]:
  """Submits every unfinished program, wave by wave, then the collect job;
  records and returns what was submitted."""
  keys = [target.key(p) for p in programs]
  needs = programs_lib.reads(programs)
  executor = _executor(target, options, part.name)
  job_of: dict[int, str] = {}
  submitted = []
  for wave in programs_lib.stages(programs):
    todo = [i for i in wave if not programs[i].done]
    if not todo:
      continue
    after = sorted({job_of[j] for i in todo for j in needs[i] if j in job_of})
    executor.update_parameters(
      dependency="afterok:" + ":".join(after) if after else None
    )
    commands = [target.command(keys[i]) for i in todo]
    with executor.batch():
      jobs = [executor.submit(ProgramJob(c)) for c in commands]
    wave_records = []
    for i, job, command in zip(todo, jobs, commands):
      job_of[i] = job.job_id
      wave_records.append(
        _record(keys[i], programs[i].label, job, command, part.name)
      )
    records.append(target.folder, wave_records)  # Kept if a later one fails.
    submitted += wave_records
  everything = sorted(set(job_of.values()))
  executor.update_parameters(
    dependency="afterany:" + ":".join(everything) if everything else None
  )
  command = target.command("", "--collect")
  job = executor.submit(ProgramJob(command))
  collect = _record(status.COLLECT_KEY, "", job, command, part.name)
  records.append(target.folder, [collect])
  return submitted + [collect]


def wait(target: programs_lib.Target, poll_seconds: float = 5) -> bool:
  """Waits for the collect job to end, printing the status when it
  changes; returns whether every program and the collect job are done."""
  shown = ""
  while True:
    table = status.rows(target, target.programs())
    text = status.report(target, table)
    if text != shown:
      print("\n" + text, flush=True)
      shown = text
    collect = [r for r in table if r.key == status.COLLECT_KEY]
    over = not collect or collect[0].state.split()[0] not in status.ACTIVE
    if over:
      return all(r.state == "DONE" for r in table)
    time.sleep(poll_seconds)
