#!/usr/bin/env bash
# decode_attention.sh - cache_attention alone on the GPU machine, in one
# device call: build fusec and test_decode (Release, no LLVM), run
# test_decode (every attention case and the fused cache updates on CUDA
# against the reference), then the decode step's attention with both
# cache updates fused at GPT-2's shape (12 heads, D = 64, cache 1024) and
# the Llama-1B shape (32 query and 8 key/value heads, D = 64, cache 2048),
# the position at the cache's last row: its plan, a `fusec --profile`
# table (the per-launch median), and with ncu one launch's full set.
# About 90 s of build, 20 s of test, 10 s a shape (ncu: 40 s a shape).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/decode_attention.sh
#
# Knobs (environment): ATT_NOBUILD=1, ATT_BUILD_DIR (build), ATT_NCU=0
# (no ncu). Back in $OUT: run.log, build.log, test_decode.log, and per
# shape (gpt2, llama) the .ir, _plan.txt, _profile.txt, _ncu.csv.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source bench/bench_env.sh
source bench/onnx-gpu-build.sh
BUILD=${ATT_BUILD_DIR:-build}
echo "   commit: ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}; nproc $(nproc)"
[[ ${ATT_NOBUILD:-0} == 1 ]] || ONNX_BUILD_DIR=$BUILD onnx_gpu_build fusec test_decode || exit 1
echo "== test_decode (CUDA against the reference) [t=$((SECONDS - START))s]"
FUSEC_SRC=$ROOT timeout 150 "$BUILD/tests/test_decode" >"$OUT/test_decode.log" 2>&1
echo "   rc=$?"; grep -E 'CHECK failed|attention case|fused update' "$OUT/test_decode.log" | head -20; tail -2 "$OUT/test_decode.log"
# One step's attention: the queries and the new rows are parameters, the
# caches inout, %pos (parameter 3) from a .npy at the cache's last row.
declare -A SHAPE=([gpt2]="12 12 1024" [llama]="32 8 2048")
for m in gpt2 llama; do
    read -r hq hkv ctx <<<"${SHAPE[$m]}"
    ir=$OUT/$m.ir
    cat >"$ir" <<EOF
graph step(%q: bf16[1, $hq, 1, 64], %knew: bf16[1, $hkv, 1, 64], %vnew: bf16[1, $hkv, 1, 64], %pos: i64[],
           %kc: inout bf16[1, $hkv, $ctx, 64], %vc: inout bf16[1, $hkv, $ctx, 64]) {
  %k = update_slice(%kc, %knew, %pos, axis=2) : bf16[1, $hkv, $ctx, 64]
  %v = update_slice(%vc, %vnew, %pos, axis=2) : bf16[1, $hkv, $ctx, 64]
  %len = add(%pos, 1) : i64[]
  %o = cache_attention(%q, %k, %v, %len) : bf16[1, $hq, 1, 64]
  return %o
}
EOF
    python3 -c "import numpy as np, sys; np.save(sys.argv[1], np.array(int(sys.argv[2]) - 1, dtype=np.int64))" \
        "$OUT/${m}_pos.npy" "$ctx" || continue
    inputs=",,,$OUT/${m}_pos.npy"
    "$BUILD/fusec" "$ir" --emit=plan >"$OUT/${m}_plan.txt" 2>&1
    echo "== $m: $(grep fc_cache_attention "$OUT/${m}_plan.txt" | sed 's/ ops:.*//')"
    timeout 90 "$BUILD/fusec" "$ir" --device cuda --inputs "$inputs" --profile --profile-runs 50 \
        >"$OUT/${m}_profile.txt" 2>&1
    echo "   profile rc=$?:"; grep -E 'fc_cache_attention' "$OUT/${m}_profile.txt" | head -2 | sed 's/^/      /'
    if [[ ${ATT_NCU:-1} != 0 ]] && command -v ncu >/dev/null; then
        timeout 120 ncu --csv --set full --kernel-name regex:fc_cache_attention --launch-count 1 "$BUILD/fusec" "$ir" \
            --device cuda --inputs "$inputs" --run >"$OUT/${m}_ncu.csv" 2>"$OUT/${m}_ncu.err"
        echo "   ncu rc=$?: $(grep -E '"(Duration|Registers Per Thread|Executed Instructions|Memory Throughput)"' \
            "$OUT/${m}_ncu.csv" | awk -F'","' '{printf "%s %s %s; ", $13, $15, $14}')"
    fi
done
echo "== $((SECONDS - START)) s"
