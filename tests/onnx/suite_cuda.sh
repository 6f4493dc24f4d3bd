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
for dev in cuda cpu; do
    echo "== $dev"
    timeout 500 "$suite" --device=$dev --data "$data" --write-expected "$OUT/expected_failures_$dev.txt" 2>&1 | tee "$OUT/suite_$dev.log"
    echo "   rc=${PIPESTATUS[0]} in $SECONDS s"
done
