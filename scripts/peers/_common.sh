# Shared by scripts/peers/setup_<peer>.sh (sourced, not run): a peer's venv
# OUTSIDE the project, /work/peers/<peer>/venv, holding the peer and what
# `rtrl`, `experiments` and `scripts.bench_peers` import (the checkout is
# reached through PYTHONPATH: the project is not installed there). Peers are
# never dependencies of this project; their code is run, never copied.
#
# Overridable: PEER_ROOT (default /work/peers), PEER_PYTHON (the venv's
# base interpreter; default python3.11, or the version a script asks for).
set -euo pipefail
PEER_ROOT="${PEER_ROOT:-/work/peers}"
# The JAX the project's own .venv tests on; every peer venv gets it, so that
# ours and theirs run on one XLA in one process (a peer that cannot import
# on it sets JAX_VERSION before sourcing this file).
JAX_VERSION="${JAX_VERSION:-0.10.2}"
OUR_REQUIREMENTS=(
  "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION"
  "optax>=0.2.3" "flax>=0.10.0" "chex>=0.1.87" "absl-py>=2.0"
  "numpy>=1.26" "ml_collections>=0.1.1" "matplotlib>=3.8" "pytest>=8"
)
CHECKOUT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# make_venv NAME [PYTHON_VERSION]: creates $PEER_ROOT/NAME/venv (if
# absent) on Python PYTHON_VERSION (default 3.11); sets VENV, PY.
make_venv() {
  VENV="$PEER_ROOT/$1/venv"
  PY="$VENV/bin/python"
  local version="${2:-3.11}"
  # pyenv's shims answer only for the global version: ask pyenv first.
  local base="${PEER_PYTHON:-$(pyenv prefix "$version" 2>/dev/null |
    head -1)/bin/python$version}"
  [ -x "$base" ] || base="$(command -v "python$version")"
  if [ ! -x "$PY" ]; then
    mkdir -p "$PEER_ROOT/$1"
    "$base" -m venv "$VENV"
  fi
  "$PY" -m pip install --quiet --upgrade pip
}

# snapshot NAME OWNER+REPO COMMIT: a clone of the fetched snapshot (the
# search tool's `fetch github:OWNER/REPO` puts it under /work/.mirror; or
# PEER_SNAPSHOT=path) at COMMIT, in $PEER_ROOT/NAME/src; sets SRC.
snapshot() {
  SRC="$PEER_ROOT/$1/src"
  local from="${PEER_SNAPSHOT:-/work/.mirror/$2/repo}"
  if [ ! -d "$SRC/.git" ]; then
    if [ ! -d "$from" ]; then
      echo "no snapshot of $2 at $from: fetch github:${2/+//} first" \
        "(or set PEER_SNAPSHOT)" >&2
      exit 1
    fi
    git clone --quiet "$from" "$SRC"
  fi
  git -C "$SRC" checkout --quiet "$3"
}

# check_import "python code": runs it under the venv with the checkout (and
# the snapshot, if any) on the path: the project's `rtrl` must import
# beside the peer.
check_import() {
  cd "$CHECKOUT"
  PYTHONPATH="$CHECKOUT${SRC:+:$SRC}" "$PY" -c "import rtrl, experiments.online.setup
$1"
}
