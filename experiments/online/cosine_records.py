"""The gradient-cosine tool's statistics: per-step records and the summary.

Cosines are `(num_steps, R)` arrays (R repetitions), NaN where the step was
dropped (exact gradient norm below `config.min_gradient_norm`).
"""

from __future__ import annotations

import numpy as np


def step_statistics(cos: np.ndarray) -> tuple[np.ndarray, ...]:
  """Per step: mean and std over valid repetitions (NaN if none), count."""
  valid = ~np.isnan(cos)
  count = valid.sum(axis=1)
  filled = np.where(valid, cos, 0.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    mean = filled.sum(axis=1) / count
    var = (np.where(valid, cos - mean[:, None], 0.0) ** 2).sum(axis=1) / count
  return mean, np.sqrt(var), count


def finite_or_none(x: float) -> float | None:
  """`x` as a float, or None (JSON null) if it is NaN or infinite."""
  return None if not np.isfinite(x) else float(x)


def metrics_records(first_step: int, cosines: dict) -> list[dict]:
  """One `metrics.jsonl` record per step (steps are 1-based)."""
  stats = {k: step_statistics(v) for k, v in cosines.items()}
  any_cos = next(iter(cosines.values()))
  records = []
  for i in range(any_cos.shape[0]):
    record = {
      "step": first_step + i,
      "num_dropped": int(np.isnan(any_cos[i]).sum()),
    }
    for label, (mean, std, count) in stats.items():
      record[f"{label}/mean_cosine"] = finite_or_none(mean[i])
      record[f"{label}/std_cosine"] = finite_or_none(std[i])
      record[f"{label}/num_valid"] = int(count[i])
    records.append(record)
  return records


def label_summary(cos: np.ndarray) -> dict:
  """Mean over steps (with a valid repetition) of the mean cosine, the mean
  std, the last step's mean (Figure 9 reads one step) and counts."""
  mean, std, count = step_statistics(cos)
  kept = count > 0
  return {
    "mean_cosine": finite_or_none(mean[kept].mean()) if kept.any() else None,
    "mean_std_cosine": (
      finite_or_none(std[kept].mean()) if kept.any() else None
    ),
    "final_mean_cosine": finite_or_none(mean[-1]),
    "num_valid_points": int(count.sum()),
    "num_dropped_points": int(count.size * cos.shape[1] - count.sum()),
    "num_steps_with_valid": int(kept.sum()),
  }


def summarize(result: dict) -> dict:
  """`label_summary` of each label of a `compute_cosines` result."""
  return {
    label: label_summary(result["cosine"][label]) for label in result["labels"]
  }
