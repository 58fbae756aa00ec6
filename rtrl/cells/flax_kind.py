"""Which Flax API a module is (`flax.nnx` or `flax.linen`) and which of
Flax's built-in cells (`BUILTIN_CELLS`), if any.

Flax is imported inside these functions only, so `import rtrl` does not
import it.
"""

from __future__ import annotations

from typing import Any

BUILTIN_CELLS = ("SimpleCell", "LSTMCell", "OptimizedLSTMCell", "GRUCell")


def flax_api(module: Any) -> str:
  """'nnx' or 'linen', else a ValueError naming `module`."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  if isinstance(module, nnx.Module):
    return "nnx"
  if isinstance(module, nn.Module):
    return "linen"
  raise ValueError(
    f"module must be a flax.nnx.Module or flax.linen.Module recurrent cell, "
    f"called as module(carry, x) -> (carry, y); got {type(module).__name__}"
  )


def builtin_kind(api: str, module: Any) -> str | None:
  """The Flax class name if `module` is exactly one of Flax's cells."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  namespace = nnx if api == "nnx" else nn
  for kind in BUILTIN_CELLS:
    if type(module) is getattr(namespace, kind):
      return kind
  return None


__all__ = ["BUILTIN_CELLS", "builtin_kind", "flax_api"]
