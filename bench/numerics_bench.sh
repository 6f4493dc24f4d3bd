#!/usr/bin/env bash
# bench/numerics_bench.sh - run bench/numerics_bench.py on the GPU machine.
#
# Assumes build/fusec is built with CUDA (bench/run-gpu.sh's build step, or
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build --target fusec)
# and python3 with torch (CUDA) and numpy. Prints one table and writes it to
# $OUT/numerics.md (OUT defaults to ./out). Any argument is passed on to the
# script (--graphs pointwise_bf16,softmax, --reps 20, --no-compile).
#
#   bash bench/numerics_bench.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUSEC=${FUSEC:-$ROOT/build/fusec}
OUT=${OUT:-$ROOT/out}
if [[ ! -x $FUSEC ]]; then
    echo "numerics_bench.sh: $FUSEC is not built (cmake --build build --target fusec)" >&2
    exit 2
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 "$ROOT/bench/numerics_bench.py" --fusec "$FUSEC" --md "$OUT/numerics.md" "$@"
