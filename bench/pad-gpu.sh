#!/usr/bin/env bash
# pad-gpu.sh - the padding and head-dim work on the GPU machine, in one
# device call: build (Release, no LLVM, the carried deps, as
# bench/onnx-gpu-build.sh does), then
#
#   attention  the head dims of 80 and 96 (and 72/112) on the Hopper kernel:
#              test_attention_headdim (a block with a fused QKV projection at
#              D = 80 and 96 through fc_compile/fc_run against the reference;
#              its plan must use "flash wgmma"), test_attention's kernels at
#              those head dims (fc_attn_fa3 with TMA and with cp.async, and
#              fc_attn_tc, each against the reference), and the kernels timed
#              at B=8, H=16, S=2048, D = 80, 96 and 128 (test_attention's
#              bench: mma.sync against wgmma), then PyTorch's SDPA and fusec's
#              whole pipeline at the same shapes (bench/attention_bench.py);
#   padding    test_pad and test_pad_small_m (CPU-side plans, and the padded
#              paths' numerics on CUDA), test_skinny (the GEMVs, their
#              padded forms among them, against the reference);
#   sweep      bench/gemm_sweep.sh: the unaligned GEMMs at M = 1 and 8 (both
#              forms, with the skinny kernel's 64-aligned shapes) and at
#              M = 128 and 8192, against the next aligned shape and PyTorch.
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600, two calls:
#           bash bench/pad-gpu.sh attention padding
#           bash bench/pad-gpu.sh sweep                 (a warm machine's build is a no-op)
#   (no step named: all three in one call, about 470 s with the build)
#
# About 150 s of build, then estimated 120 s (attention: NVRTC for each
# kernel, the timed kernels, SDPA and fusec's pipeline at three head dims),
# 20 s (padding) and at most about 175 s (sweep: fusec's budget 110 s,
# PyTorch's 50 s). Back in $OUT:
# run.log (the console), build.log, headdim.log, attention.log, attn_bench.log,
# sdpa.log, pad.log, pad_small_m.log, skinny.log, sweep.md (the sweep's table) and sweep/ (its logs).
# PAD_NOBUILD=1 keeps the build as it is.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source bench/bench_env.sh
source bench/onnx-gpu-build.sh
BUILD=${ONNX_BUILD_DIR:-build}
STEPS=${*:-attention padding sweep}
echo "   commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown); steps: $STEPS"

ONNX_NOBUILD=${PAD_NOBUILD:-0} onnx_gpu_build fusec gemm_sweep test_attention test_attention_headdim test_pad test_pad_small_m test_skinny ||
    exit 1
export FUSEC_CACHE_DIR=$BUILD/test-cache
summary=()
step() { # name log command...: run it, keep its status and its last line
    local name=$1 log=$2 t0=$SECONDS
    shift 2
    echo "== $name [t=$((SECONDS - START))s]"
    "$@" >"$log" 2>&1
    local rc=$?
    grep -E "^(gpu|cpu|bench): |WRONG|DIFFERS|FAIL|passed" "$log" | tail -30 | sed 's/^/   /'
    summary+=("| $name | rc $rc | $((SECONDS - t0)) s | $(tail -1 "$log" | cut -c1-90) |")
}

for s in $STEPS; do
    case $s in
    attention)
        step "test_attention_headdim" "$OUT/headdim.log" timeout 120 "$BUILD/tests/test_attention_headdim"
        step "test_attention, D 72-96" "$OUT/attention.log" env FUSEC_ATTN_CASES='D=72|D=80|D=96' \
            timeout 200 "$BUILD/tests/test_attention"
        step "attention kernels timed" "$OUT/attn_bench.log" env FUSEC_ATTN_BENCH=1 FUSEC_ATTN_BENCH_ONLY=1 \
            FUSEC_ATTN_BENCH_QUICK=1 FUSEC_ATTN_BENCH_D=80,96,128 timeout 200 "$BUILD/tests/test_attention"
        step "SDPA and fusec's pipeline" "$OUT/sdpa.log" timeout 200 python3 bench/attention_bench.py \
            --fusec "$BUILD/fusec" --reps 30 --no-compile --dims 80,96,128
        sed -n '/^attention B=/,$p' "$OUT/sdpa.log" | sed 's/^/   /'
        ;;
    padding)
        step "test_pad" "$OUT/pad.log" timeout 200 "$BUILD/tests/test_pad"
        step "test_pad_small_m" "$OUT/pad_small_m.log" timeout 100 "$BUILD/tests/test_pad_small_m"
        step "test_skinny" "$OUT/skinny.log" timeout 200 "$BUILD/tests/test_skinny"
        ;;
    sweep)
        echo "== gemm_sweep [t=$((SECONDS - START))s]"
        SWEEP_OUT=$OUT/sweep SWEEP_FUSEC_S=${SWEEP_FUSEC_S:-110} SWEEP_TORCH_S=${SWEEP_TORCH_S:-50} \
            bash bench/gemm_sweep.sh "$BUILD" >"$OUT/sweep.md" 2>&1
        summary+=("| gemm_sweep | rc $? | | $(tail -1 "$OUT/sweep.md" | cut -c1-90) |")
        ;;
    *) echo "pad-gpu: unknown step '$s' (attention, padding, sweep)" ;;
    esac
done

[[ -f $OUT/sweep.md && $STEPS == *sweep* ]] && { echo; cat "$OUT/sweep.md"; }
echo
echo "| step | status | time | last line |"
echo "|---|---|---|---|"
printf '%s\n' "${summary[@]}"
echo "== done in $((SECONDS - START)) s"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit 0
