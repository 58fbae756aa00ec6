#!/usr/bin/env bash
# Sets up RTRRL's public code (Lemmel & Grosu, AAAI 2025, FranzKnut/
# RTRRL-AAAI25) OUTSIDE the project, to be RUN for measurement only by
# scripts/bench_rl.py: the repository has no licence file, so none of its
# code is ever copied into this project. Three things under $PEER_ROOT
# (default /work/peers/rtrrl):
#
#   src/    the fetched snapshot's files, copied out of the local git
#           mirror (`git archive`); the mirror is made beforehand by the
#           session tool `fetch github:FranzKnut/RTRRL-AAAI25` (this machine
#           reaches package registries only, never GitHub).
#   venv/   Python 3.11 with the versions of their poetry.lock (jax 0.5.0,
#           flax 0.10.3, brax 0.10.5, gymnax 0.0.8, distrax 0.1.5, ...),
#           from PyPI, for what their code imports.
#   shim/   a stand-in for `popjym`, which their code imports at module level
#           but which is a git-only dependency (EdanToledo/popjym, not on
#           PyPI). The stand-in only satisfies the import: it has
#           `registration.REGISTERED_ENVS = ()` (no names) and a `make` that
#           raises. Their make_env tests `env_name in gymnax.registered_envs`
#           first, so a gymnax task (CartPole-v1, MemoryChain-bsuite) never
#           reaches popjym and runs exactly as it would with the real package;
#           a POPGym name (their default, StatelessCartPoleEasy) fails with a
#           clear error instead.
#
#   bash scripts/peers/setup_rtrrl.sh
#   cd /work/peers/rtrrl/src && PYTHONPATH=.:../shim ../venv/bin/python \
#       rtrrl.py --env_name CartPole-v1 --episodes 6 --eval_every 0 --seed 1
#   .venv/bin/python -m scripts.bench_rl      # ours beside theirs
#
# Overridable: PEER_ROOT, RTRRL_MIRROR (the mirror's git directory),
# PYTHON311.
set -euo pipefail
ROOT="${PEER_ROOT:-/work/peers/rtrrl}"
MIRROR="${RTRRL_MIRROR:-/work/.mirror/FranzKnut+RTRRL-AAAI25/repo}"
PYTHON311="${PYTHON311:-$(command -v python3.11 || echo /root/.pyenv/shims/python3.11)}"

if ! git --git-dir="$MIRROR" rev-parse --verify -q HEAD >/dev/null; then
  echo "setup_rtrrl.sh: no git mirror of FranzKnut/RTRRL-AAAI25 at $MIRROR;" \
    "fetch it first (session tool: fetch github:FranzKnut/RTRRL-AAAI25)" >&2
  exit 1
fi

# 1. Their files, as committed, and the commit they are from.
rm -rf "$ROOT/src"
mkdir -p "$ROOT/src"
git --git-dir="$MIRROR" archive HEAD | tar -x -C "$ROOT/src"
git --git-dir="$MIRROR" log -1 --format='%H %cs' HEAD >"$ROOT/src/COMMIT"
echo "RTRRL-AAAI25 at $(cat "$ROOT/src/COMMIT") -> $ROOT/src"

# 2. The venv: their poetry.lock's versions of what rtrrl.py imports
# (brax pulls mujoco and mujoco-mjx; gym and gymnasium are both imported by
# envs/). Not installed: popjym (git-only, shimmed below), and the packages
# only their optional paths use (flashbax, pyhopper, wandb, aim, dm-pix).
if [ ! -x "$ROOT/venv/bin/python" ]; then
  "$PYTHON311" -m venv "$ROOT/venv"
fi
"$ROOT/venv/bin/python" -m pip install --quiet --upgrade pip
"$ROOT/venv/bin/python" -m pip install --quiet \
  "jax==0.5.0" "jaxlib==0.5.0" "flax==0.10.3" "optax==0.2.4" \
  "chex==0.1.88" "distrax==0.1.5" "tensorflow-probability==0.25.0" \
  "brax==0.10.5" "mujoco==3.2.7" "mujoco-mjx==3.2.7" \
  "gymnax==0.0.8" "gym==0.26.2" "gymnasium==1.0.0" \
  "numpy==2.2.2" "scipy==1.15.1" "ml-dtypes==0.5.1" \
  "simple-parsing==0.1.7" "dacite==1.9.2" "plotly==5.24.1" \
  "tqdm==4.67.1" "pillow==11.1.0" "orbax-checkpoint==0.11.5" \
  "typing-extensions==4.12.2"

# 3. The popjym stand-in (see the header): import-only, no environments.
mkdir -p "$ROOT/shim/popjym"
cat >"$ROOT/shim/popjym/__init__.py" <<'EOF'
"""Stand-in for popjym (git-only, not on PyPI), written by the rtrl-rls
project's scripts/peers/setup_rtrrl.sh so that RTRRL-AAAI25's modules
import. It provides no environment: RTRRL's make_env checks gymnax's
registry first, so gymnax tasks never reach this module."""

from popjym import registration


def make(env_id, *args, **kwargs):
  raise NotImplementedError(
    f"popjym stand-in: {env_id!r} needs the real popjym "
    "(github.com/EdanToledo/popjym), not installable here; use a gymnax "
    "environment"
  )
EOF
cat >"$ROOT/shim/popjym/registration.py" <<'EOF'
"""Stand-in registry (see popjym/__init__.py): no POPGym names."""

REGISTERED_ENVS = ()
EOF

# 4. Their entry module imports (jax on the CPU, as measured here).
cd "$ROOT/src"
JAX_PLATFORMS=cpu PYTHONPATH="$ROOT/src:$ROOT/shim" "$ROOT/venv/bin/python" -c '
import jax, flax, brax, gymnax, distrax
import rtrrl
print(f"ok: jax {jax.__version__}, flax {flax.__version__}, brax "
      f"{brax.__version__}, distrax {distrax.__version__}; rtrrl imports")'
