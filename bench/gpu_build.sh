# gpu_build.sh - sourced by the GPU bench scripts after bench/bench_env.sh:
# gpu_build DIR TARGET... configures DIR as the GPU build (Release, no
# LLVM, the carried .deps, as bench/run-whole.sh does), starting afresh
# where DIR was configured from another checkout, and builds the targets
# into $OUT/build.log; prints the time and, on failure, the log's tail.
# Sourcing it prints the commit and the core count.
echo "   commit: ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}; nproc $(nproc)"
gpu_build() {
    local dir=$1
    shift
    if [[ -f $dir/CMakeCache.txt ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$dir/CMakeCache.txt"; then
        rm -rf "$dir"
    fi
    local args=(-S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF)
    [[ -d .deps/xxhash ]] && args+=("-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    [[ -d .deps/onnx ]] && args+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    local cuda=${CUDA_HOME:-/usr/local/cuda}
    [[ -d $cuda ]] && args+=("-DCUDAToolkit_ROOT=$cuda")
    echo "== build: cmake ${args[*]}"
    { cmake "${args[@]}" && timeout 300 cmake --build "$dir" -j "$(nproc)" --target "$@"; } >"$OUT/build.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $((SECONDS - START))s"
    ((rc == 0)) || tail -30 "$OUT/build.log"
    return $rc
}
