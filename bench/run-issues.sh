#!/usr/bin/env bash
# run-issues.sh - the closing run for issues 7 and 8 on the GPU machine, in
# one call: build, every test, then each issue's benchmarks beside PyTorch in
# the same run, and a short table last.
#
#   bash scripts/prepare-gpu-carry.sh     # here, once: .deps/xxhash/xxhash.h
#   device run, carry [".deps"]:  bash bench/run-issues.sh
#
# Steps, each under its own timeout (a failing step never stops the later
# ones); logs under $OUT:
#   build.log   cmake (Release, no LLVM) + ninja
#   ctest.log   every test, GPU ones included (ISSUES_TESTS: a ctest -R regex instead)
#   dyn.log     bench/dynamic_bench.c: gpt2 (B=1, T=64), gpt2_8x1024, mlp8,
#               replay20, sweep (T = 1..1024; sweep.csv per T)
#   torch.log   bench/graphs_torch.py: eager and reduce-overhead (gpt2 B=1
#               T=64, mlp8), then the B=8 T=1024 block with the default mode
#   attn.log    FUSEC_ATTN_BENCH=1 test_attention (the kernels alone) and
#               bench/attention_bench.py (SDPA, and fusec's whole pipeline)
#   trace.log   dynamic_bench trace (a static program's kernels in its graph,
#               from CUPTI: time and gap before each) for the GPT-2 block at
#               B=1, T=64, once per word of ISSUES_TRACE_PICKS (default
#               "default"): default (the heuristic's first or the cache's),
#               tune (FUSEC_GEMM_TUNE=1), or environment settings joined by +
#               (FUSEC_SKINNY=0+FUSEC_CACHE=off)
#   vgemm.log   dynamic_bench vgemm (the variant's generated GEMMs beside
#               cuBLASLt)
#   frame.log   the variant's T sweep (SWEEP_VARIANT_ONLY) in several builds of
#               the variant (ISSUES_FRAME_MODES, default "frame cublaslt"),
#               interleaved over two rounds: frame kernels (frame, the
#               default), the variant's GEMMs as cuBLASLt calls (cublaslt,
#               FUSEC_VARIANT_GEMM=cublaslt); sweep-<mode>-<round>.csv per T
#   ab.log      dynamic_bench ab, two rounds: the variant's sweep in two builds
#               in one process, T by T (A under ISSUES_AB_ENV, default
#               FUSEC_VARIANT_GEMM=cublaslt; B the default)
# Knobs: ISSUES_STEPS (subset of "build ctest dyn trace frame ab vgemm torch attn"),
# ISSUES_TESTS (ctest -R regex; default every test), ISSUES_CTEST_TIMEOUT (s, default
# 420), ISSUES_FRAME_MODES (above),
# ISSUES_DYN (dynamic_bench
# workloads; default "gpt2 gpt2_8x1024 mlp8 replay20 sweep"). Issue 7 alone,
# for example: ISSUES_STEPS="build ctest dyn torch"
# ISSUES_TESTS="specialize|dynamic|program|gemm|cuda_driver".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 FUSEC_SRC=$ROOT FUSEC_CACHE_DIR=/tmp/fusec-issues-cache
STEPS=${ISSUES_STEPS:-"build ctest dyn frame vgemm torch attn"}
on() { [[ " $STEPS " == *" $1 "* ]]; }
if [[ -n ${ISSUES_TESTS:-} ]]; then TESTS=(-R "$ISSUES_TESTS"); else TESTS=(); fi
DYN=${ISSUES_DYN:-"gpt2 gpt2_8x1024 mlp8 replay20 sweep"}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/env.txt"
if on build; then
    # protobuf-c, cJSON and onnx.pb-c carried by prepare-gpu-carry.sh: the ONNX importer and --weights.
    onnx=()
    [[ -d .deps/onnx ]] && onnx=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF \
        -DFUSEC_XXHASH_DIR="$ROOT/.deps/xxhash" "${onnx[@]}" >"$OUT/build.log" 2>&1 &&
        ninja -C build >>"$OUT/build.log" 2>&1
    echo "build: rc=$?"
fi
if on ctest; then
    (cd build && timeout "${ISSUES_CTEST_TIMEOUT:-420}" ctest -j4 --output-on-failure "${TESTS[@]}") >"$OUT/ctest.log" 2>&1
    echo "ctest: rc=$?"
fi
if on dyn; then
    # shellcheck disable=SC2086 # the workloads are words
    SWEEP_CSV=$OUT/sweep.csv timeout 150 build/dynamic_bench $DYN >"$OUT/dyn.log" 2>&1
    echo "dynamic_bench: rc=$?"
