"""CPU kernels for the tall, skinny products of the Kronecker-sum estimators.

r-OK's step makes two passes over its `(S n K n, r)` tangent factors besides
`H A`: their Gram matrix `Aᵀ A` `(r, r)` and their mixing `A Xᵀ` by a small
`(r, r)` (or `(r + 1, r)`) matrix. XLA:CPU runs both as general GEMMs, at a
fraction of the machine's rate for an output (or inner dimension) this
small: at 16-OK, RHN-128, batch 16, 5.5 and 5.4 of a 27 ms step. The two
custom calls here (`tall_skinny.cc`, built once per machine by `build.py`)
keep one row of `A` in one SIMD register and read each row once.

Use `usable(width, dtype, out_columns)` to ask whether a product can go
here (a CPU program, the library built, float32 or float64, `1 <= width <=
16`, `out_columns` in `{width, width + 1}`); callers fall back to XLA's
products otherwise, so nothing depends on a compiler being present.
`RTRL_CPU_KERNELS=0` turns them off. Where they are used and what they
gained: `rtrl.tangents._cpu_kernels`.

Both functions take any leading batch axes and are differentiable (their
derivatives are XLA's products, so reverse mode works too); under
`jax.vmap` the batch axes reach the kernel, which spreads rows and examples
over XLA's intra-op threads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl.cpu_kernels import build

MAX_WIDTH = 16
_DTYPES = (jnp.float32, jnp.float64)


def usable(width: int, dtype, out_columns: int | None = None) -> bool:
  """Whether a product of `width`-column factors (mixed into `out_columns`
  columns, if given) runs on these kernels in the program being traced."""
  if jax.default_backend() != "cpu":
    return False
  if jnp.dtype(dtype) not in [jnp.dtype(d) for d in _DTYPES]:
    return False
  if not 1 <= width <= MAX_WIDTH:
    return False
  if out_columns is not None and out_columns not in (width, width + 1):
    return False
  return build.load()


def _check_tall(columns: jax.Array, name: str) -> None:
  if not build.load():
    raise RuntimeError(f"{name}: the CPU kernels are not available here "
                       "(see the warning above, or RTRL_CPU_KERNELS=0); "
                       "check rtrl.cpu_kernels.usable first")
  if columns.ndim < 2 or not 1 <= columns.shape[-1] <= MAX_WIDTH:
    raise ValueError(f"{name} needs columns of shape (..., M, r) with "
                     f"1 <= r <= {MAX_WIDTH}, got {columns.shape}")


@jax.custom_jvp
def gram_of_columns(columns: jax.Array) -> jax.Array:
  """`columns.T @ columns` over the last two axes: `(..., M, r)` to
  `(..., r, r)`, on the CPU kernel (check `usable` first)."""
  _check_tall(columns, "gram_of_columns")
  width = columns.shape[-1]
  out = jax.ShapeDtypeStruct(columns.shape[:-2] + (width, width),
                             columns.dtype)
  return jax.ffi.ffi_call("rtrl_tall_gram", out,
                          vmap_method="broadcast_all")(columns)


@gram_of_columns.defjvp
def _gram_jvp(primals, tangents):
  (columns,), (d_columns,) = primals, tangents
  columns = jnp.asarray(columns)
  half = jnp.einsum("...mi,...mj->...ij", d_columns, columns,
                    precision=jax.lax.Precision.HIGHEST)
  return gram_of_columns(columns), half + jnp.swapaxes(half, -1, -2)


@jax.custom_jvp
def mix_columns(columns: jax.Array, coef: jax.Array) -> jax.Array:
  """`columns @ coef.T` over the last two axes: columns `(..., M, r)`,
  coef `(..., c, r)` with `c` in `{r, r + 1}`, to `(..., M, c)`, on the
  CPU kernel (check `usable` first)."""
  _check_tall(columns, "mix_columns")
  width = columns.shape[-1]
  if coef.ndim < 2 or coef.shape[-1] != width or coef.shape[-2] not in (
      width, width + 1):
    raise ValueError(f"mix_columns needs coef of shape (..., r or r + 1, r) "
                     f"for columns {columns.shape}, got {coef.shape}")
  coef = coef.astype(columns.dtype)
  batch = jnp.broadcast_shapes(columns.shape[:-2], coef.shape[:-2])
  columns = jnp.broadcast_to(columns, batch + columns.shape[-2:])
  coef = jnp.broadcast_to(coef, batch + coef.shape[-2:])
  out = jax.ShapeDtypeStruct(batch + (columns.shape[-2], coef.shape[-2]),
                             columns.dtype)
  return jax.ffi.ffi_call("rtrl_tall_mix", out,
                          vmap_method="broadcast_all")(columns, coef)


@mix_columns.defjvp
def _mix_jvp(primals, tangents):
  (columns, coef), (d_columns, d_coef) = primals, tangents
  # XLA's products for the tangent: a custom call cannot be transposed.
  product = lambda a, b: jnp.einsum("...mi,...ji->...mj", a, b,
                                    precision=jax.lax.Precision.HIGHEST)
  return (mix_columns(columns, coef),
          product(d_columns, coef) + product(columns, d_coef))
