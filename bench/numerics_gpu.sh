#!/usr/bin/env bash
# numerics_gpu.sh - the measurements behind docs/NUMERICS.md's GPU tables, on
# the GPU machine, in one call:
#   1. build      fusec and tests/test_gpu_math (Release, no LLVM, the carried
#                 deps as bench/run-whole.sh configures them)      -> $OUT/build.log
#   2. gpu_math   tests/test_gpu_math: each f32 function fusec's CUDA code
#                 emits, both numerics, f32 and bf16/f16 storage, max ulp
#                 against float64 over dense sweeps              -> $OUT/gpu_math.md
#   3. bitwise    bench/eager_bitwise.py: --numerics=eager against eager
#                 PyTorch bit for bit, each op and a few bf16/f16 chains
#                                                                  -> $OUT/eager_bitwise.md
#   4. bench      bench/numerics_bench.py: every graph's error beside eager
#                 PyTorch and torch.compile (NUMERICS_BENCH=0 skips it)
#                                                                  -> $OUT/numerics.md
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:  bash bench/numerics_gpu.sh
#
# Knobs: NUMERICS_STEPS (subset of "build gpu_math bitwise bench"),
# FUSEC_GPU_MATH_POINTS (the f32 sweep's size, default 2^22).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) && cd "$ROOT" || exit 1
OUT=${OUT:-$ROOT/out} && mkdir -p "$OUT"
STEPS=" ${NUMERICS_STEPS:-build gpu_math bitwise bench} "
on() { [[ $STEPS == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1 FUSEC_SRC=$ROOT FUSEC_CACHE_DIR=/tmp/fusec-numerics-cache

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/env.txt"
if on build; then
    onnx=()
    [[ -d .deps/onnx ]] && onnx=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF \
        -DFUSEC_XXHASH_DIR="$ROOT/.deps/xxhash" "${onnx[@]}" >"$OUT/build.log" 2>&1 &&
        timeout 300 ninja -C build fusec test_gpu_math >>"$OUT/build.log" 2>&1
    echo "build: rc=$?"
fi
if on gpu_math; then
    timeout 240 build/tests/test_gpu_math >"$OUT/gpu_math.md" 2>"$OUT/gpu_math.err"
    echo "test_gpu_math: rc=$?"
    cat "$OUT/gpu_math.md" "$OUT/gpu_math.err"
fi
if on bitwise; then
    timeout 240 python3 bench/eager_bitwise.py --fusec build/fusec --md "$OUT/eager_bitwise.md" >"$OUT/eager_bitwise.log" 2>&1
    echo "eager_bitwise: rc=$?"
    cat "$OUT/eager_bitwise.log"
fi
if on bench && [[ ${NUMERICS_BENCH:-1} != 0 ]]; then
    timeout 300 python3 bench/numerics_bench.py --fusec build/fusec --md "$OUT/numerics.md" >"$OUT/numerics.log" 2>&1
    echo "numerics_bench: rc=$?"
    cat "$OUT/numerics.log"
fi
