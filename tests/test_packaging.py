"""`pip install .` installs the library packages `rtrl` and `rls` only (with
the C++ source `rtrl.cpu_kernels` builds); the experiments, configs and
scripts run from the checkout."""

import subprocess
import sys
import zipfile

from helpers import REPO_ROOT


def test_wheel_holds_only_rtrl_and_rls(tmp_path):
  """Builds the wheel as `pip install .` does (pip fetches the build backend
  from the package index, as the README's setup does)."""
  result = subprocess.run(
    [
      sys.executable,
      "-m",
      "pip",
      "wheel",
      "--no-deps",
      "-q",
      "-w",
      str(tmp_path),
      str(REPO_ROOT),
    ],
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  (wheel,) = tmp_path.glob("*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  tops = {name.split("/")[0] for name in names}
  packages = {top for top in tops if not top.endswith(".dist-info")}
  assert packages == {"rtrl", "rls"}
  # rtrl.cpu_kernels compiles its C++ sources on first use.
  for source in ("tall_skinny.cc", "small_svd.cc", "common.h"):
    assert f"rtrl/cpu_kernels/{source}" in names
  # PEP 561 markers: type checkers read both packages' annotations.
  assert {"rtrl/py.typed", "rls/py.typed"} <= set(names)
