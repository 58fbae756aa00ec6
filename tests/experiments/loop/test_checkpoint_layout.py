"""Checkpoints from before the tangent layout merged its state-row and unit
axes still restore (reshaped, same numbers); nothing else is reshaped."""

from __future__ import annotations

import flax.serialization
import numpy as np
import pytest

from experiments.loop import checkpoints


def _state(factor_shape, params_shape=(3, 4)):
  rng = np.random.default_rng(0)
  return {
    "params": {"W": rng.standard_normal(params_shape)},
    "tstate": {
      "tangent": (
        rng.standard_normal((20, 16, 3, 5)),
        rng.standard_normal(factor_shape),
      )
    },
  }


def test_old_state_major_factors_are_reshaped_into_the_merged_layout():
  # (runs, batch, S=1, n, K, n, r) written before; (runs, batch, S n, K, n, r) now.
  old = _state((20, 16, 1, 4, 2, 4, 3))
  template = _state((20, 16, 4, 2, 4, 3))
  raw = flax.serialization.to_state_dict(old)
  restored = checkpoints.restore_like(template, raw)
  np.testing.assert_array_equal(
    restored["tstate"]["tangent"][1],
    old["tstate"]["tangent"][1].reshape(20, 16, 4, 2, 4, 3),
  )
  np.testing.assert_array_equal(restored["params"]["W"], old["params"]["W"])
  # An LSTM's two state rows merge the same way.
  old = _state((20, 16, 2, 4, 4, 4, 3))
  restored = checkpoints.restore_like(
    _state((20, 16, 8, 4, 4, 3)), flax.serialization.to_state_dict(old)
  )
  np.testing.assert_array_equal(
    restored["tstate"]["tangent"][1],
    old["tstate"]["tangent"][1].reshape(20, 16, 8, 4, 4, 3),
  )


@pytest.mark.parametrize(
  "old, new",
  [
    # A tangent of another config (not a merge of two neighbouring axes).
    (_state((20, 16, 1, 4, 2, 4, 3)), _state((20, 16, 4, 2, 4, 4))),
    # A parameter whose axes would merge: not a tangent, so not touched.
    (
      _state((20, 16, 4, 2, 4, 3), params_shape=(3, 2, 2)),
      _state((20, 16, 4, 2, 4, 3), params_shape=(3, 4)),
    ),
  ],
)
def test_other_shape_changes_are_still_refused(old, new):
  with pytest.raises(checkpoints.CheckpointError, match="has shape"):
    checkpoints.restore_like(new, flax.serialization.to_state_dict(old))
