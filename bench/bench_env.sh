# bench_env.sh - sourced by the GPU bench scripts (bench/decode_bench.sh,
# bench/run-whole.sh) from the repository root: sets ROOT, OUT (made; ./out
# unless set), START, unbuffered Python; tees the console into $OUT/run.log
# (TEE_PID, to wait for at the end) and prints the date and GPU line.
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
START=$SECONDS
exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!

echo "== env: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
