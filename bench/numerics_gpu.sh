#!/usr/bin/env bash
# numerics_gpu.sh - the measurements behind docs/NUMERICS.md's GPU tables, on
# the GPU machine, in one call:
#   1. build      fusec and tests/test_gpu_math (Release, no LLVM, the carried
#                 deps: bench/onnx-gpu-build.sh)                   -> $OUT/build.log
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
# FUSEC_GPU_MATH_POINTS (the f32 sweep's size, default 2^22),
# NUMERICS_TOTAL_S (560: every step's limit is cut to what is left of it, so
# the call ends inside a 600 s device run; with the build, about 150 s, the
# three measurements take about 300 s: when one is cut, run the rest in a
# second call with NUMERICS_STEPS="bench", the build kept).
# Back in $OUT: run.log (console), env.txt, build.log and one file a step.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source bench/bench_env.sh
source bench/onnx-gpu-build.sh
STEPS=" ${NUMERICS_STEPS:-build gpu_math bitwise bench} "
TOTAL=${NUMERICS_TOTAL_S:-560}
on() { [[ $STEPS == *" $1 "* ]]; }
# A step's timeout: its own cap, or what is left of TOTAL (at least 10 s).
limit() {
    local left=$((TOTAL - (SECONDS - START)))
    ((left < 10)) && left=10
    echo $(($1 < left ? $1 : left))
}
export FUSEC_SRC=$ROOT FUSEC_CACHE_DIR=/tmp/fusec-numerics-cache

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/env.txt" 2>&1
echo "commit ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" | tee -a "$OUT/env.txt"
if on build; then
    onnx_gpu_build fusec test_gpu_math
    echo "build: rc=$? [t=$((SECONDS - START))s]"
fi
if on gpu_math; then
    timeout "$(limit 240)" build/tests/test_gpu_math >"$OUT/gpu_math.md" 2>"$OUT/gpu_math.err"
    echo "test_gpu_math: rc=$? [t=$((SECONDS - START))s]"
    cat "$OUT/gpu_math.md" "$OUT/gpu_math.err"
fi
if on bitwise; then
    timeout "$(limit 200)" python3 bench/eager_bitwise.py --fusec build/fusec --md "$OUT/eager_bitwise.md" \
        >"$OUT/eager_bitwise.log" 2>&1
    echo "eager_bitwise: rc=$? [t=$((SECONDS - START))s]"
    cat "$OUT/eager_bitwise.log"
fi
if on bench && [[ ${NUMERICS_BENCH:-1} != 0 ]]; then
    timeout "$(limit 300)" python3 bench/numerics_bench.py --fusec build/fusec --md "$OUT/numerics.md" \
        >"$OUT/numerics.log" 2>&1
    echo "numerics_bench: rc=$? [t=$((SECONDS - START))s]"
    cat "$OUT/numerics.log"
fi
echo "== done in $((SECONDS - START)) s"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
