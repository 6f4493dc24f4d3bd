#!/usr/bin/env bash
# run-whole.sh - the whole-model benchmark on the GPU machine, in one device
# call: build fusec (Release, no LLVM, the carried deps: xxHash, protobuf-c,
# cJSON and protoc-c's onnx.pb-c, so the ONNX importer and --weights are on),
# then bench/whole_model.py (GPT-2 124M and a Llama-shaped 1B model beside
# HF eager and torch.compile; its header says what it measures).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/run-whole.sh
#
# Knobs (environment): WHOLE_MODELS, WHOLE_MODES, WHOLE_ROWS, WHOLE_SIZES,
# WHOLE_REPS, WHOLE_GQA (whole_model.py's header), WHOLE_BUDGET_S (seconds
# for whole_model.py; default: what is left of WHOLE_TOTAL_S=530 after the
# build), WHOLE_NOBUILD=1 (keep the build as it is), WHOLE_BUILD_DIR (build),
# WHOLE_ARGS (more whole_model.py options, e.g. --tiny to try it without a GPU).
# Back in $OUT: run.log (console), build.log, whole.log (every command and
# its output), whole.json (every number), whole.md (the table).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source bench/bench_env.sh
TOTAL=${WHOLE_TOTAL_S:-530}
BUILD=${WHOLE_BUILD_DIR:-build}
commit=${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
echo "   commit: $commit; nproc $(nproc)"

for f in .deps/xxhash/xxhash.h .deps/onnx/pb/onnx/onnx.pb-c.c .deps/onnx/lib/libprotobuf-c.so .deps/onnx/lib/libcjson.so; do
    [[ -f $f ]] || echo "!! $f missing: run scripts/prepare-gpu-carry.sh here and carry [\".deps\"]"
done

if [[ ${WHOLE_NOBUILD:-0} != 1 ]]; then
    # A build/ from another tree or generator would make cmake refuse.
    if [[ -f $BUILD/CMakeCache.txt ]] &&
        ! { grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD/CMakeCache.txt" &&
            grep -qx "CMAKE_GENERATOR:INTERNAL=Ninja" "$BUILD/CMakeCache.txt"; }; then
        echo "   removing a stale $BUILD/"
        rm -rf "$BUILD"
    fi
    args=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF
        "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    if [[ -d .deps/onnx ]]; then
        args+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    fi
    cuda=${CUDA_HOME:-/usr/local/cuda}
    [[ -d $cuda ]] && args+=("-DCUDAToolkit_ROOT=$cuda")
    echo "== build [t=$((SECONDS - START))s]: cmake ${args[*]}"
    { cmake "${args[@]}" && timeout 300 cmake --build "$BUILD" -j "$(nproc)" --target fusec; } >"$OUT/build.log" 2>&1
    rc=$?
    echo "   rc=$rc in $((SECONDS - START))s"
    grep -E "ONNX importer|CPU backend|error" "$OUT/build.log" | head -8 | sed 's/^/   | /'
    ((rc == 0)) || { tail -20 "$OUT/build.log"; exit 1; }
fi
ldd "$BUILD/fusec" 2>&1 | grep -E "protobuf-c|cjson|not found" | sed 's/^/   ldd: /'

budget=${WHOLE_BUDGET_S:-$((TOTAL - (SECONDS - START)))}
echo "== whole_model.py [t=$((SECONDS - START))s, budget ${budget}s]"
read -r -a extra <<<"${WHOLE_ARGS:-}"
timeout --kill-after=10 $((budget + 60)) python3 bench/whole_model.py --fusec "$BUILD/fusec" \
    --budget "$budget" --out "$OUT" "${extra[@]}"
echo "   rc=$? in $((SECONDS - START))s"

# Files over 16 MiB do not come back from the device: keep the log's head and tail.
f=$OUT/whole.log
if [[ -f $f ]] && (($(stat -c %s "$f") > 12 * 1024 * 1024)); then
    { head -c 4M "$f"; printf '\n[... cut by run-whole.sh ...]\n'; tail -c 4M "$f"; } >"$f.cut" && mv "$f.cut" "$f"
fi
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit 0
