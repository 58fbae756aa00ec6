"""CPU kernels for the Kronecker-sum estimators: tall, skinny products and
small SVDs.

r-OK's step makes two passes over its `(S n K n, r)` tangent factors besides
`H A`: their Gram matrix `Aᵀ A` `(r, r)` and their mixing `A Xᵀ` by a small
`(r, r)` (or `(r + 1, r)`) matrix. XLA:CPU runs both as general GEMMs, at a
fraction of the machine's rate for an output (or inner dimension) this
small. The two custom calls here (`tall_skinny.cc`, built once per machine
by `build.py`) keep one row of `A` in one SIMD register and read each row
once. The same step also factorises three `(r + 1, r + 1)` matrices per
example (`rtrl.linalg.small_svd`), which LAPACK takes one at a time; `svd`
(`small_svd.cc`) is a one-sided Jacobi SVD with one matrix per SIMD lane,
for float32 or float64 matrices up to `MAX_SVD_SIZE` square. What they
gained: the documentation's page "Routing: the speed choices and their
measurements".

Whether they are used is a value decided when an estimator is built, an
`rtrl.routing.Routing` (`Routing.auto()` asks `available()`), never while
tracing. `available()` says whether this process can run them (a CPU
backend, the library built and loaded; `RTRL_CPU_KERNELS=0` in the
environment turns them off, read once per process). `fits(width, dtype,
out_columns)` and `svd_fits(size, dtype)` say whether a product or an SVD
is within their limits (float32 or float64, `1 <= width <= MAX_WIDTH`,
`out_columns` in `{width, width + 1}`; `1 <= size <= MAX_SVD_SIZE`).
`usable` and `svd_usable` are both together, for the default backend.
Nothing depends on a compiler being present: the routes fall back to XLA.

All three functions take any leading batch axes and are differentiable
(their derivatives are built from XLA's operations, so reverse mode works
too); under `jax.vmap` the batch axes reach the kernel, which spreads rows,
examples and matrices over XLA's intra-op threads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rtrl.cpu_kernels import build

MAX_WIDTH = 16
MAX_SVD_SIZE = 32
_DTYPES = (jnp.float32, jnp.float64)


def _float(dtype) -> bool:
  """A float32 or float64 dtype."""
  return jnp.dtype(dtype) in [jnp.dtype(d) for d in _DTYPES]


def available() -> bool:
  """Whether this process can run the kernels: a CPU backend exists, the
  library builds and loads (once per process), and `RTRL_CPU_KERNELS` is
  not `0`."""
  return build.load()


def fits(width: int, dtype, out_columns: int | None = None) -> bool:
  """Whether a product of `width`-column factors of `dtype` (mixed into
  `out_columns` columns, if given) is within the kernels' limits."""
  if not _float(dtype) or not 1 <= width <= MAX_WIDTH:
    return False
  return out_columns is None or out_columns in (width, width + 1)


def svd_fits(size: int, dtype) -> bool:
  """Whether `(..., size, size)` matrices of `dtype` are within `svd`'s
  limits."""
  return _float(dtype) and 1 <= size <= MAX_SVD_SIZE


def usable(width: int, dtype, out_columns: int | None = None) -> bool:
  """`fits` and `available`, with `jax.default_backend()` the CPU."""
  return (
    jax.default_backend() == "cpu"
    and fits(width, dtype, out_columns)
    and available()
  )


def svd_usable(size: int, dtype) -> bool:
  """`svd_fits` and `available`, with `jax.default_backend()` the CPU."""
  return (
    jax.default_backend() == "cpu" and svd_fits(size, dtype) and available()
  )


def _check_loaded(name: str) -> None:
  if not build.load():
    raise RuntimeError(
      f"{name}: the CPU kernels are not available here "
      "(see the warning above, or RTRL_CPU_KERNELS=0); "
      "check rtrl.cpu_kernels.available first"
    )


def _check_tall(columns: jax.Array, name: str) -> None:
  _check_loaded(name)
  if columns.ndim < 2 or not 1 <= columns.shape[-1] <= MAX_WIDTH:
    raise ValueError(
      f"{name} needs columns of shape (..., M, r) with "
      f"1 <= r <= {MAX_WIDTH}, got {columns.shape}"
    )


@jax.custom_jvp
def gram_of_columns(columns: jax.Array) -> jax.Array:
  """`columns.T @ columns` over the last two axes: `(..., M, r)` to
  `(..., r, r)`, on the CPU kernel (check `usable` first)."""
  _check_tall(columns, "gram_of_columns")
  width = columns.shape[-1]
  out = jax.ShapeDtypeStruct(columns.shape[:-2] + (width, width), columns.dtype)
  return jax.ffi.ffi_call("rtrl_tall_gram", out, vmap_method="broadcast_all")(
    columns
  )


@gram_of_columns.defjvp
def _gram_jvp(primals, tangents):
  (columns,), (d_columns,) = primals, tangents
  columns = jnp.asarray(columns)
  half = jnp.einsum(
    "...mi,...mj->...ij",
    d_columns,
    columns,
    precision=jax.lax.Precision.HIGHEST,
  )
  return gram_of_columns(columns), half + jnp.swapaxes(half, -1, -2)


