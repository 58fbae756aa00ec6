"""`--launcher local --devices 0,1,2,3`: a target's programs as parallel
processes on this machine, one per device.

Each program runs as its own process, `programs.Target.command(key)` (what
a SLURM job runs too), with `CUDA_VISIBLE_DEVICES` set to its device, at
most one per device at a time, in the order the target lists them, each
after the programs it reads have ended (`programs.reads`). Finished
programs are not started again. Every process prints to its own log,
`WORKDIR/TARGET/launch/logs/KEY.log`, and is recorded (`records.py`) for
`--status`. SIGTERM or SIGINT to the launcher is passed to every program
(each finishes its chunk, checkpoints and exits); a rerun resumes them.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
import signal
import socket
import subprocess
import time

from experiments.reproduce import common
from experiments.reproduce import programs as programs_lib
from experiments.reproduce import records

POLL_SECONDS = 0.5


def log_path(target: programs_lib.Target, key: str) -> str:
  name = key.replace(os.sep, "__") + ".log"
  return os.path.join(records.folder(target.folder), "logs", name)


def _start(target, program, key: str, device: str) -> subprocess.Popen:
  path = log_path(target, key)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  command = target.command(key)
  env = dict(os.environ, CUDA_VISIBLE_DEVICES=device)
  with open(path, "a") as log:
    log.write(f"\n$ CUDA_VISIBLE_DEVICES={device} {' '.join(command)}\n")
    log.flush()
    process = subprocess.Popen(
      command, env=env, stdout=log, stderr=subprocess.STDOUT
    )
  record = {
    "key": key,
    "label": program.label,
    "launcher": "local",
    "job_id": str(process.pid),
    "host": socket.gethostname(),
    "device": device,
    "log": path,
    "err": path,
    "command": command,
  }
  records.append(target.folder, [record])
  print(f"  started {key} on device {device} (log {path})", flush=True)
  return process


def run(
  target: programs_lib.Target,
  programs: Sequence[common.Program],
  devices: Sequence[str],
) -> dict[str, int | None]:
  """Runs every unfinished program; returns each program's exit code by
  key (0 for one finished before, None for one not started because a
  program it reads failed)."""
  keys = [target.key(p) for p in programs]
  needs = programs_lib.reads(programs)
  codes: dict[int, int | None] = {
    i: 0 for i, p in enumerate(programs) if p.done
  }
  waiting = [i for i in range(len(programs)) if i not in codes]
  running: dict[int, tuple[subprocess.Popen, str]] = {}
  free = list(devices)
  stop: list[int] = []

  def forward(signum, frame):
    del frame
    stop.append(signum)
    for process, _ in running.values():
      process.send_signal(signal.SIGTERM)

  previous = {
    sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)
  }
  try:
    while waiting or running:
      for i in list(waiting):
        if any(j in codes and codes[j] != 0 for j in needs[i]):
          codes[i] = None  # What it reads failed.
          waiting.remove(i)
          print(f"  not started {keys[i]}: a program it reads failed")
        elif free and not stop and all(codes.get(j) == 0 for j in needs[i]):
          device = free.pop(0)
          running[i] = (_start(target, programs[i], keys[i], device), device)
          waiting.remove(i)
      if stop and not running:
        break
      time.sleep(POLL_SECONDS)
      for i, (process, device) in list(running.items()):
        if process.poll() is None:
          continue
        codes[i] = process.returncode
        free.append(device)
        del running[i]
        records.append(
          target.folder,
          [
            {
              "key": keys[i],
              "job_id": str(process.pid),
              "returncode": process.returncode,
            }
          ],
        )
        word = "finished" if process.returncode == 0 else "FAILED"
        print(f"  {word} {keys[i]} (exit {process.returncode})", flush=True)
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  if stop:
    raise SystemExit(128 + stop[0])
  return {keys[i]: codes.get(i) for i in range(len(programs))}
