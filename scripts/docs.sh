#!/usr/bin/env bash
# Builds the documentation into docs/_build/html, offline, warnings as errors.
#   bash scripts/docs.sh            # sets up .venv with the docs extras, builds
# The tutorials (docs/tutorials/*.md) are executed during the build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh docs
rm -rf docs/_build/html docs/api/generated
exec .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html "$@"