fi
if on trace; then
    for pick in ${ISSUES_TRACE_PICKS:-default}; do
        case $pick in
        default) envs=() ;;
        tune) envs=(FUSEC_GEMM_TUNE=1) ;;
        *=*) IFS=+ read -r -a envs <<<"$pick" ;;
        esac
        env "${envs[@]}" timeout 60 build/dynamic_bench trace 2>&1 | sed "s/RESULT fusec trace /RESULT fusec trace[$pick] /"
    done >"$OUT/trace.log" 2>&1
    echo "trace: rc=$?"
fi
if on frame; then
    for round in 1 2; do
        for mode in ${ISSUES_FRAME_MODES:-frame cublaslt}; do
            case $mode in
            frame) envs=() ;;
            cublaslt) envs=(FUSEC_VARIANT_GEMM=cublaslt) ;;
            esac
            env "${envs[@]}" SWEEP_VARIANT_ONLY=1 SWEEP_CSV="$OUT/sweep-$mode-$round.csv" timeout 120 \
                build/dynamic_bench sweep 2>&1 | sed "s/RESULT fusec sweep /RESULT fusec sweep[$mode,$round] /"
        done
    done >"$OUT/frame.log" 2>&1
    echo "frame sweeps: rc=$?"
fi
if on ab; then
    # Two builds of the variant in one process, T by T (dynamic_bench ab):
    # A under ISSUES_AB_ENV (default FUSEC_VARIANT_GEMM=cublaslt), B the default.
    for round in 1 2; do
        AB_ENV=${ISSUES_AB_ENV:-FUSEC_VARIANT_GEMM=cublaslt} timeout 150 build/dynamic_bench ab 2>&1 |
            sed "s/RESULT fusec sweep ab\[/RESULT fusec sweep ab$round[/"
    done >"$OUT/ab.log" 2>&1
    echo "ab: rc=$?"
fi
if on vgemm; then
    timeout 90 build/dynamic_bench vgemm >"$OUT/vgemm.log" 2>&1
    echo "vgemm: rc=$?"
fi
if on torch; then
    {
        timeout 150 python3 bench/graphs_torch.py --workloads gpt2,mlp8 --modes eager,reduce-overhead \
            --json "$OUT/torch_small.json"
        timeout 90 python3 bench/graphs_torch.py --workloads gpt2 --B 8 --T 1024 --modes default --iters 200 \
            --json "$OUT/torch_8x1024.json"
    } >"$OUT/torch.log" 2>&1
    echo "graphs_torch: rc=$?"
fi
if on attn; then
    {
        FUSEC_ATTN_BENCH=1 FUSEC_ATTN_BENCH_ONLY=1 timeout 120 build/tests/test_attention | grep -E "^bench"
        timeout 150 python3 bench/attention_bench.py --fusec build/fusec --reps 30 --json "$OUT/attn.json"
    } >"$OUT/attn.log" 2>&1
    echo "attention: rc=$?"
fi

echo "=== tests"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$OUT/ctest.log" 2>/dev/null | head -20
echo "=== issue 7 (fusec: dynamic_bench; torch: graphs_torch)"
grep -h RESULT "$OUT/dyn.log" "$OUT/torch.log" 2>/dev/null | grep -vE "sweep T=|slow_first" | cut -c1-300
echo "=== issue 7: the GPT-2 block's kernels in its graph (us on the GPU, gap before)"
grep -h "RESULT fusec trace" "$OUT/trace.log" 2>/dev/null | sed -E 's/RESULT fusec trace//; s/ name=(.{0,40}).*/ \1/' | cut -c1-160
echo "=== issue 7: the variant's sweep in each build (ISSUES_FRAME_MODES)"
grep -h "RESULT fusec sweep\[" "$OUT/frame.log" 2>/dev/null |
    grep -E "first_over_call |first_over_call_T_below|second_over_call|extra_host|dynamic_all_T |new_shape_host" |
    sed -E 's/RESULT fusec sweep//' | cut -c1-230
echo "=== issue 7: two builds of the variant, T by T in one process (ab)"
grep -h "RESULT fusec sweep ab" "$OUT/ab.log" 2>/dev/null | sed -E 's/RESULT fusec sweep //' | cut -c1-200
echo "=== variant GEMMs (us: cuBLASLt / generated; split0: the 128 x 128 tile never split)"
grep -h "RESULT fusec vgemm" "$OUT/vgemm.log" 2>/dev/null |
    sed -E 's/RESULT fusec vgemm //; s/cublaslt_us=//; s/generated_us=//; s/ generated_over_cublaslt=[^ ]*//; s/ generated_tflops=/ tf=/; s/ cublaslt_tflops=[^ ]*//' | cut -c1-120
grep -E "passed|failed" "$OUT/vgemm.log" 2>/dev/null | tail -3
echo "=== issue 8"
tail -25 "$OUT/attn.log" 2>/dev/null | cut -c1-200