@jax.custom_jvp
def mix_columns(columns: jax.Array, coef: jax.Array) -> jax.Array:
  """`columns @ coef.T` over the last two axes: columns `(..., M, r)`,
  coef `(..., c, r)` with `c` in `{r, r + 1}`, to `(..., M, c)`, on the
  CPU kernel (check `usable` first)."""
  _check_tall(columns, "mix_columns")
  width = columns.shape[-1]
  if (
    coef.ndim < 2
    or coef.shape[-1] != width
    or coef.shape[-2] not in (width, width + 1)
  ):
    raise ValueError(
      f"mix_columns needs coef of shape (..., r or r + 1, r) "
      f"for columns {columns.shape}, got {coef.shape}"
    )
  coef = coef.astype(columns.dtype)
  batch = jnp.broadcast_shapes(columns.shape[:-2], coef.shape[:-2])
  columns = jnp.broadcast_to(columns, batch + columns.shape[-2:])
  coef = jnp.broadcast_to(coef, batch + coef.shape[-2:])
  out = jax.ShapeDtypeStruct(
    batch + (columns.shape[-2], coef.shape[-2]), columns.dtype
  )
  return jax.ffi.ffi_call("rtrl_tall_mix", out, vmap_method="broadcast_all")(
    columns, coef
  )


@mix_columns.defjvp
def _mix_jvp(primals, tangents):
  (columns, coef), (d_columns, d_coef) = primals, tangents
  # XLA's products for the tangent: a custom call cannot be transposed.
  product = lambda a, b: jnp.einsum(
    "...mi,...ji->...mj", a, b, precision=jax.lax.Precision.HIGHEST
  )
  return (
    mix_columns(columns, coef),
    product(d_columns, coef) + product(columns, d_coef),
  )


@jax.custom_jvp
def svd(matrices: jax.Array):
  """Thin SVD of square matrices `(..., c, c)`, `1 <= c <= MAX_SVD_SIZE`,
  on the CPU kernel (check `svd_usable` first).

  Returns:
    `(u (..., c, c), s (..., c), vt (..., c, c))` with `a = u diag(s) vt`,
    `s` non-increasing, as `jnp.linalg.svd(a, full_matrices=False)`. `u`
    has orthonormal columns where `s > 0` and zero columns where `s == 0`
    (LAPACK completes them to an orthonormal basis instead); `vt` is always
    orthogonal. Each pair's sign is fixed (`w . v_j >= 0` for fixed weights
    `w`), so where the singular values are distinct the factors move by
    rounding under a one-ulp change of the input, and a matrix gets the
    same factors bitwise in any batch.
  """
  _check_loaded("svd")
  matrices = jnp.asarray(matrices)
  if (
    matrices.ndim < 2
    or matrices.shape[-1] != matrices.shape[-2]
    or not 1 <= matrices.shape[-1] <= MAX_SVD_SIZE
  ):
    raise ValueError(
      f"svd needs square matrices (..., c, c) with 1 <= c <= "
      f"{MAX_SVD_SIZE}, got shape {matrices.shape}"
    )
  if not _float(matrices.dtype):
    raise ValueError(
      f"svd needs float32 or float64 matrices, got {matrices.dtype}"
    )
  square = jax.ShapeDtypeStruct(matrices.shape, matrices.dtype)
  values = jax.ShapeDtypeStruct(matrices.shape[:-1], matrices.dtype)
  return jax.ffi.ffi_call(
    "rtrl_small_svd", (square, values, square), vmap_method="broadcast_all"
  )(matrices)


@svd.defjvp
def _svd_jvp(primals, tangents):
  # The first-order perturbation of a square SVD with distinct singular
  # values: with dP = Uᵀ dA V, ds = diag(dP), and off the diagonal
  # dU = U (F ∘ (dP S + S dPᵀ)), dV = V (F ∘ (S dP + dPᵀ S)) for
  # F_ij = 1 / (s_j² - s_i²) (0 where that difference is 0).
  (matrices,), (d_matrices,) = primals, tangents
  u, s, vt = svd(matrices)
  v = jnp.swapaxes(vt, -1, -2)
  product = lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)
  d_p = product(product(jnp.swapaxes(u, -1, -2), d_matrices), v)
  d_s = jnp.diagonal(d_p, axis1=-2, axis2=-1)
  s_col = s[..., None, :]
  s_row = s[..., :, None]
  difference = (s_col + s_row) * (s_col - s_row)
  safe = difference != 0
  f = jnp.where(safe, 1 / jnp.where(safe, difference, 1), 0)
  d_p_s = d_p * s_col
  s_d_p = s_row * d_p
  d_u = product(u, f * (d_p_s + jnp.swapaxes(d_p_s, -1, -2)))
  d_v = product(v, f * (s_d_p + jnp.swapaxes(s_d_p, -1, -2)))
  return (u, s, vt), (d_u, d_s, jnp.swapaxes(d_v, -1, -2))


__all__ = [
  "MAX_SVD_SIZE",
  "MAX_WIDTH",
  "available",
  "fits",
  "gram_of_columns",
  "mix_columns",
  "svd",
  "svd_fits",
  "svd_usable",
  "usable",
]
