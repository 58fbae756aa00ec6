#!/usr/bin/env bash
# Sets up .venv and runs the default test suite (about 10 minutes on 2 cores).
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
exec .venv/bin/python -m pytest -n 2 -q --durations=15 "${args[@]}"
