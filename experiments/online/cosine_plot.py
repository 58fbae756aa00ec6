"""The gradient-cosine tool's figure: cosine to exact RTRL against step."""

from __future__ import annotations

import numpy as np

from experiments.online import cosine_records


def plot(result: dict, title: str, path: str) -> None:
  """Mean ± std band over repetitions per estimator vs step (Agg backend),
  of a `compute_cosines` result, saved to `path`."""
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, ax = plt.subplots(figsize=(8.5, 4.5))
  for label in result["labels"]:
    mean, std, _ = cosine_records.step_statistics(result["cosine"][label])
    steps = np.arange(1, mean.shape[0] + 1)
    # Markers keep isolated steps visible when neighbours were dropped.
    (line,) = ax.plot(
      steps, mean, label=label, linewidth=1.2, marker=".", markersize=2
    )
    ax.fill_between(
      steps,
      mean - std,
      np.minimum(mean + std, 1.0),
      color=line.get_color(),
      alpha=0.2,
      linewidth=0,
    )
  ax.set_xlabel("step")
  ax.set_ylabel("cosine to exact RTRL gradient")
  ax.set_ylim(top=1.02)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  # Outside the axes: the bands of noisy estimators fill the whole range.
  ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
