#!/usr/bin/env bash
# run-graphs.sh - issue 7 on the GPU machine, in one call: build, the tests
# that touch graphs and dynamic shapes, bench/dynamic_bench.c beside
# bench/graphs_torch.py (torch.compile mode="reduce-overhead").
#
#   bash scripts/prepare-gpu-carry.sh     # here, once: .deps/xxhash/xxhash.h
#   device run, carry [".deps"]:  bash bench/run-graphs.sh
#
# Knobs: GRAPHS_TESTS (ctest -R regex; "all" for every test; default: the
# tests of programs, GEMMs, graphs and dynamic shapes), GRAPHS_BENCH
# (dynamic_bench workloads; default "gpt2 mlp8 replay20 sweep"),
# GRAPHS_TORCH=0 skips PyTorch. Logs: $OUT/build.log, ctest.log, bench.log,
# torch.log, sweep.csv.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEC_SRC=$ROOT FUSEC_CACHE_DIR=/tmp/fusec-graphs-cache
TESTS=${GRAPHS_TESTS:-"test_specialize|test_dynamic|test_program|test_gemm|test_cuda_driver"}
BENCH=${GRAPHS_BENCH:-"gpt2 mlp8 replay20 sweep"}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF \
    -DFUSEC_XXHASH_DIR="$ROOT/.deps/xxhash" >"$OUT/build.log" 2>&1 &&
    ninja -C build >>"$OUT/build.log" 2>&1
echo "build: rc=$?"
tail -3 "$OUT/build.log"

if [[ $TESTS == all ]]; then R=(); else R=(-R "$TESTS"); fi
(cd build && timeout 300 ctest -j4 --output-on-failure "${R[@]}") >"$OUT/ctest.log" 2>&1
echo "ctest: rc=$?"
grep -E "tests passed|Failed|\*\*\*|CHECK" "$OUT/ctest.log" | head -30

if [[ -n $BENCH ]]; then
    SWEEP_CSV=$OUT/sweep.csv timeout 300 build/dynamic_bench $BENCH >"$OUT/bench.log" 2>&1
    echo "dynamic_bench: rc=$?"
fi
if [[ ${GRAPHS_TORCH:-1} != 0 ]]; then
    timeout 240 python3 bench/graphs_torch.py --modes eager,reduce-overhead --json "$OUT/torch.json" \
        >"$OUT/torch.log" 2>&1
    echo "graphs_torch: rc=$?"
fi
echo "=== results"
grep -h RESULT "$OUT/bench.log" "$OUT/torch.log" 2>/dev/null
tail -5 "$OUT/bench.log" 2>/dev/null | grep -v RESULT
