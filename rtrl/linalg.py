"""Dense linear algebra of the RTRL estimators: matmul precision, Gram QR.

Matmul precision policy. Every matrix product in the estimators' hot path
(`rtrl.tangents`, the Kronecker-sum reduction) goes through `matmul` and
`gram`, which pass `matmul_precision()` to XLA. It is read from JAX's own
setting, `jax.default_matmul_precision(name)` (a context manager; or the
`jax_default_matmul_precision` config), at trace time: that setting is part
of the jit cache key, so a function jitted once and called under another
precision is traced again, never run at a stale one. Unset, it is
`'highest'`: true float32 (or float64 under `jax.enable_x64`) products on
every backend, so the float64 exactness tests and float32 training agree with
the maths. On a GPU, `'tensorfloat32'` (about 8x the float32 throughput on
A100/H100) or `'bfloat16'` trade accuracy for speed; on CPU they change
nothing. The context applies to every product traced under it, not only
these. The run loop enters it from `config.matmul_precision`
(`experiments/loop/programs.py`); other callers wrap their jitted calls:

  with jax.default_matmul_precision("tensorfloat32"):
    state, metrics = train_chunk(state)

Orthonormalisation. The Kronecker-sum reduction needs an orthonormal basis
of `c` tall rows `(c, M)` (`c = rank + 1 <= ~33`, `M` up to `K S n^2`).
`gram_qr_rows` is CholeskyQR2 written with a symmetric eigendecomposition:
the `(c, c)` Gram matrix by one GEMM, its (diagonally scaled)
eigendecomposition (computed by SVD, `small_svd`: on CPU a batched Jacobi
kernel), repeated once on the basis so found
("twice is enough") in float64 (`default_refine` says when). It touches the
tall rows only through GEMMs, where Gram-Schmidt (`thin_qr_rows`, kept as
the reference) makes `4 c` matrix-vector passes. An eigendecomposition
instead of Cholesky handles rank-deficient input (zero, equal, cancelling or
dependent rows) without a fallback branch: eigen-directions of the scaled Gram matrix
below `c * eps` of its largest are dropped (zero basis rows). In float32
that drops components smaller than about `4e-4` of their row's norm that
lie outside the span of the others (float64: `2e-8`); this is the only
approximation, and it is at the level of the Gram matrix's rounding.

References:
  Fukaya, Kannan, Nakatsukasa, Yamamoto & Yanagisawa, "Shifted Cholesky QR
  for computing the QR factorization of ill-conditioned matrices", SISC 2020
  (CholeskyQR2). Giraud, Langou, Rozložník & van den Eshof, "Rounding error
  analysis of the classical Gram-Schmidt orthogonalization process", Numer.
  Math. 2005 (CGS2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import functools

import jax
import jax.numpy as jnp

from rtrl import cpu_kernels
from rtrl import routing as routing_lib

MATMUL_PRECISIONS = {
  "highest": jax.lax.Precision.HIGHEST,
  "float32": jax.lax.Precision.HIGHEST,
  "tensorfloat32": jax.lax.Precision.HIGH,
  "bfloat16": jax.lax.Precision.DEFAULT,
  # JAX's other names for the same three levels.
  "high": jax.lax.Precision.HIGH,
  "default": jax.lax.Precision.DEFAULT,
  "fastest": jax.lax.Precision.DEFAULT,
}


def check_matmul_precision(name: str) -> str:
  """`name` if it is one of `MATMUL_PRECISIONS`.

  Raises:
    ValueError: listing the names, for any other.
  """
  if name not in MATMUL_PRECISIONS:
    raise ValueError(
      f"matmul precision must be one of "
      f"{sorted(MATMUL_PRECISIONS)}, got {name!r}"
    )
  return name


def matmul_precision() -> jax.lax.Precision:
  """The `jax.lax.Precision` the estimators pass to their products: that of
  the enclosing `jax.default_matmul_precision`, `'highest'` when unset."""
  name = jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]
  return MATMUL_PRECISIONS[check_matmul_precision(name or "highest")]


def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
  """`a @ b` at the estimators' matmul precision."""
  return jnp.matmul(a, b, precision=matmul_precision())


