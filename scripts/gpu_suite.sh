#!/usr/bin/env bash
# The GPU measurements behind the README's GPU tables, in one command.
#
#   OUT=/tmp/gpu DATA_DIR=../shared/data bash scripts/gpu_suite.sh [SECTION ...]
#
# Sections (default: all but `plans`, in this order; each under its own time
# limit, so one that overruns does not cost the others):
#   seeds     the OK paper's two official settings (Copy 16-OK RHN-128 b16,
#             char-PTB 8-OK RHN-256 b32), a single run and 20 vmapped runs,
#             at 'highest' and 'tensorfloat32' GEMM precision (bench_seeds.py)
#   profile   one traced chunk of each of those programs at two chunk
#             lengths: kernels per step, device time by kind, and the copies
#             between host and device per step (profile_step.py)
#   linalg    the small batched factorisations of r-OK's reduction
#             (bench_small_linalg.py) and r-OK against r-KF-AVG with OK's
#             step broken down (bench_rtrl.py)
#   lru       the online LRU against its forward pass (bench_lru.py)
#   estimators  the element-wise and structured-D estimators' full steps
#             (UORO, SnAp-1, RFLO, KF, 16-KF-APPROX, 16-KTP; bench_rtrl.py)
#   plans     `reproduce.py TARGET --scale paper --plan` for $PLAN_TARGETS
#
# Logs go to $OUT/SECTION.log and JSON files to $OUT/json.tgz. It runs with
# whatever `python3` is first on the PATH (PYTHON to choose another).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to the folder for the logs}"
PYTHON="${PYTHON:-python3}"
PLAN_TARGETS="${PLAN_TARGETS:-ok_fig12 ok_fig5_table3}"
JSON_DIR="$(mktemp -d)"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(seeds profile linalg lru)

# run SECTION SECONDS COMMAND...: appends the command and its output to the
# section's log, under a time limit.
run() {
  local section=$1 seconds=$2
  shift 2
  echo "### $* (limit ${seconds}s)" >> "$OUT/$section.log"
  local start=$SECONDS
  timeout --signal=KILL "$seconds" "$@" >> "$OUT/$section.log" 2>&1
  local rc=$?
  echo "### exit $rc after $((SECONDS - start))s" >> "$OUT/$section.log"
  echo "[$section] rc=$rc $((SECONDS - start))s: $*"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem \
    --format=csv 2>/dev/null
  "$PYTHON" -c "import jax; print('jax', jax.__version__, jax.devices())"
} > "$OUT/env.log" 2>&1
cat "$OUT/env.log"

for section in "${sections[@]}"; do
  case $section in
    seeds)
      for precision in highest tensorfloat32; do
        run seeds 150 "$PYTHON" -m scripts.bench_seeds --experiment copy_task \
          --preset official --num_seeds 20 --steps 300 --chunk_steps 100 \
          --sequential_runs 2 --matmul_precision $precision \
          --json "$JSON_DIR/seeds_copy_$precision.json"
        run seeds 200 "$PYTHON" -m scripts.bench_seeds --experiment ptb \
          --preset official --num_seeds 20 --steps 200 --chunk_steps 100 \
          --sequential_runs 2 --matmul_precision $precision \
          --json "$JSON_DIR/seeds_ptb_$precision.json"
      done ;;
    profile)
      run profile 120 "$PYTHON" -m scripts.profile_step --experiment copy_task \
        --preset official --chunk_steps 50 --json "$JSON_DIR/profile_copy.json"
      run profile 150 "$PYTHON" -m scripts.profile_step --experiment ptb \
        --preset official --chunk_steps 50 --json "$JSON_DIR/profile_ptb.json"
      ;;
    linalg)
      run linalg 90 "$PYTHON" -m scripts.bench_small_linalg --sizes 2,3,9,17 \
        --batches 16,32,320,640
      run linalg 200 "$PYTHON" -m scripts.bench_rtrl --sizes 128,256 \
        --estimators ok,kf_avg --ranks 1,8,16 --breakdown_sizes 128,256 \
        --json "$JSON_DIR/bench_rtrl_ok.json"
      ;;
    lru)
      run lru 200 "$PYTHON" -m scripts.bench_lru --sizes 64,128,256 \
        --layers 1,4 --steps 50 --repeats 5
      ;;
    estimators)
      run estimators 150 "$PYTHON" -m scripts.bench_rtrl --sizes 128,256 \
        --estimators uoro,snap1,rflo,kf,kf_approx,ktp --ranks 16 \
        --breakdown_sizes none --json "$JSON_DIR/bench_rtrl_elementwise.json"
      ;;
    plans)
      for target in $PLAN_TARGETS; do
        run plans 300 "$PYTHON" scripts/reproduce.py "$target" --scale paper \
          --plan --workdir "$JSON_DIR/plans"
      done ;;
    *) echo "unknown section $section" >&2 ;;
  esac
done

find "$JSON_DIR" -name '*.json' -o -name '*.md' | tar czf "$OUT/json.tgz" \
  -C / -T - 2>/dev/null
# The tables, for a reader of the output's tail.
grep -h -A4 "^| side" "$OUT"/seeds.log 2>/dev/null
grep -h -E "^(Copy|char-PTB|PTB)" "$OUT"/seeds.log 2>/dev/null | cut -c1-160
grep -h -E "per step, from|copies per chunk|kernels per step|device busy" \
  "$OUT"/profile.log 2>/dev/null
exit 0
