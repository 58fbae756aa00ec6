#!/usr/bin/env bash
# Sets up .venv and runs the default test suite (about 20 minutes on 2 cores).
#   bash scripts/test.sh           # default suite
#   bash scripts/test.sh --slow    # only the slow tests (long learning runs)
# Other arguments are passed to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
args=()
for arg in "$@"; do
  if [ "$arg" = "--slow" ]; then args+=(-m slow); else args+=("$arg"); fi
done
# A persistent XLA cache for this run only, shared by both workers: tests
# that build the same program (the same HLO) compile it once (18% off a
# 322-test slice here). A caller's own JAX_COMPILATION_CACHE_DIR and
# JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS are kept.
if [ -z "${JAX_COMPILATION_CACHE_DIR:-}" ]; then
  JAX_COMPILATION_CACHE_DIR="$(mktemp -d)"
  trap 'rm -rf "$JAX_COMPILATION_CACHE_DIR"' EXIT
fi
: "${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:=0}"
export JAX_COMPILATION_CACHE_DIR JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS
.venv/bin/python -m pytest -n 2 -q --durations=15 "${args[@]}"