def matmul_unrolled(a: jax.Array, b: jax.Array) -> jax.Array:
  """`a @ b` for `a` `(M, k)`, `b` `(k, m)` with a small `k`, as `k`
  broadcast multiply-adds (summed in order `0..k-1`), which XLA fuses into
  one loop over the output instead of calling a GEMM
  (`rtrl.routing.Routing.elementwise_mix_max_rank` says when). True
  products at the input's precision, whatever `matmul_precision()` says."""
  if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or a.shape[1] == 0:
    raise ValueError(
      f"matmul_unrolled needs a (M, k) and b (k, m) with "
      f"k >= 1, got shapes {a.shape} and {b.shape}"
    )
  out = a[:, 0:1] * b[0]
  for i in range(1, a.shape[1]):
    out = out + a[:, i : i + 1] * b[i]
  return out


def gram(rows: jax.Array) -> jax.Array:
  """`rows @ rows.T` `(c, c)` for `rows` `(c, M)`, one GEMM."""
  return jnp.einsum("im,jm->ij", rows, rows, precision=matmul_precision())


def gram_of_columns(columns: jax.Array) -> jax.Array:
  """`columns.T @ columns` `(c, c)` for `columns` `(M, c)`, one GEMM (the
  tall-skinny orientation XLA runs fastest, see `rtrl.tangents`)."""
  return jnp.einsum("mi,mj->ij", columns, columns, precision=matmul_precision())


def small_svd(
  matrices: jax.Array, *, routing: routing_lib.Routing | None = None
):
  """Thin SVD `(u, s, vt)` of `(..., m, n)` matrices, `s` non-increasing,
  as `jnp.linalg.svd(matrices, full_matrices=False)`.

  Where `routing.svd_on_cpu_kernel` says so (square matrices up to
  `cpu_kernels.MAX_SVD_SIZE`, `Routing.cpu_kernel_svd`), they go to
  `rtrl.cpu_kernels.svd`, a one-sided Jacobi SVD with one matrix per SIMD
  lane: r-OK factorises three `(r + 1)`-square matrices per example and
  step, and LAPACK takes each on its own (`scripts/bench_small_linalg.py`).
  There, `u`'s columns for zero singular values are zero rather than an
  orthonormal completion; the callers here only use them scaled by their
  singular value (or a factor that vanishes with it).

  Args:
    matrices: `(..., m, n)`.
    routing: the routes (`rtrl.routing`); None: `Routing()`, LAPACK.
  """
  if routing_lib.or_xla(routing).svd_on_cpu_kernel(
    matrices.shape, matrices.dtype
  ):
    return cpu_kernels.svd(matrices)
  return jnp.linalg.svd(matrices, full_matrices=False)


