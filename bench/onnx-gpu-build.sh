#!/usr/bin/env bash
# onnx-gpu-build.sh - sourced by the GPU bench scripts (bench/onnx_real.sh,
# bench/decode_bench.sh, tests/onnx/suite_cuda.sh, ...):
# onnx_gpu_build TARGET... configures and builds fusec on the GPU machine as
# bench/run-whole.sh does (Release, no LLVM, the carried .deps/: xxHash,
# protobuf-c, cJSON and protoc-c's onnx.pb-c, so the ONNX importer is on) and
# builds the targets. The log goes to $OUT/build.log; returns cmake's status.
# ONNX_NOBUILD=1 keeps the build as it is; ONNX_BUILD_DIR names it (build).
onnx_gpu_build() {
    local build=${ONNX_BUILD_DIR:-build} root=$PWD start=$SECONDS
    for f in .deps/xxhash/xxhash.h .deps/onnx/pb/onnx/onnx.pb-c.c .deps/onnx/lib/libprotobuf-c.so; do
        [[ -f $f ]] || echo "!! $f missing: run scripts/prepare-gpu-carry.sh here and carry [\".deps\"]"
    done
    [[ ${ONNX_NOBUILD:-0} == 1 ]] && return 0
    # A build/ from another tree or generator would make cmake refuse.
    if [[ -f $build/CMakeCache.txt ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$build/CMakeCache.txt"; then
        rm -rf "$build"
    fi
    local args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF
        "-DFUSEC_XXHASH_DIR=$root/.deps/xxhash" "-DCMAKE_PREFIX_PATH=$root/.deps/onnx"
        "-DFUSEC_ONNX_PB_DIR=$root/.deps/onnx/pb")
    [[ -d ${CUDA_HOME:-/usr/local/cuda} ]] && args+=("-DCUDAToolkit_ROOT=${CUDA_HOME:-/usr/local/cuda}")
    echo "== build: cmake ${args[*]}; targets $*"
    { cmake "${args[@]}" && timeout 300 cmake --build "$build" -j "$(nproc)" --target "$@"; } >"$OUT/build.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $((SECONDS - start)) s"
    grep -E "ONNX importer|error" "$OUT/build.log" | head -8 | sed 's/^/   | /'
    ((rc == 0)) || tail -20 "$OUT/build.log"
    return $rc
}
