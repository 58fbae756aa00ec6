"""The gradient-cosine tool's estimator list: `config.estimators` parsed.

`'ok:2,ok:8,kf_avg:8,kf,uoro,snap:2,sk_rtrl:16:preprojection=svd'`:
registry names (`rtrl.estimators.names()`), with `:value` exactly for
those whose factory takes a required hyper-parameter (`rank`, SnAp-n's
`order`; `rtrl.estimators.spec(name).hyperparameters`), then any of its
optional ones as `:key=value`. Labels are the estimators' own
(`spec(name).label_for`): '8-OK', 'KF-RTRL', 'SnAp-2'.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rtrl import estimators


class EstimatorSpec(NamedTuple):
  name: str  # registry name for rtrl.estimators.make
  rank: int | None  # None for estimators without a rank
  label: str  # '8-OK', 'KF-RTRL': legend and metrics key
  options: tuple[tuple[str, Any], ...] = ()  # other hyper-parameters

  def hparams(self) -> dict:
    rank = {} if self.rank is None else {"rank": self.rank}
    return {**rank, **dict(self.options)}


def _value(text: str) -> Any:
  """An option's value: an int, None, or the text itself."""
  text = text.strip()
  if text.lower() == "none":
    return None
  return int(text) if text.lstrip("-").isdigit() else text


def _options(name: str, texts: list[str], where: str) -> dict[str, Any]:
  """`key=value` entries, each an optional hyper-parameter of `name`."""
  optional = [
    h.name for h in estimators.spec(name).hyperparameters if not h.required
  ]
  out = {}
  for text in texts:
    key, equals, value = text.partition("=")
    key = key.strip()
    if not equals or key not in optional:
      takes = ", ".join(optional) or "none"
      raise ValueError(
        f"{text.strip()!r} is not an option of estimator {name!r} {where} "
        f"(write key=value; its options: {takes})"
      )
    out[key] = _value(value)
  return out


def _required_value(name: str, required: list[str], text: str, where: str):
  """The value of `name`'s one required hyper-parameter, a positive int
  (`rank`, `order`)."""
  value = int(text) if text.strip().isdigit() else 0
  if value < 1:
    raise ValueError(
      f"{required[0]} must be a positive integer {where}, got {text.strip()!r}"
    )
  return value


def parse_entry(text: str) -> EstimatorSpec:
  """One `'name[:value][:key=value...]'` entry.

  Raises:
    ValueError: an empty or unknown name, a missing, extra or non-positive
      rank (or order), an unknown option; the message quotes the entry.
  """
  name, *parts = text.split(":")
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
  spec = estimators.spec(name)
  required = [h.name for h in spec.hyperparameters if h.required]
  noun = required[0] if required else "rank"
  if required and (not parts or "=" in parts[0]):
    raise ValueError(
      f"estimator {name!r} needs {'an' if noun[0] in 'aeiou' else 'a'} "
      f"{noun} {where}, e.g. '{name}:8'"
    )
  if not required and parts and "=" not in parts[0]:
    raise ValueError(
      f"estimator {name!r} takes no rank {where}; write '{name}'"
    )
  hparams = {}
  if required:
    hparams[required[0]] = _required_value(name, required, parts.pop(0), where)
  options = _options(name, parts, where)
  label_text = spec.label_for(**hparams)
  if options:
    label_text += " (" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")"
  rank = hparams.pop("rank", None)
  return EstimatorSpec(
    name, rank, label_text, tuple({**hparams, **options}.items())
  )


def parse_estimators(spec: Any) -> list[EstimatorSpec]:
  """Parses `'ok:2,ok:8,kf_avg:8,kf,uoro'` (or a list of such entries).

  Raises:
    ValueError: an empty list or entry, an unknown name, a missing, extra or
      non-positive rank, an unknown option, or a duplicate.
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