def gram_factor(
  gram_matrix: jax.Array,
  *,
  routing: routing_lib.Routing | None = None,
  symmetric: bool = False,
) -> tuple[jax.Array, jax.Array]:
  """Orthonormalising transform of rows from their Gram matrix alone.

  Args:
    gram_matrix: `(c, c)` symmetric positive semi-definite, `rows @ rows.T`.
    routing: the route of its SVD (`small_svd`).
    symmetric: return `V diag(1 / sqrt(lambda)) V^T` (scaled) instead of
      `diag(1 / sqrt(lambda)) V^T`: the same basis rotated by `V`, which
      does not depend on the eigenbasis chosen where eigenvalues (nearly)
      coincide, as they all do for already orthonormal rows.

  Returns:
    `(transform (c, c), coords (c, c))` such that `basis = transform @ rows`
    has orthonormal (or zero) rows and `rows ≈ coords.T @ basis`. Directions
    whose scaled eigenvalue is below `c * eps` of the largest get zero basis
    rows; zero input gives zeros, never NaN.
  """
  c = gram_matrix.shape[0]
  dtype = gram_matrix.dtype
  diagonal = jnp.diagonal(gram_matrix)
  positive = diagonal > 0
  norms = jnp.sqrt(jnp.where(positive, diagonal, 1))
  inverse = jnp.where(positive, 1 / norms, 0)
  norms = jnp.where(positive, norms, 0)
  scaled = gram_matrix * inverse[:, None] * inverse[None, :]
  # The eigendecomposition of this symmetric PSD matrix, by SVD: XLA:CPU's
  # eigh custom call was seen to stall (0% CPU, never returning) inside the
  # vmapped, scanned estimator step; the SVD path has not. Its right
  # singular vectors are the eigenvectors (orthonormal on every path).
  _, values, vectors_t = small_svd(scaled, routing=routing)  # descending
  vectors = vectors_t.T
  tolerance = c * jnp.finfo(dtype).eps * jnp.maximum(values[0], 1)
  keep = values > tolerance
  root = jnp.sqrt(jnp.where(keep, values, 1))
  transform = (vectors * jnp.where(keep, 1 / root, 0)).T * inverse[None, :]
  coords = (vectors * jnp.where(keep, root, 0)).T * norms[None, :]
  if symmetric:
    return vectors @ transform, vectors @ coords
  return transform, coords


