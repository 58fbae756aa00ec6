#!/usr/bin/env bash
# Sets up .venv (the library and its `experiments` extra, scripts/setup_env.sh)
# and runs the main job: a small 8-OK Copy-task run (RHN, 32
# units) that prints progress and finishes in a few minutes on a laptop CPU.
# Extra arguments are passed to experiments.copy_task (e.g. --config.num_steps=1000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh experiments
exec .venv/bin/python -m experiments.copy_task \
  --config configs/copy_task.py --workdir "${WORKDIR:-runs/quickstart}" "$@"
