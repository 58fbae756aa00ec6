"""What `--launcher slurm` checks before it submits anything: a SLURM that
answers, the partition, its GPUs and time limit, a time limit that covers
a checkpoint interval of every program, a workdir the jobs can see, and no
earlier submission of the target still queued. Each is a `LaunchError`
that names the option and what it should be."""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import math
import os
import socket
import subprocess

from experiments.loop import config_files
from experiments.loop import workdir as workdir_lib
from experiments.reproduce import common

# Filesystems every node of a cluster mounts alike.
SHARED_FILESYSTEMS = (
  "nfs",
  "nfs4",
  "lustre",
  "gpfs",
  "beegfs",
  "cifs",
  "smb3",
  "ceph",
  "cephfs",
  "fuse.ceph-fuse",
  "glusterfs",
  "fuse.glusterfs",
  "panfs",
  "wekafs",
  "gfs2",
  "ocfs2",
  "fuse.juicefs",
)


class LaunchError(ValueError):
  """Bad input for `--launcher slurm`, found before anything is submitted."""


@dataclasses.dataclass(frozen=True)
class Partition:
  name: str
  default: bool
  time_limit_min: float  # inf when unlimited
  gres: str  # e.g. 'gpu:8' or '(null)'
  nodes: tuple[str, ...]  # host names


def run(argv: list[str]) -> str:
  """`argv`'s output.

  Raises:
    LaunchError: SLURM's command is missing, hangs or fails.
  """
  try:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
  except FileNotFoundError as error:
    raise LaunchError(
      f"no SLURM reachable: `{argv[0]}` is not installed here ({error}). "
      "Run from a login node of the cluster, or `--launcher local`."
    ) from error
  except subprocess.TimeoutExpired as error:
    raise LaunchError(
      f"no SLURM reachable: `{' '.join(argv)}` did not answer in 30 s"
    ) from error
  if done.returncode:
    raise LaunchError(
      f"no SLURM reachable: `{' '.join(argv)}` failed: "
      f"{(done.stderr or done.stdout).strip()[:500]}"
    )
  return done.stdout


def minutes(text: str) -> float:
  """SLURM's time limit (`infinite`, `M`, `M:S`, `H:M:S`, `D-H[:M[:S]]`)
  in minutes."""
  text = text.strip()
  if text.lower() in ("infinite", "unlimited", "n/a", ""):
    return math.inf
  days, _, clock = text.rpartition("-")
  parts = [int(p) for p in clock.split(":")]
  if days:  # D-H, D-H:M, D-H:M:S
    h, m, s = (parts + [0, 0])[:3]
  elif len(parts) == 3:
    h, m, s = parts
  else:  # M or M:S
    h, (m, s) = 0, (parts + [0])[:2]
  return int(days or 0) * 1440 + h * 60 + m + s / 60


def partitions() -> dict[str, Partition]:
  """The cluster's partitions, from `sinfo`."""
  found: dict[str, Partition] = {}
  for line in run(["sinfo", "-h", "-o", "%P|%l|%G|%N"]).splitlines():
    name, limit, gres, nodes = (line.split("|") + ["", "", ""])[:4]
    default = name.endswith("*")
    name = name.rstrip("*")
    hosts = tuple(run(["scontrol", "show", "hostnames", nodes]).split())
    before = found.get(name)
    if before:
      hosts = before.nodes + hosts
      gres = before.gres if gres == "(null)" else gres
    found[name] = Partition(name, default, minutes(limit), gres, hosts)
  if not found:
    raise LaunchError("no SLURM reachable: `sinfo` lists no partition")
  return found


def partition(name: str) -> Partition:
  """`name`'s partition, or the cluster's default one if `name` is ''."""
  known = partitions()
  if not name:
    default = [p for p in known.values() if p.default]
    if not default:
      raise LaunchError(
        f"--partition: the cluster has no default partition; choose one "
        f"of {sorted(known)}"
      )
    return default[0]
  if name not in known:
    raise LaunchError(
      f"--partition {name!r}: no such partition; the cluster has "
      f"{sorted(known)}"
    )
  return known[name]


def check_gpus(part: Partition, gpus_per_node: int) -> None:
  if gpus_per_node > 0 and "gpu" not in part.gres:
    raise LaunchError(
      f"--gpus-per-node {gpus_per_node}: partition {part.name!r} has no "
      f"GPUs (its nodes' GRES: {part.gres}); choose a GPU partition or "
      "--gpus-per-node 0"
    )


