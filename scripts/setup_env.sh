#!/usr/bin/env bash
# Creates .venv (if absent) and installs this project with its
# `experiments` extra (what experiments/, configs/ and scripts/ import
# beyond the library: ml_collections, absl-py, matplotlib) and the extras
# named, `test` by default: `setup_env.sh docs`, `setup_env.sh test,dev`,
# `setup_env.sh experiments` (that extra alone, as scripts/quickstart.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
extras="experiments"
IFS=',' read -ra named <<< "${1-test}"
for extra in "${named[@]}"; do
  if [ -n "$extra" ] && [ "$extra" != "experiments" ]; then
    extras="$extras,$extra"
  fi
done
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[$extras]"
