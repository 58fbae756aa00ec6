"""Compiles the kernels (`tall_skinny.cc`, `small_svd.cc`) once per machine
into one library and registers their custom calls.

The library is built on first use with the C++ compiler found on `PATH`
(`$CXX`, else `g++`, `c++`, `clang++`), at `-O3 -march=native`, against the
XLA FFI headers that ship with jaxlib (`jax.ffi.include_dir()`). The shared
object is cached under `$RTRL_KERNEL_CACHE` (default
`~/.cache/rtrl-rls/kernels`), keyed by a hash of the sources, the flags, the
compiler's version, jaxlib's version and this CPU's model and feature
flags, so a cache shared between machines never hands one machine's
`-march=native` build to another. Concurrent processes (pytest workers)
serialise on a lock file; the object is written under a temporary name
and renamed into place.

Anything that fails (no compiler, no headers, a compile error, a load
error) is reported once as a warning and the callers fall back to XLA's
own products and `jnp.linalg.svd`: the kernels are an optimisation, never
a requirement.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import os
import pathlib
import platform
import shutil
import subprocess
import tempfile
import warnings

import jax

_HERE = pathlib.Path(__file__).parent
SOURCES = (_HERE / "tall_skinny.cc", _HERE / "small_svd.cc")
HEADERS = (_HERE / "common.h",)
# -fno-math-errno lets GCC vectorise the per-lane square roots.
FLAGS = (
  "-O3",
  "-march=native",
  "-std=c++17",
  "-shared",
  "-fPIC",
  "-w",
  "-fno-math-errno",
)
TARGETS = {
  "rtrl_tall_gram": "RtrlTallGram",
  "rtrl_tall_mix": "RtrlTallMix",
  "rtrl_small_svd": "RtrlSmallSvd",
}
DISABLE_ENV = "RTRL_CPU_KERNELS"


def _compiler() -> str | None:
  for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
    if name and shutil.which(name):
      return shutil.which(name)
  return None


def _cpu_identity() -> str:
  """The CPU's model name and feature flags (what `-march=native` sees)."""
  try:
    lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
  except OSError:
    return platform.processor() + platform.machine()
  keep = [
    line
    for line in lines
    if line.startswith(("model name", "flags", "Features", "CPU part"))
  ]
  return "\n".join(sorted(set(keep)))


def _cache_dir() -> pathlib.Path:
  root = os.environ.get("RTRL_KERNEL_CACHE")
  if root:
    return pathlib.Path(root)
  return pathlib.Path.home() / ".cache" / "rtrl-rls" / "kernels"


def _compile(compiler: str, include_dir: str, target: pathlib.Path) -> None:
  target.parent.mkdir(parents=True, exist_ok=True)
  lock_path = target.with_suffix(".lock")
  import fcntl  # POSIX only, like the compilers this builds with

  with open(lock_path, "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if target.exists():
      return
    fd, partial = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
      result = subprocess.run(
        [
          compiler,
          *FLAGS,
          f"-I{include_dir}",
          *[str(source) for source in SOURCES],
          "-o",
          partial,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
      )
      if result.returncode != 0:
        raise RuntimeError(
          f"{compiler} failed on the kernels:\n{result.stderr[-3000:]}"
        )
      os.replace(partial, target)
    finally:
      if os.path.exists(partial):
        os.remove(partial)


def library_path() -> pathlib.Path:
  """Where this machine's build lives (built if missing).

  Raises:
    RuntimeError: no C++ compiler on `PATH`, or the compile failed.
  """
  compiler = _compiler()
  if compiler is None:
    raise RuntimeError("no C++ compiler (set $CXX, or install g++)")
  include_dir = jax.ffi.include_dir()
  version = subprocess.run(
    [compiler, "--version"], capture_output=True, text=True, check=False
  ).stdout
  key = hashlib.sha256(
    "\0".join(
      [
        *[path.read_text() for path in SOURCES + HEADERS],
        " ".join(FLAGS),
        version,
        jax.__version__,
        importlib.metadata.version("jaxlib"),
        platform.machine(),
        _cpu_identity(),
      ]
    ).encode()
  ).hexdigest()[:20]
  target = _cache_dir() / f"rtrl_kernels-{key}.so"
  if not target.exists():
    _compile(compiler, include_dir, target)
  return target


@functools.cache
def load() -> bool:
  """Builds (once), loads and registers the custom calls; True if usable.

  False, after one warning saying why, when `$RTRL_CPU_KERNELS` is `0` (no
  warning then), when there is no CPU backend, or when the build or load
  fails."""
  if os.environ.get(DISABLE_ENV, "1") == "0":
    return False
  try:
    jax.devices("cpu")
  except RuntimeError:
    return False
  if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
    return False
  try:
    library = ctypes.cdll.LoadLibrary(str(library_path()))
    for name, symbol in TARGETS.items():
      jax.ffi.register_ffi_target(
        name, jax.ffi.pycapsule(getattr(library, symbol)), platform="cpu"
      )
  except Exception as error:
    warnings.warn(
      f"rtrl.cpu_kernels: using XLA's own products and LAPACK's SVD "
      f"instead of these kernels ({type(error).__name__}: {error}). Set "
      f"{DISABLE_ENV}=0 to skip the build.",
      RuntimeWarning,
      stacklevel=2,
    )
    return False
  return True
