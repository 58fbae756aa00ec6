"""The estimators' speed choices as one explicit value: `Routing`.

Several operations of an estimator's step have more than one implementation
that computes the same numbers (to rounding) at different speeds, and which
is fastest depends on the backend and on sizes: the Gram matrix and the
mixing of the Kronecker-sum factors (XLA's GEMMs, an explicit row-major
copy, multiply-adds, or the C++ kernels of `rtrl.cpu_kernels`), the small
SVDs of the Kronecker-sum reduction (`jnp.linalg.svd` or the Jacobi
kernel), and whether the cell's per-unit Jacobians are written out once
before the element-wise tangent updates that read them.

A `Routing` names each choice. It is frozen and hashable: a value, never a
module flag. `Routing.auto()` resolves the choices for a backend once, when
an estimator is built (the estimator factories take `routing=`, None
meaning `Routing.auto()`), and the step closes over it, so the traced
program reads a Python constant and two routings are two programs (pass a
`Routing` as a static argument of `jax.jit`). `Routing()` is XLA's own
operations on every backend. The thresholds and what each route gained are
in the documentation's page "Routing: the speed choices and their
measurements" (`docs/benchmarks/routing.md`).

    fast = rtrl.estimators.ok(cell, rank=8)  # Routing.auto()
    plain = rtrl.estimators.ok(cell, rank=8, routing=rtrl.routing.Routing())
"""

from __future__ import annotations

import dataclasses

import jax

from rtrl import cpu_kernels as kernels_lib

# The CPU thresholds of `Routing.auto` (docs/benchmarks/routing.md).
CPU_ROWS_FIRST_MAX_FLOATS = 2**17
CPU_ROWS_FIRST_MAX_RANK = 4
CPU_ELEMENTWISE_MIX_MAX_RANK = 8
CPU_KERNEL_PRODUCTS_MIN_RANK = 2
CPU_PAIRWISE_SORT_MAX = 256
# Below this many tangent rows the factorised `H v` beats forming `H`.
DENSE_H_MIN_ROWS = 4


def _check_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise ValueError(f"Routing.{name} must be an int >= 0, got {value!r}")


