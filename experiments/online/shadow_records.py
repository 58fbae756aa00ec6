"""The exact-RTRL shadow's numbers in an experiment's records
(`rtrl.online.make_online_trainer(..., shadow_every=K)`): a chunk's
`ShadowStepMetrics` as sums (inside the jitted chunk), and a window of
those sums as means (in the record): `cosine_to_rtrl` and each estimator
metric. Shared by the Copy, char-PTB and suite experiments."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def shadow_sums(steps) -> dict:
  """A chunk's `rtrl.online.ShadowStepMetrics` (one row a step) as sums
  over the reported steps: `cosine_count` and `cosine_sum` over those with
  a finite cosine; per estimator metric, `<name>_count` and `<name>_sum`
  over those where it is finite (SK-RTRL's certificate, a bound that grows
  with each step's spectral-norm bound, may overflow to inf), and
  `reported_count`."""

  def counted_sum(values) -> tuple[jax.Array, jax.Array]:
    counted = steps.reported & jnp.isfinite(values)
    return counted.sum(), jnp.where(counted, values, 0.0).sum()

  sums = {"reported_count": steps.reported.sum()}
  named = {"cosine": steps.cosine, **steps.estimator_metrics}
  for name, values in named.items():
    sums[f"{name}_count"], sums[f"{name}_sum"] = counted_sum(values)
  return sums


def shadow_means(window: list[dict]) -> dict:
  """`cosine_to_rtrl` and each estimator metric `<name>`: the mean over the
  window's reported steps where it is finite (NaN if none), and, for an
  estimator metric, `<name>_finite_fraction` of the reported steps."""
  total = lambda key: sum(float(m[key]) for m in window)
  reported = total("reported_count")
  means = {}
  for key in window[0]:
    if not key.endswith("_count") or key == "reported_count":
      continue
    name = key[: -len("_count")]
    count = total(key)
    mean = total(f"{name}_sum") / count if count else float("nan")
    if name == "cosine":
      means["cosine_to_rtrl"] = mean
    else:
      means[name] = mean
      means[f"{name}_finite_fraction"] = count / reported if reported else 0.0
  return means
