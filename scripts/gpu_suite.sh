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
#   plans     `reproduce.py TARGET --scale paper --plan` for $PLAN_TARGETS,
#             each under $PLAN_SECONDS (default 300)
#   kf_approx ok_fig4's KF-APPROX programs (Copy, RHN-128, batch 256, 20
#             runs, ranks 16 and 4): compile time and ms/step
#   precision the official presets (5 seeds; $PRECISION_TASKS, default
#             "copy_task ptb") at 'highest' and 'tensorfloat32' side by
#             side, the runs sharing the GPU for
#             $PRECISION_SECONDS (default 240) each, stopped by SIGTERM;
#             their records go to json.tgz, for `experiments/studies/precision_bands.py`;
#             with $DEADLINE (seconds from the suite's start) they stop 45 s
#             before it
#   headline  the OK paper's headline runs, resumed block after block
#             (scripts/gpu_headline.sh; $HEADLINE_TASKS, default
#             copy_task); with $DEADLINE they stop 45 s before it
#
# $PRECISIONS (default "highest tensorfloat32") sets the `seeds` section's
# precisions, $PROFILE_SEEDS (default 1) the runs of the profiled programs
# and $PROFILE_EXPERIMENTS (default "copy_task ptb") which are profiled.
# Every `seeds` run ends with its 20-run program's FLOP floor (bench_rtrl.py's
# count) against a large matmul's rate measured alongside.
#
# Logs go to $OUT/SECTION.log and JSON files to $OUT/json_SECTIONS.tgz. It
# runs with whatever `python3` is first on the PATH (PYTHON to choose
# another).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to the folder for the logs}"
PYTHON="${PYTHON:-python3}"
PLAN_TARGETS="${PLAN_TARGETS:-ok_fig12 ok_fig5_table3}"
PLAN_SECONDS="${PLAN_SECONDS:-300}"
PRECISION_TASKS="${PRECISION_TASKS:-copy_task ptb}"
PRECISIONS="${PRECISIONS:-highest tensorfloat32}"
PRECISION_SECONDS="${PRECISION_SECONDS:-240}"
PROFILE_SEEDS="${PROFILE_SEEDS:-1}"
PROFILE_EXPERIMENTS="${PROFILE_EXPERIMENTS:-copy_task ptb}"
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
      for precision in $PRECISIONS; do
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
      for experiment in $PROFILE_EXPERIMENTS; do
        run profile 150 "$PYTHON" -m scripts.profile_step \
          --experiment $experiment --preset official --chunk_steps 50 \
          --num_seeds "$PROFILE_SEEDS" \
          --json "$JSON_DIR/profile_${experiment}_$PROFILE_SEEDS.json"
      done ;;
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
    kf_approx)
      for rank in 16 4; do
        run kf_approx 150 "$PYTHON" -m scripts.bench_seeds \
          --experiment copy_task --preset official --estimator kf_approx \
          --rank $rank --batch_size 256 --num_seeds 20 --steps 40 \
          --chunk_steps 20 --repeats 1 --sequential_runs 1 \
          --json "$JSON_DIR/kf_approx_$rank.json"
      done ;;
    precision)
      # The runs share the GPU (no preallocation of its memory); each
      # logs beside its workdir (into json.tgz).
      mkdir -p "$JSON_DIR/precision"
      seconds=$PRECISION_SECONDS
      if [ -n "${DEADLINE:-}" ]; then  # end 45 s before the call's limit
        left=$((DEADLINE - SECONDS - 45))
        [ "$left" -lt "$seconds" ] && seconds=$left
      fi
      echo "[precision] $seconds s per run"
      [ "$seconds" -lt 60 ] && { echo "[precision] skipped"; continue; }
      for task in $PRECISION_TASKS; do
        for precision in highest tensorfloat32; do
          name=${task%_task}_$precision
          (
            XLA_PYTHON_CLIENT_PREALLOCATE=false timeout --signal=TERM --kill-after=40 \
              "$seconds" "$PYTHON" -m experiments.$task \
              --config configs/$task.py:official --config.num_seeds=5 \
              --config.matmul_precision=$precision \
              --workdir "$JSON_DIR/precision/$name" \
              > "$JSON_DIR/precision/$name.log" 2>&1
            echo "[precision] $name rc=$?"
          ) &
        done
      done
      wait
      tail -n 3 "$JSON_DIR"/precision/*.log > "$OUT/precision.log" ;;
    plans)
      for target in $PLAN_TARGETS; do
        run plans "$PLAN_SECONDS" "$PYTHON" scripts/reproduce.py "$target" --scale paper \
          --plan --workdir "$JSON_DIR/plans"
      done ;;
    headline)  # its own logs, packed runs and table under $OUT
      OUT="$OUT" PYTHON="$PYTHON" DEADLINE=$((${DEADLINE:-570} - SECONDS)) \
        bash scripts/gpu_headline.sh ${HEADLINE_TASKS:-copy_task} ;;
    *) echo "unknown section $section" >&2 ;;
  esac
done

find "$JSON_DIR" -name '*.json' -o -name '*.md' -o -name '*.jsonl' \
  -o -name '*.log' |
  tar czf "$OUT/json_$(IFS=_; echo "${sections[*]}").tgz" \
  -C / -T - 2>/dev/null
# The tables, for a reader of the output's tail.
grep -h -A4 "^| side" "$OUT"/seeds.log 2>/dev/null
grep -h -E "^(Copy|char-PTB|PTB)" "$OUT"/seeds.log 2>/dev/null | cut -c1-160
grep -h -E "per step, from|copies per chunk|kernels per step|device busy" \
  "$OUT"/profile.log 2>/dev/null
grep -h -E "^FLOP floor|^first call|Very slow|^\| vmapped" "$OUT"/seeds.log \
  "$OUT"/kf_approx.log 2>/dev/null
exit 0
