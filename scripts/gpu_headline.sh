#!/usr/bin/env bash
# The OK paper's headline at its own scale (issue 54): the official Copy and
# char-PTB presets, one seed each, to the official logs' lengths, over as
# many device calls ("blocks") as it takes, each resuming the last.
#
#   OUT=/tmp/out bash scripts/gpu_headline.sh [TASK ...]   (copy_task, ptb)
#
# Each TASK (default copy_task; several share the GPU side by side) trains
# `configs/TASK.py:official` in $HEADLINE_WORKDIR/{copy,ptb}_$PRECISION
# (Copy to $COPY_STEPS, default 2M, checkpointing every 100k; PTB to 1M,
# every 10k: the logs' cadences), resumed from the newest checkpoint there
# or, if the one in $HEADLINE_RESUME is newer, from that. SIGTERM stops it
# $MARGIN s before $DEADLINE: the run loop finishes its chunk, checkpoints
# and exits (experiments/loop/signals.py). Then each run directory (config,
# metrics.jsonl, summary.json, newest checkpoint) is packed for the next
# block and compared with the five logs (experiments.studies.headline_bands).
#
# Environment (defaults in brackets):
#   OUT              the folder for what comes back
#   HEADLINE_WORKDIR [runs/headline] the run directories' parent; git
#                    ignores runs/, so a machine still warm from the last
#                    block still holds it
#   HEADLINE_RESUME  [.gpu/headline] the last block's headline_NAME.tgz.NN
#   DEADLINE         [570] seconds from this script's start by which it
#                    returns (the device call's timeout_s less ~30 s)
#   MARGIN           [45] seconds before DEADLINE at which the runs stop
#   PRECISION        [highest] the runs' matmul_precision
#   COPY_STEPS       [2000000] PTB_STEPS [1000000]
#   MAX_MB           [45] a packed run over this many MiB leaves its
#                    checkpoint out (PTB's 8-OK RHN-256 state is ~134 MB;
#                    Copy's 16-OK RHN-128 one 34 MB)
#   HEADLINE_SET     more --config.FIELD=VALUE flags (tiny CPU checks)
#   WHEELS           [.gpu/whl] wheels installed to /tmp/site first, if any
#   DATA_DIR         [.gpu/data if it exists] ptb/ and official_ok_logs/
#   PYTHON           [python3]
#
# Under $OUT: headline_NAME.log (the run's output), headline_NAME.tgz.NN
# (the packed run in parts of 15 MiB: files come back up to 16 MiB each,
# 8 files and 64 MiB in all), headline.md (the table). Exit status 0 when
# every run finished or stopped cleanly.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to the folder for what comes back}"
HEADLINE_WORKDIR="${HEADLINE_WORKDIR:-runs/headline}"
HEADLINE_RESUME="${HEADLINE_RESUME:-.gpu/headline}"
DEADLINE="${DEADLINE:-570}"
MARGIN="${MARGIN:-45}"
PRECISION="${PRECISION:-highest}"
COPY_STEPS="${COPY_STEPS:-2000000}"
PTB_STEPS="${PTB_STEPS:-1000000}"
MAX_MB="${MAX_MB:-45}"
HEADLINE_SET="${HEADLINE_SET:-}"
WHEELS="${WHEELS:-.gpu/whl}"
PYTHON="${PYTHON:-python3}"
[ -z "${DATA_DIR:-}" ] && [ -d .gpu/data ] && export DATA_DIR=$PWD/.gpu/data
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
tasks=("$@")
[ ${#tasks[@]} -eq 0 ] && tasks=(copy_task)
mkdir -p "$OUT" "$HEADLINE_WORKDIR"

if compgen -G "$WHEELS/*.whl" > /dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# newest_checkpoint DIR: the newest checkpoint file's name in DIR, or "".
newest_checkpoint() {
  local paths=("$1"/checkpoint_*.msgpack)
  [ -e "${paths[0]}" ] && basename "${paths[-1]}"
}

# step_of NAME: the step in checkpoint_0000123000.msgpack (0 for "").
step_of() {
  local digits=${1//[!0-9]/}
  echo $((10#${digits:-0}))
}

# unpack NAME: the last block's packed run, if it is ahead of the one here.
unpack() {
  local name=$1 parts=("$HEADLINE_RESUME/headline_$1.tgz".[0-9][0-9])
  [ -e "${parts[0]}" ] || return 0
  local listing
  listing=$(cat "${parts[@]}" | tar tzf -) || {
    echo "[$name] $HEADLINE_RESUME: parts unreadable; not starting over" >&2
    return 1
  }
  local theirs here
  theirs=$(grep -o 'checkpoint_[0-9]*\.msgpack$' <<< "$listing" | tail -n 1)
  here=$(newest_checkpoint "$HEADLINE_WORKDIR/$name")
  if [ "$(step_of "$theirs")" -gt "$(step_of "$here")" ]; then
    rm -rf "${HEADLINE_WORKDIR:?}/$name"
    cat "${parts[@]}" | tar xzf - -C "$HEADLINE_WORKDIR" || return 1
    echo "[$name] unpacked $theirs from $HEADLINE_RESUME"
  else
    echo "[$name] kept ${here:-no checkpoint} here (parts: ${theirs:-none})"
  fi
}

# pack NAME: the run directory, its newest checkpoint only, in 15 MiB parts.
pack() {
  local name=$1 dir=$HEADLINE_WORKDIR/$1 files=() checkpoint
  for f in config.json metrics.jsonl summary.json; do
    [ -e "$dir/$f" ] && files+=("$name/$f")
  done
  checkpoint=$(newest_checkpoint "$dir")
  if [ -n "$checkpoint" ]; then
    local bytes
    bytes=$(stat -c %s "$dir/$checkpoint")
    if [ "$bytes" -le $((MAX_MB * 1048576)) ]; then
      files+=("$name/$checkpoint" "$name/$checkpoint.sha256")
    else
      echo "[$name] $checkpoint ($((bytes >> 20)) MiB) left out: over" \
        "MAX_MB=$MAX_MB; only a machine still warm can resume it"
      checkpoint=""
    fi
  fi
  rm -f "$OUT/headline_$name.tgz".*
  tar czf - -C "$HEADLINE_WORKDIR" "${files[@]}" |
    split -b 15m -d -a 2 - "$OUT/headline_$name.tgz."
  echo "[$name] packed ${checkpoint:-no checkpoint}:" \
    "$(ls "$OUT/headline_$name.tgz".* | wc -l) part(s)"
}

seconds=$((DEADLINE - MARGIN - SECONDS))
[ "$seconds" -lt 30 ] && { echo "DEADLINE=$DEADLINE leaves no time" >&2; exit 1; }
status=0
for task in "${tasks[@]}"; do
  case $task in
    copy_task) name=copy_$PRECISION steps=$COPY_STEPS every=100000 ;;
    ptb) name=ptb_$PRECISION steps=$PTB_STEPS every=10000 ;;
    *) echo "unknown task $task (copy_task, ptb)" >&2; exit 2 ;;
  esac
  unpack "$name" || { status=1; continue; }
  # The run's flags are word-split on purpose (HEADLINE_SET holds several).
  # shellcheck disable=SC2086
  (
    timeout --signal=TERM --kill-after=30 "$seconds" \
      "$PYTHON" -m experiments.$task --config configs/$task.py:official \
      --config.matmul_precision="$PRECISION" --config.num_steps="$steps" \
      --config.checkpoint_every=$every --config.keep_checkpoints=1 \
      $HEADLINE_SET --workdir "$HEADLINE_WORKDIR/$name" \
      > "$OUT/headline_$name.log" 2>&1
    rc=$?
    case $rc in  # 124: SIGTERM at the deadline, checkpointed (Preempted)
      0) what=finished ;;
      124) what="stopped at the deadline" ;;
      *) what=FAILED ;;
    esac
    echo "[$name] rc=$rc after ${SECONDS}s: $what"
    [ "$what" != FAILED ]
  ) &
done
for job in $(jobs -p); do wait "$job" || status=1; done

for task in "${tasks[@]}"; do
  name=${task%_task}_$PRECISION
  [ -d "$HEADLINE_WORKDIR/$name" ] && pack "$name"
  tail -n 2 "$OUT/headline_$name.log" 2>/dev/null
done
"$PYTHON" -m experiments.studies.headline_bands --workdir "$HEADLINE_WORKDIR" \
  --precision "$PRECISION" --out "$HEADLINE_WORKDIR/compare" &&
  cp "$HEADLINE_WORKDIR/compare/headline.md" "$OUT/"
echo "total ${SECONDS}s"
exit $status
