"""Shared pytest fixtures: float64 switches, the location of ../shared/data
and the built CPU kernels."""

import os
import pathlib

from helpers import REPO_ROOT
import jax
import pytest


def shared_data_root() -> pathlib.Path:
  """`$DATA_DIR` if set, else `../shared/data` beside the repository."""
  env = os.environ.get("DATA_DIR")
  return pathlib.Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def data_root() -> pathlib.Path:
  return shared_data_root()


# Read once, when pytest loads this file: loader tests clear $DATA_DIR
# (`no_data_dir_env`) to test the download path, and still need the real data.
SHARED_DATA_ROOT = shared_data_root()


def dataset_dir_or_skip(name: str) -> pathlib.Path:
  """Folder of one real dataset (e.g. 'mnist'); skips the test if absent.

  Uses `$DATA_DIR` as it was when the test session started."""
  path = SHARED_DATA_ROOT / name
  if not path.is_dir():
    pytest.skip(
      f"real dataset '{name}' not found at {path} "
      f"(set DATA_DIR or place ../shared/data/{name} beside the repo)"
    )
  return path


@pytest.fixture
def no_data_dir_env(monkeypatch):
  """Unsets $DATA_DIR, so that a loader falls back on its download cache."""
  monkeypatch.delenv("DATA_DIR", raising=False)


@pytest.fixture
def x64():
  """Runs the test body with float64 enabled."""
  with jax.enable_x64(True):
    yield


@pytest.fixture(scope="module")
def kernels():
  """`rtrl.cpu_kernels`, built. Skips where no C++ compiler exists; where
  one does, the build must succeed (a silent fallback would hide a broken
  kernel behind XLA's products and LAPACK)."""
  from helpers import HAVE_COMPILER  # pylint: disable=g-import-not-at-top

  from rtrl import cpu_kernels  # pylint: disable=g-import-not-at-top

  if not HAVE_COMPILER:
    pytest.skip("no C++ compiler: the kernels cannot be built here")
  assert cpu_kernels.usable(16, jax.numpy.float32)
  assert cpu_kernels.svd_usable(17, jax.numpy.float32)
  return cpu_kernels
