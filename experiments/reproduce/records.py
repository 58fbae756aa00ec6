"""What was launched, where: `WORKDIR/TARGET/launch/records.jsonl`.

Each launcher appends one JSON object per program it starts or submits
(and the local launcher one more when it ends), so `--status` can say which
job or process runs each program, where its log is and what reruns it
alone. The newest record of a program wins; older ones stay as history.

A record: `key` (the program's, `programs.py`), `label`, `launcher`
(`local` or `slurm`), `job_id` (SLURM's, `123_4` for an array task; the
process id for a local process), `host`, `log` (stdout, where the program
prints) and `err` (stderr), `command` (what reruns it alone, a list),
`time` (seconds since the epoch), and for local processes `device` and,
once ended, `returncode`.
"""

from __future__ import annotations

import json
import os
import time

LAUNCH_DIR = "launch"
RECORDS_FILE = "records.jsonl"


def folder(target_folder: str) -> str:
  """`WORKDIR/TARGET/launch`: records, logs and SLURM's job files."""
  return os.path.join(target_folder, LAUNCH_DIR)


def append(target_folder: str, records: list[dict]) -> None:
  os.makedirs(folder(target_folder), exist_ok=True)
  now = time.time()
  with open(os.path.join(folder(target_folder), RECORDS_FILE), "a") as f:
    for record in records:
      f.write(json.dumps({"time": now, **record}) + "\n")


def latest(target_folder: str) -> dict[str, dict]:
  """The newest record of each program, by key (an ended local process:
  its start record updated with its end)."""
  path = os.path.join(folder(target_folder), RECORDS_FILE)
  if not os.path.exists(path):
    return {}
  newest: dict[str, dict] = {}
  with open(path) as f:
    for line in f:
      if not line.strip():
        continue
      record = json.loads(line)
      before = newest.get(record["key"], {})
      if "returncode" in record and before.get("job_id") == record.get(
        "job_id"
      ):
        record = {**before, **record}
      newest[record["key"]] = record
  return newest
