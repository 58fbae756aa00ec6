"""The gradient-cosine tool's estimator list: `config.estimators` parsed.

`'ok:2,ok:8,kf_avg:8,kf,uoro'`: registry names (`rtrl.estimators.names()`),
with `:rank` exactly for those whose factory takes a rank
(`rtrl.estimators.hyperparameters`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rtrl import estimators

# Paper-style legend names; ranked ones are prefixed with the rank ('8-OK').
DISPLAY_NAMES = {
  "rtrl": "RTRL",
  "uoro": "UORO",
  "kf": "KF-RTRL",
  "kf_avg": "KF-AVG",
  "kf_approx": "KF-APPROX",
  "ok": "OK",
  "ok_biased": "B-OK",
  "ktp": "KTP",
  "snap1": "SnAp-1",
  "rflo": "RFLO",
}


class EstimatorSpec(NamedTuple):
  name: str  # registry name for rtrl.estimators.make
  rank: int | None  # None for estimators without a rank
  label: str  # '8-OK', 'KF-RTRL': legend and metrics key

  def hparams(self) -> dict:
    return {} if self.rank is None else {"rank": self.rank}


def label(name: str, rank: int | None) -> str:
  """'8-OK' for ok with rank 8, 'KF-RTRL' for kf."""
  display = DISPLAY_NAMES.get(name, name)
  return display if rank is None else f"{rank}-{display}"


def parse_entry(text: str) -> EstimatorSpec:
  """One `'name[:rank]'` entry.

  Raises:
    ValueError: an empty or unknown name, a missing, extra or non-positive
      rank; the message quotes the entry.
  """
  name, sep, rank_text = text.partition(":")
  name = name.strip().lower()
  where = f"in config.estimators entry {text!r}"
  if not name:
    raise ValueError(
      f"empty estimator name {where} (entries are "
      "'name[:rank]' separated by commas)"
    )
  if name not in estimators.names():
    raise ValueError(
      f"unknown estimator {name!r} {where}; known: {estimators.names()}"
    )
  ranked = "rank" in estimators.hyperparameters(name)
  if ranked and not sep:
    raise ValueError(
      f"estimator {name!r} needs a rank {where}, e.g. '{name}:8'"
    )
  if not ranked and sep:
    raise ValueError(
      f"estimator {name!r} takes no rank {where}; write '{name}'"
    )
  if not ranked:
    return EstimatorSpec(name, None, label(name, None))
  rank = int(rank_text) if rank_text.strip().isdigit() else 0
  if rank < 1:
    raise ValueError(
      f"rank must be a positive integer {where}, got {rank_text.strip()!r}"
    )
  return EstimatorSpec(name, rank, label(name, rank))


def parse_estimators(spec: Any) -> list[EstimatorSpec]:
  """Parses `'ok:2,ok:8,kf_avg:8,kf,uoro'` (or a list of such entries).

  Raises:
    ValueError: an empty list or entry, an unknown name, a missing, extra or
      non-positive rank, or a duplicate.
  """
  entries = spec.split(",") if isinstance(spec, str) else list(spec)
  if not entries or all(not str(e).strip() for e in entries):
    raise ValueError(
      "config.estimators is empty; give comma-separated "
      "'name[:rank]' entries, e.g. 'ok:2,kf_avg:8,kf'"
    )
  parsed = []
  for entry in entries:
    text = str(entry).strip()
    parsed_entry = parse_entry(text)
    if parsed_entry.label in [p.label for p in parsed]:
      raise ValueError(
        f"duplicate estimator {parsed_entry.label} in "
        f"config.estimators entry {text!r}"
      )
    parsed.append(parsed_entry)
  return parsed