def gram_qr(
  gram_of: Callable[[jax.Array | None], jax.Array],
  refine: bool,
  *,
  routing: routing_lib.Routing | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Orthonormalising transform of `c` rows known only through Gram matrices.

  Args:
    gram_of: `gram_of(None)` is the rows' Gram matrix `(c, c)`;
      `gram_of(T)` that of the rows `T @ rows` (formed explicitly, so that
      its rounding is relative to the new, orthonormal-ish rows).
    refine: repeat once on `T @ rows` (CholeskyQR2): orthonormal to working
      precision. Without it (CholeskyQR) the basis is orthonormal up to
      `eps * kappa**2` (`kappa` of the length-normalised rows).
    routing: the route of the small SVDs (`small_svd`).

  Returns:
    `(transform, coords)` `(c, c)` as for `gram_qr_rows`.
  """
  return gram_qr_together([gram_of], refine, routing=routing)[0]


def gram_qr_together(
  gram_ofs: Sequence[Callable[[jax.Array | None], jax.Array]],
  refine: bool,
  *,
  routing: routing_lib.Routing | None = None,
) -> list[tuple[jax.Array, jax.Array]]:
  """`gram_qr` of several sets of `c` rows, factorised by one batched call.

  The Kronecker-sum reduction orthonormalises its left and its right
  factors; their `(c, c)` Gram matrices are stacked and factorised by a
  single (batched) decomposition per pass, which also cannot start before
  both Gram matrices exist. On XLA:CPU that matters beyond saving a call:
  a LAPACK call free to start early runs beside the step's large GEMMs
  and stalls both (docs/benchmarks/routing.md).

  Args:
    gram_ofs: one `gram_of` (as for `gram_qr`) per set of rows, all of the
      same `c`.
    refine: as for `gram_qr`.
    routing: the route of the small SVDs (`small_svd`).

  Returns:
    `[(transform, coords), ...]`, one pair per `gram_ofs` entry, in order.
  """
  grams = [gram_of(None) for gram_of in gram_ofs]
  shapes = {tuple(g.shape) for g in grams}
  if len(shapes) != 1 or len(grams[0].shape) != 2:
    raise ValueError(
      "gram_qr_together needs Gram matrices of one square "
      f"shape (c, c), got shapes {[g.shape for g in grams]}"
    )
  factor = functools.partial(gram_factor, routing=routing)
  transforms, coords = jax.vmap(factor)(jnp.stack(grams))
  if refine:
    refined = jnp.stack(
      [gram_of(transform) for gram_of, transform in zip(gram_ofs, transforms)]
    )
    # The refined Gram matrices are the identity to rounding: their
    # eigenbasis is decided by that rounding, so a one-ulp change of the
    # rows rotated the basis at random (r-OK then took another path).
    transforms2, coords2 = jax.vmap(functools.partial(factor, symmetric=True))(
      refined
    )
    transforms = transforms2 @ transforms
    coords = coords2 @ coords
  return [(transforms[i], coords[i]) for i in range(len(gram_ofs))]


def default_refine(dtype) -> bool:
  """Whether the reduction runs CholeskyQR2's second pass by default.

  float64 (the exactness checks): yes, orthonormal to working precision.
  float32 (training): no. A non-orthonormal basis leaves the Kronecker-sum
  reduction exactly unbiased and exact at sufficient rank (both only need
  `rows = coords.T @ basis`, which holds to rounding); it perturbs the
  optimality of the variance by a relative `eps * kappa**2`, and the second
  pass would cost three more passes over the factors (its cost:
  docs/benchmarks/routing.md).
  """
  return jnp.dtype(dtype) == jnp.float64


def gram_qr_rows(
  rows: jax.Array,
  refine: bool | None = None,
  *,
  routing: routing_lib.Routing | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Orthonormal basis of the rows of `rows` `(c, M)` by CholeskyQR(2).

  Args:
    rows: `(c, M)`, any `c` and `M` (also `M < c`).
    refine: second pass (CholeskyQR2); default `default_refine(rows.dtype)`.
    routing: the route of the small SVDs (`small_svd`).

  Returns:
    `(transform (c, c), coords (c, c))`: `basis = transform @ rows` has
    orthonormal or zero rows, and `rows ≈ coords.T @ basis` (that is
    `rows.T = basis.T @ coords`, as for `thin_qr_rows`, but `coords` is not
    triangular). The basis itself is not formed: callers want combinations
    `(X @ transform) @ rows` of it.
  """
  if refine is None:
    refine = default_refine(rows.dtype)
  return gram_qr(gram_of_rows(rows), refine, routing=routing)


def gram_of_rows(rows: jax.Array) -> Callable[[jax.Array | None], jax.Array]:
  """The `gram_of` of `gram_qr` for explicit rows `(c, M)`: one GEMM."""
  return lambda t: gram(rows if t is None else matmul(t, rows))


def thin_qr_rows(rows: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Thin QR of the `c` rows of `rows` `(c, M)`, `M >= c`, by CGS2.

  Returns:
    `basis` `(c, M)` whose non-zero rows are orthonormal, and `coords`
    `(c, c)` upper triangular with `rows[j] = Σ_i coords[i, j] basis[i]`
    (that is, `rows.T = basis.T @ coords`, the thin QR of `rows.T`). A row
    that is (numerically) a combination of the previous ones gets a zero
    basis row and a zero diagonal entry; zero inputs give zeros, never NaN.
  """
  num_vectors, dim = rows.shape
  if dim < num_vectors:
    raise ValueError(
      f"thin_qr_rows needs at least as many columns as rows "
      f"(c <= M), got shape {rows.shape}"
    )
  dtype = rows.dtype
  # A residual this small relative to its vector is rounding noise: keeping
  # it as a direction would cost orthogonality for no accuracy.
  tolerance = 10 * num_vectors * jnp.finfo(dtype).eps

  def body(j, carry):
    basis, coords = carry
    vector = rows[j]
    first = basis @ vector
    residual = vector - first @ basis
    second = basis @ residual
    residual = residual - second @ basis
    norm = jnp.sqrt(jnp.sum(residual * residual))
    keep = norm > tolerance * jnp.sqrt(jnp.sum(vector * vector))
    direction = jnp.where(keep, residual / jnp.where(keep, norm, 1), 0)
    basis = basis.at[j].set(direction)
    coords = coords.at[:, j].set(first + second)
    coords = coords.at[j, j].set(jnp.where(keep, norm, 0))
    return basis, coords

  init = (
    jnp.zeros((num_vectors, dim), dtype),
    jnp.zeros((num_vectors, num_vectors), dtype),
  )
  return jax.lax.fori_loop(0, num_vectors, body, init, unroll=True)


def sum_over_batch(per_example: jax.Array) -> jax.Array:
  """`per_example.sum(0)` as a product with a ones vector.

  XLA:CPU lowers a reduction over the leading axis of a `(B, P, K n)` array
  to a library fusion far slower than the same sum as a GEMV
  (docs/benchmarks/routing.md). Exact in float64: products with 1 are
  exact.
  """
  ones = jnp.ones(per_example.shape[:1], per_example.dtype)
  return jnp.tensordot(
    ones, per_example, axes=1, precision=jax.lax.Precision.HIGHEST
  )


# Widths of the identity that `computed_once` multiplies by: a contraction
# of size 1 would be rewritten by XLA into an element-wise multiply (and
# fused again), so the smallest width used is 2.
_ONCE_WIDTHS = (8, 4, 2)


def computed_once(x: jax.Array) -> jax.Array:
  """`x`, evaluated once before its consumers rather than inside each.

  XLA fuses element-wise producers into the loop of their consumer and
  evaluates them per output element. When a small per-unit array (a cell's
  Jacobians `D`, `dfds`: sigmoids, tanhs and their derivatives) feeds an
  element-wise update of the `(P, K, n)` influence of SnAp-1, RFLO or
  UORO, that recomputes each unit's derivative `P` times, most of such a
  step on XLA:CPU (docs/benchmarks/routing.md; an `optimization_barrier`
  is removed before fusion on CPU and does not help). A dot is never fused
  into its element-wise consumers, so `x` is routed through a product with
  the identity, which makes XLA write it out once. Exact for finite `x`
  (each entry is `x * 1 + 0 * others`; a NaN or infinity spreads to the
  entries it is grouped with). The estimators call it where
  `Routing.jacobians_once` says so.
  """
  width = next((w for w in _ONCE_WIDTHS if x.size % w == 0), None)
  if width is None or x.size < width:
    return x
  identity = jnp.eye(width, dtype=x.dtype)
  flat = jnp.matmul(
    x.reshape(-1, width), identity, precision=jax.lax.Precision.HIGHEST
  )
  return flat.reshape(x.shape)


def after(x: jax.Array, *earlier: jax.Array) -> jax.Array:
  """`x`, made to depend on `earlier`: XLA computes them first.

  jaxlib runs a batched LAPACK call (QR, SVD, eigh) over XLA:CPU's intra-op
  thread pool and blocks one of its threads until the batch is done, while
  XLA runs independent operations at the same time. Two such calls at once
  can hold every thread of a small pool and wait for each other forever:
  on 2 cores, SK-RTRL's per-unit QR beside its pre-projection's SVD at
  batch 16 hung. Chaining the second call's input after the first's output
  keeps them one at a time. Exact for finite `earlier` (adds `0 *` one
  entry of each; XLA does not fold a float `0 * y`).
  """
  zero = sum(0.0 * e.reshape(-1)[0] for e in earlier)
  return x + jnp.asarray(zero, x.dtype)


__all__ = [
  "after",
  "MATMUL_PRECISIONS",
  "check_matmul_precision",
  "computed_once",
  "default_refine",
  "gram",
  "gram_factor",
  "gram_of_columns",
  "gram_of_rows",
  "gram_qr",
  "gram_qr_rows",
  "gram_qr_together",
  "matmul",
  "matmul_precision",
  "matmul_unrolled",
  "small_svd",
  "sum_over_batch",
  "thin_qr_rows",
]
