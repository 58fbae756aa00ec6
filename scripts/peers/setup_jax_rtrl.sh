#!/usr/bin/env bash
# FranzKnut/jax_rtrl (JAX/Flax, MIT) in /work/peers/jax_rtrl/{src,venv}, for
# `python -m scripts.bench_peers --peers jax_rtrl` (see _common.sh).
#
#   bash scripts/peers/setup_jax_rtrl.sh
#
# Its pyproject pins jax 0.6.2 and pulls plotting and dataset tools; the
# package imports flax, distrax, chex, jaxtyping, simple-parsing, dacite
# and tqdm (its models and networks modules load at import), so
# those are installed beside the project's jax (0.10.2) and the snapshot is
# put on the path (PYTHONPATH, set by scripts/bench_peers.py).
JAX_RTRL_COMMIT="${JAX_RTRL_COMMIT:-7d95ca6}"
source "$(dirname "$0")/_common.sh"
make_venv jax_rtrl 3.11
snapshot jax_rtrl FranzKnut+jax_rtrl "$JAX_RTRL_COMMIT"
"$PY" -m pip install --quiet "distrax" "jaxtyping" "typing_extensions" \
  "simple-parsing" "dacite" "tqdm" \
  "${OUR_REQUIREMENTS[@]}"
"$PY" -m pip check
check_import '
from jax_rtrl.models.cells.ctrnn import OnlineCTRNNCell
import flax, jax
print(f"ok: jax_rtrl, flax {flax.__version__}, jax {jax.__version__}")'
