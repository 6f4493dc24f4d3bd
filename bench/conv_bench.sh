#!/usr/bin/env bash
# conv_bench.sh - the convolutional-network benchmark on the GPU machine, in
# one device call: build fusec (Release, CUDA, the ONNX importer from the
# carried .deps, no LLVM), run the conv tests on CUDA (tests/test_conv.sh),
# then bench/conv_bench.py (ResNet-50 at B=32 and B=1, MobileNetV3-Large and
# EfficientNet-B0 at B=32, 224x224 bf16, against torch eager and
# torch.compile with channels_last; its header says what it measures).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/conv_bench.sh
#
# Knobs: CONV_MODELS, CONV_MODES, CONV_REPS (conv_bench.py's --models,
# --modes, --reps), CONV_NOBUILD=1. Back in $OUT: run.log, build.log,
# conv_bench.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u '+%F %T UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "   commit ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
if [[ ${CONV_NOBUILD:-0} != 1 ]]; then
    cfg=(-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    [[ -d .deps/onnx ]] && cfg+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    [[ -d ${CUDA_HOME:-/usr/local/cuda} ]] && cfg+=("-DCUDAToolkit_ROOT=${CUDA_HOME:-/usr/local/cuda}")
    { cmake "${cfg[@]}" && timeout 300 cmake --build build -j "$(nproc)" --target fusec; } >"$OUT/build.log" 2>&1 ||
        { echo "!! build failed"; tail -20 "$OUT/build.log"; exit 1; }
    grep -E "ONNX importer" "$OUT/build.log" | head -2
fi
echo "== tests/test_conv.sh (CPU backend absent in this build: CUDA only)"
FUSEC=build/fusec SRC=. timeout 120 bash tests/test_conv.sh 2>&1 | grep -v "on cpu" | tail -20
echo "== conv_bench.py"
timeout 480 python3 bench/conv_bench.py --fusec build/fusec --out "$OUT" \
    --models "${CONV_MODELS:-resnet50:32,resnet50:1,mobilenet_v3_large:32,efficientnet_b0:32}" \
    --modes "${CONV_MODES:-eager,compile,reduce-overhead}" --reps "${CONV_REPS:-30}"
echo "   rc=$?"
