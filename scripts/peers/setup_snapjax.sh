#!/usr/bin/env bash
# kevinlopezandrade/snapjax (JAX/Equinox; no licence: run here, never
# copied) in /work/peers/snapjax/{src,venv}, for
# `python -m scripts.bench_peers --peers snapjax` (see _common.sh).
#
#   bash scripts/peers/setup_snapjax.sh
#
# Its pyproject pins jax ^0.4.23 with CUDA; here its run-time dependencies
# are installed beside jax 0.9.2 and the snapshot is put on the path
# (PYTHONPATH, set by scripts/bench_peers.py), not built. 0.9.2 is the
# newest jax it imports on (it uses `jax._src.api._vjp`, gone in 0.10);
# ours runs on the same jax in the same process (the project supports
# jax >= 0.4.35), so both sides share one XLA.
# Its sparse SnAp kernel (`spp_primitives/sp_ops*.so`) links libcusparse: on
# a CPU it cannot load, so scripts/benchlib/peers_snapjax.py stands in a
# module that raises if it is called, and snapjax's dense-mask path (what
# its own tests compare the sparse one against) is what runs.
SNAPJAX_COMMIT="${SNAPJAX_COMMIT:-2958e09}"
JAX_VERSION="0.9.2"
source "$(dirname "$0")/_common.sh"
make_venv snapjax 3.11
snapshot snapjax kevinlopezandrade+snapjax "$SNAPJAX_COMMIT"
"$PY" -m pip install --quiet "equinox>=0.11.2" "jaxtyping>=0.2.25" \
  "networkx>=3.2.1" "scipy>=1.11" "${OUR_REQUIREMENTS[@]}"
"$PY" -m pip check
check_import '
from scripts.benchlib.peers_snapjax import import_snapjax
snapjax = import_snapjax()
import equinox, jax
print(f"ok: snapjax (dense-mask path), equinox {equinox.__version__}, "
      f"jax {jax.__version__}")'
