#!/usr/bin/env bash
# run-miss.sh - why a miss of a dynamic program with background
# specialization costs more host time than a new shape on the variant alone
# (docs/DYNAMIC.md, "Session 8"). One device call, carry [".deps"]; logs
# under $OUT:
#   teardown.log  bench/micro/teardown_bench.cu: a caller's call (small copy,
#                 event, graph replay) while another thread repeats one CUDA
#                 operation (module load/unload, malloc/free, synchronize, ...)
#   miss-*.log    dynamic_bench sweep's part 2 alone (SWEEP_SAMPLE_ONLY=1) in
#                 each mode of MISS_MODES (default "default nofree delay"):
#                 default; nofree (SWEEP_MAX_SPECS=32: nothing evicted, so
#                 nothing freed); delay (FUSEC_SPEC_DELAY_US=20000: the
#                 background thread starts its work 20 ms after the miss)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export FUSEC_SRC=$PWD FUSEC_CACHE_DIR=/tmp/fusec-issues-cache
if [[ -z ${MISS_NOBUILD:-} ]]; then
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF \
        -DFUSEC_XXHASH_DIR="$PWD/.deps/xxhash" >"$OUT/build.log" 2>&1 && ninja -C build >>"$OUT/build.log" 2>&1
    echo "build: rc=$?"
fi
if [[ -z ${MISS_NOTEARDOWN:-} ]]; then
    nvcc -O2 -arch=sm_90 bench/micro/teardown_bench.cu -lcuda -lcublasLt -o build/teardown_bench >"$OUT/teardown.log" 2>&1 &&
        nvcc -arch=sm_90 -cubin bench/micro/teardown_bench.cu -o build/teardown_bench.cubin >>"$OUT/teardown.log" 2>&1 &&
        timeout 120 build/teardown_bench build/teardown_bench.cubin >>"$OUT/teardown.log" 2>&1
    echo "teardown_bench: rc=$?"
fi
for mode in ${MISS_MODES:-default nofree delay}; do
    case $mode in
    default) envs=() ;;
    nofree) envs=(SWEEP_MAX_SPECS=32) ;;
    delay) envs=(FUSEC_SPEC_DELAY_US=20000) ;;
    *) envs=("$mode") ;; # VAR=value as it is
    esac
    env "${envs[@]}" SWEEP_SAMPLE_ONLY=1 timeout 150 build/dynamic_bench sweep >"$OUT/miss-$mode.log" 2>&1
    echo "sweep sample ($mode): rc=$?"
done
echo "=== teardown_bench (us)"
tail -12 "$OUT/teardown.log"
for mode in ${MISS_MODES:-default nofree delay}; do
    echo "=== misses: $mode (ms; guard/instance/run in us)"
    grep -h "sweep T=" "$OUT/miss-$mode.log" |
        sed -E 's/RESULT fusec sweep //; s/ second_call_ms=[^ ]*//; s/ first_hit_ms=[^ ]*//; s/ second_hit_ms=[^ ]*//; s/ specialized_call_ms=[^ ]*//; s/ specialized_ms=[^ ]*//; s/ static_ms=[^ ]*//; s/_ms=/=/g; s/_us=/=/g; s/miss_//g' | cut -c1-200
    grep -h "sweep sample" "$OUT/miss-$mode.log" | cut -c1-200
done
