#!/usr/bin/env bash
# Creates the peer venv for scripts/bench_peers.py OUTSIDE the project:
# braintrace 0.2.6 (PyPI) plus what `rtrl` and `experiments` import, with the
# checkout reached through PYTHONPATH (the project is not installed there).
# braintrace is never a dependency of this project.
#
#   bash scripts/peers/setup_braintrace.sh
#   /work/peers/braintrace/bin/python -m scripts.bench_peers
#
# Versions: braintrace 0.2.6 needs Python >= 3.11 and pulls brainstate 0.5.4
# and the newest jax; jax is pinned here to the version the project's own
# .venv tests on (0.10.2), which braintrace 0.2.6 accepts as well.
# Overridable: PEER_VENV (default /work/peers/braintrace), PYTHON311.
set -euo pipefail
VENV="${PEER_VENV:-/work/peers/braintrace}"
PYTHON311="${PYTHON311:-$(command -v python3.11 || echo /root/.pyenv/shims/python3.11)}"
JAX_VERSION="0.10.2"

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON311" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# One resolver call, so that braintrace's and our requirements meet.
"$VENV/bin/python" -m pip install --quiet \
  "braintrace==0.2.6" \
  "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION" \
  "optax>=0.2.3" "flax>=0.10.0" "chex>=0.1.87" "absl-py>=2.0" \
  "numpy>=1.26" "ml_collections>=0.1.1" "matplotlib>=3.8"
"$VENV/bin/python" -m pip check
cd "$(dirname "$0")/../.."
PYTHONPATH="$PWD" "$VENV/bin/python" -c '
import braintrace, brainstate, jax, rtrl, experiments.online.setup
print(f"ok: braintrace {braintrace.__version__}, brainstate "
      f"{brainstate.__version__}, jax {jax.__version__}; rtrl importable")'
