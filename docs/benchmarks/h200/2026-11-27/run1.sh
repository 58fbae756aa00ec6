# The device call of 2026-11-27 (issue 38): one command, ~540 s.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site DATA_DIR=$PWD/.gpu/data PYTHONUNBUFFERED=1
python3 -c "import jax, flax, optax, ml_collections; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
# KF-APPROX before the fix (the tree before this session's change), in the
# background: does it compile within 110 s, and which fusion is slow.
(
  cd .gpu/before && XLA_PYTHON_CLIENT_PREALLOCATE=false \
  XLA_FLAGS=--xla_dump_to=/tmp/dump_before timeout -s KILL 110 \
  python3 -m scripts.bench_seeds --experiment copy_task --preset official \
    --estimator kf_approx --rank 16 --batch_size 256 --num_seeds 20 \
    --steps 40 --chunk_steps 20 --repeats 1 --sequential_runs 1 \
    > "$OUT/before.log" 2>&1
  echo "### exit $?" >> "$OUT/before.log"
  python3 ../extract_fusion.py /tmp/dump_before "$OUT/before.log" \
    > "$OUT/fusion_before.txt" 2>&1
) &
S="$OUT/s"
OUT=$S PRECISIONS=highest bash scripts/gpu_suite.sh seeds
OUT=$S bash scripts/gpu_suite.sh kf_approx
echo "elapsed ${SECONDS}s"
[ "$SECONDS" -lt 300 ] && OUT=$S PROFILE_SEEDS=20 \
  PROFILE_EXPERIMENTS=copy_task bash scripts/gpu_suite.sh profile
OUT=$S DEADLINE=$((${END:-540} - SECONDS)) bash scripts/gpu_suite.sh precision
wait
tar czf "$OUT/all.tgz" -C "$OUT" s && rm -rf "$S"
echo "total ${SECONDS}s"
