#!/usr/bin/env bash
# Creates .venv (if absent) and installs this project with extras: its
# test extras by default, or those named, e.g. `setup_env.sh docs` or
# `setup_env.sh test,dev`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[${1:-test}]"
