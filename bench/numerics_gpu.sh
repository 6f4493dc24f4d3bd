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
#                 PyTorch and torch.compile (NUMERICS_BENCH=0 skips it;
#                 NUMERICS_GRAPHS, a comma-separated subset of its graphs)
#                                                                  -> $OUT/numerics.md
#   5. profile    (not in the default steps) fusec --profile of the bf16
#                 GPT-2 block, the block followed by a layernorm and the
#                 Llama block at B=8, T=1024: launches and device time,
#                 about 20 s each, then a table of each one's launches,
#                 times and errors (docs/NUMERICS.md, "Residual sums")
#                                                                  -> $OUT/<graph>.profile.txt
#
#   The residual-sum rule, in about 150 s after the build:
#     NUMERICS_STEPS="build bench profile" \
#     NUMERICS_GRAPHS=gpt2_block_bf16,gpt2_block_ln_bf16,llama_block bash bench/numerics_gpu.sh
#   expected: gpt2_block_bf16 7 launches (3 kernels, 4 library calls; with
#   the rule applied to it regardless, 8 and 0.259 ms of device time), the
#   block followed by a layernorm 8, the Llama block 9; every error at or
#   below eager PyTorch's, and the block followed by a layernorm at or below
#   torch.compile's.
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
    graphs=()
    [[ -n ${NUMERICS_GRAPHS:-} ]] && graphs=(--graphs "$NUMERICS_GRAPHS")
    timeout "$(limit 300)" python3 bench/numerics_bench.py --fusec build/fusec --md "$OUT/numerics.md" \
        "${graphs[@]}" >"$OUT/numerics.log" 2>&1
    echo "numerics_bench: rc=$? [t=$((SECONDS - START))s]"
    cat "$OUT/numerics.log"
fi
if on profile; then
    # The block followed by a layernorm, as bench/numerics_bench.py writes it.
    ln_ir=$OUT/gpt2_block_ln_bf16.ir
    python3 bench/ir_variants.py layernorm_after examples/gpt2_block_bf16.ir "$ln_ir"
    specs=("gpt2_block_bf16 examples/gpt2_block_bf16.ir" "gpt2_block_ln_bf16 $ln_ir" "llama_block examples/llama_block.ir")
    for spec in "${specs[@]}"; do
        name=${spec%% *} ir=${spec#* }
        timeout "$(limit 90)" build/fusec "$ir" --bind B=8,T=1024 --device=cuda --profile --profile-runs=20 \
            >"$OUT/$name.profile.txt" 2>&1
        echo "profile $name: rc=$? [t=$((SECONDS - START))s]"
    done
    echo
    echo "| graph | launches | device ms | plain run ms | rel L2: fusec fast / fusec eager / PyTorch / compile |"
    echo "|---|---|---|---|---|"
    for spec in "${specs[@]}"; do
        name=${spec%% *} p=$OUT/${spec%% *}.profile.txt
        launches=$(grep -o '^launches: [0-9]* ([^)]*)' "$p" 2>/dev/null | sed 's/^launches: //')
        dev=$(grep -o '^device time: [0-9.]*' "$p" 2>/dev/null | grep -o '[0-9.]*$')
        plain=$(grep -o '^plain run[^:]*: [0-9.]*' "$p" 2>/dev/null | grep -o '[0-9.]*$')
        errs=$(grep "^| $name |" "$OUT/numerics.md" 2>/dev/null | awk -F'|' '{
            for (i = 4; i <= 7; i++) { split($i, c, " / "); gsub(/ /, "", c[1]); printf "%s%s", c[1], i < 7 ? " / " : "" } }')
        echo "| $name | ${launches:--} | ${dev:--} | ${plain:--} | ${errs:--} |"
    done
fi
echo "== done in $((SECONDS - START)) s"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
