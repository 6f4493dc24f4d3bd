#!/usr/bin/env bash
# run-warm.sh - the warm start and -o of the whole GPT-2 124M on the GPU
# machine, in one device call: build fusec and bench/warm_start.c (Release,
# no LLVM, the carried xxHash, protobuf-c and cJSON), write the model as one
# .ir graph (bench/models/irgen.py, bf16) and, for B=1,T=128 and B=8,T=1024:
#   - warm_start: in one process with a CUDA context, a cold compile, then
#     compiles served from the disk and from memory, -o (with the NVRTC
#     compiles it ran), the module loads and the first run, each timed;
#   - the CLI in new processes on that cache: `--emit=plan --time` (what
#     whole_model.py reports as "warm"), `-o --time`, and the file's first
#     run (`model.cubin --run --time`, token ids 0, random weights);
#   - first, the AOT tests on the GPU (WARM_TESTS=0 skips them).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:   bash bench/run-warm.sh
#
# Back in $OUT: run.log (everything), build.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
BUILD=${WARM_BUILD_DIR:-build}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u '+%F %T UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); commit $(git rev-parse --short HEAD 2>/dev/null)"

if [[ -f $BUILD/CMakeCache.txt ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD/CMakeCache.txt"; then
    rm -rf "$BUILD"
fi
args=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
[[ -d .deps/onnx ]] && args+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
{ cmake "${args[@]}" && timeout 300 cmake --build "$BUILD" -j "$(nproc)" --target fusec warm_start; } >"$OUT/build.log" 2>&1 ||
    { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
FUSEC=$BUILD/fusec

# The AOT tests on the GPU (the loaded files run, bit for bit as the JIT
# programs; a dynamic file at two shapes; the CLI's file runs). WARM_TESTS=0 skips.
if [[ ${WARM_TESTS:-1} == 1 ]]; then
    echo "== tests: test_aot test_kernel_share test_cli"
    timeout 200 cmake --build "$BUILD" -j "$(nproc)" --target test_aot test_kernel_share >>"$OUT/build.log" 2>&1 &&
        timeout 240 ctest --test-dir "$BUILD" -R '^(test_aot|test_kernel_share|test_cli)$' --output-on-failure 2>&1 |
        tail -25
fi

work=$(mktemp -d)
python3 - "$work/gpt2.ir" <<'PY'
import sys
sys.path.insert(0, "bench/models")
import irgen
cfg = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, layer_norm_epsilon=1e-5)
open(sys.argv[1], "w").write(irgen.gpt2_ir(cfg, "bf16")[0])
PY

for size in 1x128 8x1024; do
    B=${size%x*} T=${size#*x}
    bind="B=$B,T=$T"
    cache=$work/cache-$size
    echo
    echo "== GPT-2 124M bf16 $bind: warm_start (one process, a context first)"
    "$BUILD/warm_start" "$work/gpt2.ir" "$bind" "$cache"
    echo "== the CLI, new processes, the same cache"
    for i in 1 2 3; do
        /usr/bin/time -f "   wall %e s" env FUSEC_CACHE_DIR="$cache" "$FUSEC" "$work/gpt2.ir" --bind "$bind" --emit=plan --time \
            2>&1 >/dev/null | grep -E '^time|other|cache |wall'
    done
    env FUSEC_CACHE_DIR="$cache" "$FUSEC" --cache-info | grep -E '^compiles'
    /usr/bin/time -f "   wall %e s" env FUSEC_CACHE_DIR="$cache" "$FUSEC" "$work/gpt2.ir" --bind "$bind" -o "$work/gpt2-$size.cubin" --time 2>&1 |
        grep -E '^time|wall'
    env FUSEC_CACHE_DIR="$cache" "$FUSEC" --cache-info | grep -E '^compiles' | sed 's/^/   after -o: /'
    ls -l "$work/gpt2-$size.cubin" | awk '{print "   file: " $5 " bytes"}'
    python3 -c 'import numpy as np, sys; np.save(sys.argv[1], np.zeros((int(sys.argv[2]), int(sys.argv[3])), np.int64))' \
        "$work/ids-$size.npy" "$B" "$T" && {
        echo "== the file's first run (new process): load, device, module loads, first output"
        /usr/bin/time -f "   wall %e s" "$FUSEC" "$work/gpt2-$size.cubin" --run --inputs "$work/ids-$size.npy" --time \
            --save-outputs "$work/out-$size" 2>&1 | grep -E '^time|device|load|wall'
    }
done
rm -rf "$work"
