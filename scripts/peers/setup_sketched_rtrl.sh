#!/usr/bin/env bash
# sonaradarcn/sketched-rtrl (PyTorch, MIT; the SK-RTRL paper's code) in
# /work/peers/sketched_rtrl/{src,venv}, for
# `python -m scripts.bench_peers --peers sketched_rtrl` (see _common.sh).
#
#   bash scripts/peers/setup_sketched_rtrl.sh
#
# Not a package: its `skrtrl/` is imported from the snapshot's clone
# (PYTHONPATH, set by scripts/bench_peers.py). torch 2.13.0 is the
# CPU build pip takes from this machine's disk (a bare `torch` would pull a
# CUDA build of several GB).
SKETCHED_RTRL_COMMIT="${SKETCHED_RTRL_COMMIT:-bb6055e}"
source "$(dirname "$0")/_common.sh"
make_venv sketched_rtrl 3.11
snapshot sketched_rtrl sonaradarcn+sketched-rtrl "$SKETCHED_RTRL_COMMIT"
"$PY" -m pip install --quiet "torch==2.13.0" "scipy>=1.11" \
  "${OUR_REQUIREMENTS[@]}"
"$PY" -m pip check
check_import '
import torch, skrtrl.algos, skrtrl.baselines, jax
print(f"ok: sketched-rtrl, torch {torch.__version__}, jax {jax.__version__}")'