def _check_bool(name: str, value) -> None:
  if not isinstance(value, bool):
    raise ValueError(f"Routing.{name} must be a bool, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Routing:
  """Which implementation each routed operation of an estimator uses.

  Every route computes the same numbers up to rounding (float64: to about
  `1e-13` relative); only the speed differs. The defaults, `Routing()`, are
  XLA's own operations on every backend.

  Attributes:
    cpu_kernel_products: the Gram matrix `Aᵀ A` and the mixing `A Xᵀ` of
      the Kronecker-sum factors `A (S n K n, r)` (r-OK, r-B-OK) on
      `rtrl.cpu_kernels` for ranks from `cpu_kernel_products_min_rank` to
      `rtrl.cpu_kernels.MAX_WIDTH`, float32 or float64. CPU programs only.
    cpu_kernel_products_min_rank: the smallest rank sent to those kernels
      (an int >= 0).
    rows_first_max_floats: without those kernels, factors of fewer floats
      per example than this (and rank at most `rows_first_max_rank`) are
      copied row-major `(r, S n K n)` for the Gram matrix and the mixing;
      0: never.
    rows_first_max_rank: the largest rank copied row-major.
    elementwise_mix_max_rank: otherwise, ranks up to this mix the tall
      factors by `r` multiply-adds in one loop instead of a GEMM
      (`rtrl.linalg.matmul_unrolled`); 0: never.
    cpu_kernel_svd: the small square SVDs of the Kronecker-sum reduction
      (up to `rtrl.cpu_kernels.MAX_SVD_SIZE`, float32 or float64) on the
      Jacobi kernel `rtrl.cpu_kernels.svd` instead of `jnp.linalg.svd`. CPU
      programs only.
    dense_h_min_rows: `H v` for at least this many tangent rows `v (S, n)`
      (KTP's `r`) forms the step's `(S n, S n)` matrix `H` and applies it
      by one GEMM; fewer (UORO's one) take the factorised product.
    pairwise_sort_max: the optimal unbiased low-rank `D'` (KF-APPROX,
      KTP) orders `D`'s singular values by all pairwise comparisons up to
      this many (`rtrl.kronecker.descending_positions`), by `argsort`
      above; 0: always `argsort`. Faster on XLA:CPU; XLA:GPU compiled the
      pairwise count for minutes in KF-APPROX's batch-256 program.
    jacobians_once: SnAp-1, RFLO and UORO write the cell's per-unit
      Jacobians out once (`rtrl.linalg.computed_once`) before the
      element-wise update of their large tangent, rather than letting XLA
      recompute them inside its loop.

  Raises:
    ValueError: a field of the wrong type or a negative threshold.
  """

  cpu_kernel_products: bool = False
  cpu_kernel_products_min_rank: int = CPU_KERNEL_PRODUCTS_MIN_RANK
  rows_first_max_floats: int = 0
  rows_first_max_rank: int = CPU_ROWS_FIRST_MAX_RANK
  elementwise_mix_max_rank: int = 0
  cpu_kernel_svd: bool = False
  dense_h_min_rows: int = DENSE_H_MIN_ROWS
  pairwise_sort_max: int = 0
  jacobians_once: bool = True

  def __post_init__(self):
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if field.type in ("bool", bool):
        _check_bool(field.name, value)
      else:
        _check_int(field.name, value)

  @classmethod
  def auto(
    cls, backend: str | None = None, *, cpu_kernels: bool | None = None
  ) -> Routing:
    """The fastest routes measured for `backend`, resolved now.

    Args:
      backend: `'cpu'`, `'gpu'`, `'tpu'`...; None: `jax.default_backend()`.
      cpu_kernels: use `rtrl.cpu_kernels` (CPU only). None: where they
        are available, which builds them on first use and reads the
        environment variable `RTRL_CPU_KERNELS` (`0` turns them off) once
        per process, here and never while tracing.

    Returns:
      On CPU: the kernels for the products and the SVDs where they are
      used, else the row-major copy for small stacks and multiply-add
      mixing for low ranks; elsewhere `Routing()`. Both write the
      Jacobians out once.

    Raises:
      ValueError: `cpu_kernels=True` for another backend, or where the
        kernels are not available.
    """
    backend = jax.default_backend() if backend is None else str(backend)
    if cpu_kernels is not None:
      _check_bool("auto's cpu_kernels", cpu_kernels)
    if backend != "cpu":
      if cpu_kernels:
        raise ValueError(
          f"cpu_kernels=True needs the 'cpu' backend, got backend {backend!r}"
        )
      return cls()
    available = kernels_lib.available()
    if cpu_kernels and not available:
      raise ValueError(
        "cpu_kernels=True but rtrl.cpu_kernels are not available here (no "
        "C++ compiler, a failed build, or RTRL_CPU_KERNELS=0)"
      )
    use_kernels = available if cpu_kernels is None else cpu_kernels
    return cls(
      cpu_kernel_products=use_kernels,
      rows_first_max_floats=CPU_ROWS_FIRST_MAX_FLOATS,
      elementwise_mix_max_rank=CPU_ELEMENTWISE_MIX_MAX_RANK,
      cpu_kernel_svd=use_kernels,
      pairwise_sort_max=CPU_PAIRWISE_SORT_MAX,
    )

  def products_on_cpu_kernels(
    self, rank: int, dtype, out_columns: int | None = None
  ) -> bool:
    """Whether the Gram matrix (and the mixing into `out_columns` columns,
    if given) of rank-`rank` factors go to `rtrl.cpu_kernels`."""
    return (
      self.cpu_kernel_products
      and rank >= self.cpu_kernel_products_min_rank
      and kernels_lib.fits(rank, dtype, out_columns)
    )

  def rows_first(self, num_floats: int, rank: int) -> bool:
    """Whether `num_floats` floats of rank-`rank` factors are copied
    row-major for their Gram matrix and mixing."""
    return (
      rank <= self.rows_first_max_rank
      and num_floats < self.rows_first_max_floats
    )

  def dense_h(self, rows: int) -> bool:
    """Whether `H v` for `rows` tangent rows forms `H`."""
    return rows >= self.dense_h_min_rows

  def elementwise_mix(self, rank: int) -> bool:
    """Whether rank-`rank` tall factors mix by multiply-adds."""
    return rank <= self.elementwise_mix_max_rank

  def svd_on_cpu_kernel(self, shape: tuple[int, ...], dtype) -> bool:
    """Whether `(..., m, n)` matrices of `dtype` are factorised by the
    Jacobi kernel."""
    m, n = shape[-2:]
    return self.cpu_kernel_svd and m == n and kernels_lib.svd_fits(n, dtype)


def resolve(routing: Routing | None) -> Routing:
  """`routing`, or `Routing.auto()` for None (an estimator's build time).

  Raises:
    ValueError: anything else than a `Routing` or None.
  """
  if routing is None:
    return Routing.auto()
  if not isinstance(routing, Routing):
    raise ValueError(
      f"routing must be an rtrl.routing.Routing or None, got {routing!r}"
    )
  return routing


def or_xla(routing: Routing | None) -> Routing:
  """`routing`, or `Routing()` (XLA's forms) for None: the default of the
  library's lower-level functions, which never look at the backend.

  Raises:
    ValueError: anything else than a `Routing` or None.
  """
  if routing is None:
    return Routing()
  return resolve(routing)


__all__ = [
  "CPU_ELEMENTWISE_MIX_MAX_RANK",
  "CPU_KERNEL_PRODUCTS_MIN_RANK",
  "CPU_PAIRWISE_SORT_MAX",
  "CPU_ROWS_FIRST_MAX_FLOATS",
  "CPU_ROWS_FIRST_MAX_RANK",
  "DENSE_H_MIN_ROWS",
  "Routing",
  "or_xla",
  "resolve",
]
