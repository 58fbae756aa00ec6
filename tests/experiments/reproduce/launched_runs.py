"""What the launcher tests share: `scripts/reproduce.py` as a command, and
the comparison of two runs of a target, bit for bit."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from helpers import REPO_ROOT

REPRODUCE = str(REPO_ROOT / "scripts" / "reproduce.py")
# A cheap target with four programs: two trained Copy networks (batch 128
# makes each take seconds, long enough to be signalled in mid-run) and a
# gradient-cosine run on each, which reads the trained checkpoint.
TARGET = "ok_fig10_11"


def sets(num_steps: int) -> list[str]:
  return [
    "--set",
    f"num_steps={num_steps}",
    "--set",
    "log_every=100",
    "--set",
    "batch_size=128",
    "--set",
    "estimators=ok:1",
  ]


def reproduce(
  *args: str, timeout: float = 900, env: dict | None = None
) -> subprocess.CompletedProcess:
  """`scripts/reproduce.py ARGS` in a child; its output and exit code."""
  return subprocess.run(
    [sys.executable, REPRODUCE, *args],
    capture_output=True,
    text=True,
    timeout=timeout,
    env=env,
  )


def _records(path: pathlib.Path) -> list[dict]:
  """`metrics.jsonl` without its timings (steps and examples per second)."""
  return [
    {k: v for k, v in json.loads(line).items() if not k.endswith("_second")}
    for line in path.read_text().splitlines()
  ]


def assert_same_outputs(a: pathlib.Path, b: pathlib.Path) -> list[str]:
  """Every file of one target's folder `a` is in `b` with the same bytes
  (`metrics.jsonl`: the same records but for their timings; a config's
  paths inside the workdir, relative to it), and `b` has no other but
  checkpoints (an interrupted program's); the launch records and logs
  aside. Returns the files compared."""

  def files(root):
    return sorted(
      str(p.relative_to(root))
      for p in root.rglob("*")
      if p.is_file() and "launch" not in p.relative_to(root).parts
    )

  def content(root, name):  # Paths inside --workdir written as such.
    return (root / name).read_bytes().replace(bytes(root.parent), b"WORKDIR")

  names = files(a)
  # An interrupted program keeps the checkpoint it wrote when stopped.
  more = [n for n in files(b) if n not in names]
  assert all("/checkpoint_" in n for n in more), (names, files(b))
  assert set(names) <= set(files(b)), (names, files(b))
  for name in names:
    if name.endswith("metrics.jsonl"):
      assert _records(a / name) == _records(b / name), name
    else:
      assert content(a, name) == content(b, name), name
  assert any(n.endswith(".msgpack") for n in names)  # checkpoints compared
  assert "figure.png" in names and "table.json" in names
  return names


def log_text(record: dict) -> str:
  """A launched program's stdout and stderr."""
  paths = dict.fromkeys([record["log"], record.get("err", record["log"])])
  return "".join(
    pathlib.Path(p).read_text() for p in paths if p and os.path.exists(p)
  )
