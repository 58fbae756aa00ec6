"""What both sharding comparison scripts measure (NumPy only, so it can be
imported before JAX is configured)."""

import numpy as np


def relative_difference(a, b) -> float:
  """max |a - b| / max |a| for floats; 1.0 if other arrays differ at all."""
  a, b = np.asarray(a), np.asarray(b)
  if a.dtype.kind not in "fc":
    return float(np.any(a != b))
  scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-300)
  return float(np.max(np.abs(a - b))) / scale if a.size else 0.0
