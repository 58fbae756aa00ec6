#!/usr/bin/env bash
# The official OK code (marcelomatheusgauy/optimal_kronecker_approximation,
# TensorFlow 1, GPL-3.0: run, never copied) in
# /work/peers/official_ok/{src,venv}, for scripts/bench_official.py:
#
#   bash scripts/peers/setup_official_ok.sh
#   .venv/bin/python -m scripts.bench_official \
#       --official_script /work/peers/official_ok/src/OK/OK_rank_r_unbiased.py \
#       --tf_python /work/peers/official_ok/venv/bin/python
#
# TensorFlow 2.x (CPU build, PyPI) runs it through tensorflow.compat.v1
# (bench_official.py's launcher provides its one tf.contrib call).
OFFICIAL_OK_COMMIT="${OFFICIAL_OK_COMMIT:-HEAD}"
source "$(dirname "$0")/_common.sh"
make_venv official_ok 3.11
# Only the script and its licence are taken from the snapshot (its PTB
# arrays are not needed for the Copy task, and the snapshot lacks them).
SNAPSHOT="${PEER_SNAPSHOT:-/work/.mirror/marcelomatheusgauy+optimal_kronecker_approximation/repo/.git}"
SRC="$PEER_ROOT/official_ok/src"
mkdir -p "$SRC/OK"
for file in OK/OK_rank_r_unbiased.py LICENSE; do
  git --git-dir="$SNAPSHOT" show "$OFFICIAL_OK_COMMIT:$file" >"$SRC/$file"
done
"$PY" -m pip install --quiet "tensorflow-cpu==2.21.0" "scipy"
"$PY" -m pip check
"$PY" -c '
import tensorflow as tf
print(f"ok: official OK code at '"$SRC"', tensorflow {tf.__version__}")'