def seconds_per_step(
  program: common.Program, key: str, planned: dict[str, dict]
) -> tuple[float, str]:
  """`(seconds per step, where from)`: the program's own last record (a
  resubmission: measured on the cluster), else the target's plan
  (`--plan`), else `(nan, '')`."""
  if os.path.isdir(program.path):
    records = workdir_lib.read_metrics(program.path)
    rate = records[-1].get("steps_per_second") if records else None
    if isinstance(rate, (int, float)) and rate > 0:
      return 1 / rate, "its metrics.jsonl"
  row = planned.get(key, {})
  value = row.get("seconds_per_step")
  if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
    return float(value), "the plan"
  return math.nan, ""


def checkpoint_steps(program: common.Program, total_steps: int) -> int:
  """Steps between two checkpoints: `checkpoint_every`, or the whole
  program for one that writes none (the cosine runs, the suite)."""
  every = config_files.field_or(program.config, "checkpoint_every", 0)
  return min(int(every), total_steps) if every else total_steps


def check_time_limit(
  programs: Sequence[tuple[str, common.Program, int]],
  planned: dict[str, dict],
  timeout_min: float,
  signal_delay_s: int,
  limit_min: float,
) -> list[str]:
  """Raises a `LaunchError` for a time limit above the partition's, below
  the signal's delay, or shorter than a program's checkpoint interval
  (`programs`: `(key, program, total steps)`); returns the keys of the
  programs whose step time is unknown (not checked)."""
  if timeout_min > limit_min:
    raise LaunchError(
      f"--timeout-min {timeout_min:g}: above the partition's time limit "
      f"({limit_min:g} min)"
    )
  usable = timeout_min * 60 - signal_delay_s
  if usable <= 0:
    raise LaunchError(
      f"--timeout-min {timeout_min:g}: the job is signalled "
      f"--signal-delay-s {signal_delay_s} s before its end, so it must be "
      f"longer than {signal_delay_s / 60:.1f} min"
    )
  unknown, short = [], []
  for key, program, total in programs:
    step_s, source = seconds_per_step(program, key, planned)
    if not math.isfinite(step_s):
      unknown.append(key)
      continue
    interval = checkpoint_steps(program, total) * step_s
    if interval > usable:
      short.append(
        f"{key}: {checkpoint_steps(program, total):,} steps between "
        f"checkpoints x {step_s * 1e3:.1f} ms ({source}) = "
        f"{interval / 60:.1f} min"
      )
  if short:
    raise LaunchError(
      f"--timeout-min {timeout_min:g}: shorter than one checkpoint interval "
      f"(the job has {usable / 60:.1f} min before its signal); a job would "
      "never get past its last checkpoint:\n  "
      + "\n  ".join(short)
      + "\nRaise --timeout-min, or lower the interval (--set "
      "checkpoint_every=STEPS)."
    )
  return unknown


def mount_type(path: str, mounts: str) -> str:
  """The filesystem type of `path`'s mount, from `/proc/mounts`' text."""
  path = os.path.realpath(path)
  best, kind = "", ""
  for line in mounts.splitlines():
    fields = line.split()
    if len(fields) < 3:
      continue
    point = fields[1].replace("\\040", " ")
    inside = path == point or path.startswith(point.rstrip("/") + "/")
    if inside and len(point) >= len(best):
      best, kind = point, fields[2]
  return kind


def check_shared(
  paths: dict[str, str], nodes: Sequence[str], host: str, mounts: str
) -> None:
  """Every path in `paths` (what: path) must be visible to the jobs: the
  partition is this host alone, or the path is on a shared filesystem.

  Raises:
    LaunchError: a path is on a filesystem local to this host.
  """
  if set(nodes) <= {host, host.split(".")[0]}:
    return  # The jobs run here.
  for what, path in paths.items():
    kind = mount_type(path, mounts)
    if kind not in SHARED_FILESYSTEMS and not kind.startswith("fuse.nfs"):
      raise LaunchError(
        f"{what} {path} is on a {kind or 'unknown'} filesystem local to "
        f"{host}, which the jobs (on {', '.join(nodes[:4])}"
        f"{'...' if len(nodes) > 4 else ''}) cannot see: put it on a "
        f"shared filesystem ({', '.join(SHARED_FILESYSTEMS[:5])}, ...), "
        "or pass --workdir-is-shared if it is shared nevertheless"
      )


def check_visible(part: Partition, paths: dict[str, str]) -> None:
  with open("/proc/mounts") as f:
    mounts = f.read()
  check_shared(paths, part.nodes, socket.gethostname(), mounts)


def check_not_queued(records_by_key: dict[str, dict], queued: dict) -> None:
  """An earlier submission of this target in this workdir still queued or
  running would write the same programs."""
  active = sorted(
    {
      r["job_id"]
      for r in records_by_key.values()
      if r.get("launcher") == "slurm" and r["job_id"] in queued
    }
  )
  if active:
    raise LaunchError(
      f"jobs {', '.join(active)} of an earlier submission of this target "
      "into this workdir are still queued or running: see --status, wait, "
      "or scancel them first"
    )
