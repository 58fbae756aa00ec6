"""`rtrl.cpu_kernels`: the tall-skinny Gram matrix and mixing custom calls.

They must be the products they replace (float64 to rounding, any batch
axes, under jit, vmap and scan, with their derivatives), be independent of
the thread schedule, refuse shapes they were not compiled for, and leave
XLA's products in charge when they cannot be built."""

import os
import shutil
import subprocess
import sys

from helpers import REPO_ROOT
from helpers import random_normal
import jax
import jax.numpy as jnp
import numpy as np
import pytest


@pytest.mark.parametrize("width", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("rows", [7, 5000])
def test_gram_and_mix_are_the_products_in_float64(kernels, width, rows, x64):
  """Rows not a multiple of the kernel's row blocks (4096), batch axes of
  rank 0 to 2, mixing into r and r + 1 columns: equal to numpy's float64
  products to rounding."""
  for batch in [(), (3,), (2, 2)]:
    x = random_normal(batch + (rows, width), np.float64, seed=width + rows)
    np.testing.assert_allclose(
      kernels.gram_of_columns(jnp.asarray(x)),
      np.einsum("...mi,...mj->...ij", x, x),
      rtol=1e-13,
      atol=1e-12,
    )
    for out_columns in (width, width + 1):
      coef = random_normal(batch + (out_columns, width), np.float64, seed=1)
      np.testing.assert_allclose(
        kernels.mix_columns(jnp.asarray(x), jnp.asarray(coef)),
        np.einsum("...mi,...ji->...mj", x, coef),
        rtol=1e-13,
        atol=1e-13,
      )


def test_float32_matches_the_float64_products(kernels):
  x = random_normal((4, 9000, 16), np.float32, seed=3)
  coef = random_normal((4, 16, 16), np.float32, seed=4)
  exact = np.einsum("bmi,bmj->bij", x.astype(np.float64), x)
  np.testing.assert_allclose(
    kernels.gram_of_columns(jnp.asarray(x)), exact, rtol=2e-5, atol=2e-2
  )
  np.testing.assert_allclose(
    kernels.mix_columns(jnp.asarray(x), jnp.asarray(coef)),
    np.einsum("bmi,bji->bmj", x.astype(np.float64), coef),
    rtol=1e-4,
    atol=1e-4,
  )


def test_vmap_jit_and_scan_reach_the_kernel_with_batch_axes(kernels, x64):
  """vmapped (the estimators' per-example step), with an unbatched `coef`,
  and inside a jitted scan: the same values as the direct products."""
  x = jnp.asarray(random_normal((5, 300, 9), np.float64, seed=5))
  coef = jnp.asarray(random_normal((9, 9), np.float64, seed=6))
  mixed = jax.jit(jax.vmap(kernels.mix_columns, (0, None)))(x, coef)
  np.testing.assert_allclose(
    mixed, np.einsum("bmi,ji->bmj", x, coef), rtol=1e-13, atol=1e-13
  )

  def body(carry, _):
    gram = jax.vmap(kernels.gram_of_columns)(carry)
    scale = 1.0 / jnp.sqrt(jnp.trace(gram, axis1=1, axis2=2))
    return carry * scale[:, None, None], gram

  _, grams = jax.jit(lambda c: jax.lax.scan(body, c, None, length=3))(x)
  expected, carry = [], np.asarray(x)
  for _ in range(3):
    gram = np.einsum("bmi,bmj->bij", carry, carry)
    expected.append(gram)
    carry = carry / np.sqrt(np.trace(gram, axis1=1, axis2=2))[:, None, None]
  np.testing.assert_allclose(grams, np.stack(expected), rtol=1e-12)


def test_derivatives_are_those_of_the_products(kernels, x64):
  x = jnp.asarray(random_normal((2, 50, 5), np.float64, seed=7))
  coef = jnp.asarray(random_normal((2, 6, 5), np.float64, seed=8))

  def loss(gram_fn, mix_fn):
    return lambda x, c: (
      jnp.sum(jnp.sin(gram_fn(x))) + jnp.sum(jnp.cos(mix_fn(x, c)))
    )

  ours = jax.grad(
    loss(kernels.gram_of_columns, kernels.mix_columns), argnums=(0, 1)
  )(x, coef)
  reference = jax.grad(
    loss(
      lambda x: jnp.einsum("...mi,...mj->...ij", x, x),
      lambda x, c: jnp.einsum("...mi,...ji->...mj", x, c),
    ),
    argnums=(0, 1),
  )(x, coef)
  for a, b in zip(ours, reference):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_results_do_not_depend_on_the_thread_schedule(kernels):
  """The row blocks' partial Gram matrices are added in a fixed order."""
  x = jnp.asarray(random_normal((3, 40000, 12), np.float32, seed=9))
  gram = jax.jit(kernels.gram_of_columns)
  first = np.asarray(gram(x))
  for _ in range(5):
    np.testing.assert_array_equal(np.asarray(gram(x)), first)


def test_usable_says_no_outside_the_compiled_shapes(kernels):
  assert kernels.usable(16, jnp.float32)
  assert kernels.usable(4, jnp.float32, out_columns=5)
  assert not kernels.usable(17, jnp.float32)
  assert not kernels.usable(0, jnp.float32)
  assert not kernels.usable(4, jnp.int32)
  assert not kernels.usable(4, jnp.bfloat16)
  assert not kernels.usable(4, jnp.float32, out_columns=3)


@pytest.mark.parametrize(
  "x_shape, coef_shape",
  [
    ((100, 17), None),
    ((100,), None),
    ((100, 4), (3, 4)),
    ((100, 4), (4, 5)),
    ((100, 4), (4,)),
  ],
)
def test_bad_shapes_are_refused_by_name(kernels, x_shape, coef_shape):
  with pytest.raises(ValueError, match="(gram_of_columns|mix_columns) needs"):
    if coef_shape is None:
      kernels.gram_of_columns(jnp.ones(x_shape))
    else:
      kernels.mix_columns(jnp.ones(x_shape), jnp.ones(coef_shape))


def _probe(env_update: dict, tmp_path) -> subprocess.CompletedProcess:
  env = dict(
    os.environ,
    RTRL_KERNEL_CACHE=str(tmp_path / "cache"),
    JAX_PLATFORMS="cpu",
    **env_update,
  )
  code = (
    "import warnings, jax.numpy as jnp\n"
    "warnings.simplefilter('always')\n"
    "from rtrl import cpu_kernels\n"
    "print('USABLE', cpu_kernels.usable(8, jnp.float32))\n"
  )
  return subprocess.run(
    [sys.executable, "-c", code],
    env=env,
    cwd=REPO_ROOT,
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )


def test_switched_off_by_the_environment(tmp_path):
  result = _probe({"RTRL_CPU_KERNELS": "0"}, tmp_path)
  assert "USABLE False" in result.stdout, result.stderr
  assert "RuntimeWarning" not in result.stderr
  assert not (tmp_path / "cache").exists()


def test_a_failed_build_warns_once_and_falls_back(tmp_path):
  result = _probe({"CXX": shutil.which("false") or "/bin/false"}, tmp_path)
  assert "USABLE False" in result.stdout, result.stderr
  assert "using XLA's own products" in result.stderr


def test_independent_calls_in_one_program_finish(kernels, tmp_path):
  """Several kernel calls with no data dependence may run at once on the
  intra-op pool (each waits only for tasks a helper has claimed). In a
  child process with a deadline, so that a hang fails instead of
  stalling the suite."""
  code = (
    "import jax, jax.numpy as jnp\n"
    "from rtrl import cpu_kernels as k\n"
    "xs = [jnp.full((4, 20000, 16), i + 1.0) for i in range(4)]\n"
    "c = jnp.ones((4, 16, 16))\n"
    "f = jax.jit(lambda *xs: [k.gram_of_columns(x) for x in xs]\n"
    "            + [k.mix_columns(x, c) for x in xs])\n"
    "for _ in range(20):\n"
    "  out = jax.block_until_ready(f(*xs))\n"
    "print('SUM', float(out[0][0, 0, 0]), float(out[4][0, 0, 0]))\n"
  )
  result = subprocess.run(
    [sys.executable, "-c", code],
    cwd=REPO_ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    capture_output=True,
    text=True,
    timeout=240,
    check=False,
  )
  assert "SUM 20000.0 16.0" in result.stdout, result.stderr[-2000:]
