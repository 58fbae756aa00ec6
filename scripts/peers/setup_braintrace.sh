#!/usr/bin/env bash
# braintrace 0.2.8 (PyPI, Apache-2.0) in /work/peers/braintrace/venv, for
# `python -m scripts.bench_peers --peers braintrace` (see _common.sh).
#
#   bash scripts/peers/setup_braintrace.sh
#
# braintrace 0.2.8 needs Python >= 3.12 (0.2.6 ran on 3.11) and pulls
# brainstate and braintools; jax is pinned to the project's (0.10.2).
source "$(dirname "$0")/_common.sh"
make_venv braintrace 3.12
# One resolver call, so that braintrace's and our requirements meet.
"$PY" -m pip install --quiet "braintrace==0.2.8" "${OUR_REQUIREMENTS[@]}"
"$PY" -m pip check
check_import '
import braintrace, brainstate, jax
print(f"ok: braintrace {braintrace.__version__}, brainstate "
      f"{brainstate.__version__}, jax {jax.__version__}")'
