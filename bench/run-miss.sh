#!/usr/bin/env bash
# run-miss.sh - why a miss of a dynamic program with background
# specialization costs more host time than a new shape on the variant alone
# (docs/DYNAMIC.md, "Session 8"). One device call, carry [".deps"]; logs
# under $OUT:
#   teardown.log  bench/micro/teardown_bench.cu: a caller's call (small copy,
#                 event, graph replay) while another thread repeats one CUDA
#                 operation (module load/unload, malloc/free, synchronize, ...)
#   ctest.log     the tests (MISS_TESTS: a ctest -R regex; MISS_NOTEST=1: none)
#   miss-*.log    dynamic_bench sweep's part 2 alone (SWEEP_SAMPLE_ONLY=1) in
#                 each mode of MISS_MODES (default "default off"): cold (an empty kernel cache: every specialization
#                 runs NVRTC while the variant serves the calls); default (the
#                 cache warm); off (SWEEP_SPECIALIZE=off: the variant alone, each T's
#                 miss then 20 calls: what the queueing costs); nofree (SWEEP_MAX_SPECS=32: nothing
#                 evicted, so nothing freed); reserve (SWEEP_RESERVE=1: the
#                 largest shape declared with fc_program_reserve first);
#                 eager (CUDA_MODULE_LOADING=EAGER: no lazy kernel
#                 loading in the driver)
#   MISS_TRACE=1  also log the background thread's steps (FUSEC_LOG=spec)
#                 and the slow calls (SWEEP_SLOW_CALLS=1), and say which
#                 step each slow call overlapped (bench/slow_calls.py)
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
if [[ -z ${MISS_NOTEST:-} ]]; then
    if [[ -n ${MISS_TESTS:-} ]]; then TESTS=(-R "$MISS_TESTS"); else TESTS=(); fi
    (cd build && timeout 300 ctest -j3 --output-on-failure "${TESTS[@]}") >"$OUT/ctest.log" 2>&1
    echo "ctest: rc=$?"
fi
if [[ -z ${MISS_NOTEARDOWN:-} ]]; then
    nvcc -O2 -arch=sm_90 bench/micro/teardown_bench.cu -lcuda -lcublasLt -o build/teardown_bench >"$OUT/teardown.log" 2>&1 &&
        nvcc -arch=sm_90 -cubin bench/micro/teardown_bench.cu -o build/teardown_bench.cubin >>"$OUT/teardown.log" 2>&1 &&
        timeout 120 build/teardown_bench build/teardown_bench.cubin >>"$OUT/teardown.log" 2>&1
    echo "teardown_bench: rc=$?"
fi
MODES=${MISS_MODES:-default off}
for mode in $MODES; do
    case $mode in
    cold) envs=(FUSEC_CACHE_DIR="$(mktemp -d)") ;;
    default) envs=() ;;
    off) envs=(SWEEP_SPECIALIZE=off) ;;
    nofree) envs=(SWEEP_MAX_SPECS=32) ;;
    reserve) envs=(SWEEP_RESERVE=1) ;;
    eager) envs=(CUDA_MODULE_LOADING=EAGER) ;;
    *) envs=("$mode") ;; # VAR=value as it is
    esac
    log="$OUT/miss-$mode.log"
    [[ -e $log ]] && log="$OUT/miss-$mode-2.log" # a mode named twice: two rounds
    if [[ -n ${MISS_TRACE:-} ]]; then envs+=(FUSEC_LOG=spec SWEEP_SLOW_CALLS=1); fi
    env "${envs[@]}" SWEEP_SAMPLE_ONLY=1 timeout 150 build/dynamic_bench sweep >"$log" 2>&1
    echo "sweep sample ($mode): rc=$?"
done
echo "=== tests"
grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$OUT/ctest.log" 2>/dev/null | head -20
echo "=== teardown_bench (us)"
tail -14 "$OUT/teardown.log"
for log in "$OUT"/miss-*.log; do
    echo "=== $(basename "$log" .log): T, miss ms, miss host us, growth us | variant calls meanwhile: median, p99, worst ms"
    grep -h "sweep T=" "$log" | sed -E 's/.*T=([0-9]+) miss_ms=([^ ]*) miss_host_ms=([^ ]*) .*miss_grow_us=([^ ]*) .*dynamic_call_ms=([^ ]*) dynamic_call_p99_ms=([^ ]*) worst_dynamic_call_ms=([^ ]*) .*/\1 \2 \3 \4 | \5 \6 \7/' |
        awk '{printf "%s %s %.1f %s | %s %s %s\n", $1, $2, $3 * 1000, $4, $6, $7, $8}' | paste -sd ';' | fold -w 236
    grep -h "sweep sample" "$log" | sed 's/RESULT fusec sweep sample //' | cut -c1-240
done
if [[ -n ${MISS_TRACE:-} ]]; then
    echo "=== slow calls against the background thread's steps"
    python3 bench/slow_calls.py "$OUT"/miss-*.log
fi
