"""`pip install .` installs the library packages `rtrl` and `rls` only (with
the C++ source `rtrl.cpu_kernels` builds) and the dependencies they import;
the experiments, configs and scripts run from the checkout, with the
`experiments` extra."""

import ast
import importlib.metadata
import re
import subprocess
import sys
import zipfile

from helpers import REPO_ROOT
import pytest


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
  # What `pip install .` installs: the library's imports, no extra.
  (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
  requires = [
    line.split(":", 1)[1].strip()
    for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
    if line.startswith("Requires-Dist:")
  ]
  unconditional = {_distribution(r) for r in requires if "extra ==" not in r}
  assert unconditional == {"jax", "jaxlib", "optax", "flax", "numpy"}


def _distribution(requirement: str) -> str:
  """`'jax>=0.4.35'` -> `'jax'` (normalised: lower case, `_` as `-`)."""
  name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
  return name.lower().replace("_", "-")


def _project() -> dict:
  tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
  return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def _third_party_imports(folders) -> tuple[set[str], set[str]]:
  """Top-level names of the modules `folders`' Python files import that
  are not the standard library or this project's: `(at module level,
  inside functions)` (a lazy import serves an optional feature)."""
  own = {"rtrl", "rls", "experiments", "configs", "scripts", "tests"}
  eager, lazy = set(), set()
  for folder in folders:
    for path in (REPO_ROOT / folder).rglob("*.py"):
      tree = ast.parse(path.read_text())
      top = {id(node) for node in tree.body}
      for node in ast.walk(tree):
        if isinstance(node, ast.Import):
          names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
          names = [node.module or ""]
        else:
          continue
        for name in {n.split(".")[0] for n in names}:
          if name in own or name in sys.stdlib_module_names:
            continue
          (eager if id(node) in top else lazy).add(name)
  return eager, lazy


def _distributions_of(modules) -> dict[str, set[str]]:
  """`{module: its installed distributions}` (normalised names)."""
  installed = importlib.metadata.packages_distributions()
  return {m: {_distribution(d) for d in installed.get(m, [m])} for m in modules}


def test_the_library_dependencies_are_what_it_imports():
  """`pip install .` installs what `rtrl` and `rls` import at module level,
  and nothing the experiments alone need (those are the `experiments`
  extra); a lazily imported module (an optional feature's) is in some
  extra."""
  project = _project()
  core = {_distribution(r) for r in project["dependencies"]}
  extras = {
    name: {_distribution(r) for r in requirements}
    for name, requirements in project["optional-dependencies"].items()
  }
  eager, lazy = _third_party_imports(["rtrl", "rls"])
  for module, dists in _distributions_of(eager).items():
    assert dists & core, f"rtrl/rls import {module}: not a dependency"
  for module, dists in _distributions_of(lazy).items():
    assert dists & (core | set().union(*extras.values())), module
  # jaxlib is jax's runtime; everything else listed is imported.
  imported = set().union(*_distributions_of(eager).values())
  assert core - imported == {"jaxlib"}, core - imported
  assert {"ml-collections", "absl-py", "matplotlib"} <= extras["experiments"]
  assert not {"ml-collections", "absl-py", "matplotlib"} & core


def test_the_experiments_extra_holds_what_the_checkout_imports():
  """experiments/, configs/ and the scripts that are not peers' import only
  the library's dependencies and the `experiments` extra at module level,
  and the quick start and the test script install that extra."""
  project = _project()
  allowed = {_distribution(r) for r in project["dependencies"]} | {
    _distribution(r) for r in project["optional-dependencies"]["experiments"]
  }
  eager, _ = _third_party_imports(["experiments", "configs"])
  for module, dists in _distributions_of(eager).items():
    assert dists & allowed, f"experiments/configs import {module}"
  setup = (REPO_ROOT / "scripts" / "setup_env.sh").read_text()
  assert 'extras="experiments"' in setup
  for script in ("quickstart.sh", "test.sh"):
    text = (REPO_ROOT / "scripts" / script).read_text()
    assert "bash scripts/setup_env.sh" in text, script
