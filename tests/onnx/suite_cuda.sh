#!/usr/bin/env bash
# suite_cuda.sh - the ONNX backend suite (libonnx-testdata) compiled for CUDA
# on the GPU machine: every test that passes on the reference interpreter,
# with the tests that do not pass on CUDA in tests/onnx/expected_failures_cuda.txt.
#
#   here:   bash scripts/prepare-gpu-carry.sh && bash tests/onnx/suite_cuda.sh --prepare
#           (the second puts the suite's data, 9 MB packed, in .deps/onnx-testdata.tgz)
#   device run, carry [".deps"], timeout_s 600:
#           bash tests/onnx/suite_cuda.sh
#
# Prints the per-set pass counts, "N passed, N failed, N skipped", and every
# unexpected failure with its reason; $OUT/suite_cuda.log holds the run,
# $OUT/expected_failures_cuda.txt the list as this run would write it (copy
# it over tests/onnx/expected_failures_cuda.txt to accept it), and the same
# for the CPU backend where the build has it. ONNX_NOBUILD=1 keeps the build.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
if [[ ${1:-} == --prepare ]]; then
    mkdir -p .deps
    tar czf .deps/onnx-testdata.tgz -C /usr/share/libonnx-testdata data && ls -la .deps/onnx-testdata.tgz
    exit $?
fi
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
data=/usr/share/libonnx-testdata/data
if [[ ! -d $data ]]; then
    [[ -f .deps/onnx-testdata.tgz ]] || { echo "!! no suite data: run 'bash tests/onnx/suite_cuda.sh --prepare' here and carry [\".deps\"]"; exit 1; }
    mkdir -p /tmp/onnx-testdata && tar xzf .deps/onnx-testdata.tgz -C /tmp/onnx-testdata
    data=/tmp/onnx-testdata/data
fi
source bench/onnx-gpu-build.sh
onnx_gpu_build test_onnx_suite || exit 1
suite=${ONNX_BUILD_DIR:-build}/tests/test_onnx_suite
export FUSEC_SRC=$PWD FUSEC_CACHE_DIR=${FUSEC_CACHE_DIR:-/tmp/fusec-suite-cache}
# SUITE_SHARDS processes (default: the cores / 2, at most 8) each run every
# N-th test (--shard I/N); their counts are summed and their lists joined.
shards=${SUITE_SHARDS:-$(( $(nproc) / 2 > 8 ? 8 : $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
for dev in ${SUITE_DEVICES:-cuda cpu}; do
    echo "== $dev ($shards shards)"
    start=$SECONDS pids=()
    for ((i = 0; i < shards; i++)); do
        timeout "${SUITE_TIMEOUT:-500}" "$suite" --device=$dev --data "$data" --shard "$i/$shards" \
            --write-expected "$OUT/expected_failures_$dev.$i.txt" >"$OUT/suite_$dev.$i.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" # not a bare wait: that would wait for the tee of the log too
    cat "$OUT"/suite_$dev.[0-9]*.log >"$OUT/suite_$dev.log"
    if grep -q "^SKIP" "$OUT/suite_$dev.log"; then grep -m1 "^SKIP" "$OUT/suite_$dev.log"; continue; fi
    grep -h "^#" "$OUT/expected_failures_$dev.0.txt" >"$OUT/expected_failures_$dev.txt" 2>/dev/null
    grep -hv "^#" "$OUT"/expected_failures_$dev.[0-9]*.txt 2>/dev/null | sort >>"$OUT/expected_failures_$dev.txt"
    grep -hE "^(UNEXPECTED|NEWLY)" "$OUT/suite_$dev.log"
    awk '/^[a-z-]+: [0-9]+ of [0-9]+ passed$/ { p[$1] += $2; t[$1] += $4 }
         / passed, [0-9]+ failed, [0-9]+ skipped$/ { a += $1; b += $3; c += $5 }
         /listed for the reference interpreter not run/ { n += substr($3, 2) }
         END { for (k in p) printf "%s %d of %d passed\n", k, p[k], t[k];
               printf "%d listed for the reference interpreter not run\n%d passed, %d failed, %d skipped\n", n, a, b, c }' \
        "$OUT/suite_$dev.log"
    echo "   in $((SECONDS - start)) s"
done
