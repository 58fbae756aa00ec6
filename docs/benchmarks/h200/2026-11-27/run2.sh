# Second device call of 2026-11-27: which piece makes 16-KF-APPROX's
# batch-256 20-run program compile slowly. Four variants compile at once.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
ARGS="--experiment copy_task --preset official --estimator kf_approx --rank 16 --batch_size 256 --num_seeds 20 --steps 40 --chunk_steps 20 --repeats 1 --sequential_runs 1"
probe() {  # NAME DIR PROGRAM [XLA_FLAGS]
  ( cd "$2" && XLA_FLAGS="${4:-}" timeout -s KILL 140 python3 $3 $ARGS \
      > "$OUT/$1.log" 2>&1; echo "### exit $? after ${SECONDS}s" >> "$OUT/$1.log" ) &
}
probe closed_form . "-m scripts.bench_seeds"
probe closed_form_argsort . ".gpu/pairwise0.py"
probe gram .gpu/gram "-m scripts.bench_seeds" "--xla_dump_to=/tmp/dump_gram"
probe gram_argsort .gpu/gram "../pairwise0.py"
wait
ls /tmp/dump_gram | grep -i -v "jit_\|^module_0000" | head -20 > "$OUT/dump_names.txt"
ls /tmp/dump_gram | wc -l >> "$OUT/dump_names.txt"
for f in $(ls /tmp/dump_gram/*reduce_fusion* 2>/dev/null | head -3); do
  echo "=== $f"; head -c 20000 "$f"; done > "$OUT/fusion_gram.txt"
grep -h -E "^first call|Very slow|^### exit|^FLOP" "$OUT"/*.log
