#!/usr/bin/env bash
# conv_bench.sh - the convolutional-network benchmark on the GPU machine, in
# one device call: build fusec as bench/onnx-gpu-build.sh does (Release,
# CUDA, the ONNX importer from the carried .deps, no LLVM; cuDNN's headers
# from PyTorch's nvidia-cudnn package when the toolkit has none), put that
# package's libcudnn.so.9 on LD_LIBRARY_PATH (fusec dlopens it by its
# standard name: runtime/cuda/cudnn.h), run test_conv_library and
# tests/test_conv.sh on CUDA (each conv graph's cuDNN path against the
# reference interpreter; the f32 ResNet block under --precision=bf16, whose
# convolutions autocast sends to cuDNN, with --check), then
# bench/conv_bench.py: ResNet-50 at B=32, EfficientNet-B0 at B=32, ResNet-50
# at B=1 and MobileNetV3-large at B=32 (the later ones while the budget
# lasts), 224x224 bf16, against torch eager and torch.compile
# (channels_last), with fusec's cold compile time, a second process's
# (which must search nothing: no new algorithm records, no NVRTC compile),
# the plans' kernel and library counts and how many convolutions went to
# cuDNN, im2col or the depthwise kernels.
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/conv_bench.sh
#   ~150 s of build, then up to ~110 s of tests and ~160-220 s of benchmark
#   (a model starts only while the run is within its 120 s budget:
#   MobileNetV3-large usually not).
#
# Knobs: CONV_MODELS, CONV_MODES, CONV_REPS, CONV_BUDGET (conv_bench.py's
# --models, --modes, --reps, --budget), CONV_NUMERICS (test_conv.sh's),
# CONV_NOBUILD=1. Back in $OUT: run.log, build.log,
# test_conv.log, conv_bench.json, the plans (plan_*.txt).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u '+%F %T UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "   commit ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"

# cuDNN 9 from PyTorch's pip package: its lib/ for the loader, its include/
# for the build when the toolkit has no cudnn_graph.h.
CUDNN_DIR=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null)
if [[ -n $CUDNN_DIR && -d $CUDNN_DIR/lib ]]; then
    export LD_LIBRARY_PATH="$CUDNN_DIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "   cuDNN: $CUDNN_DIR ($(ls "$CUDNN_DIR"/lib/libcudnn.so.* 2>/dev/null | head -1 | xargs -r basename))"
else
    echo "   cuDNN: no nvidia.cudnn package; the loader's path decides"
fi

if [[ ${CONV_NOBUILD:-0} != 1 ]]; then
    cfg=(-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    [[ -d .deps/onnx ]] && cfg+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    [[ -d ${CUDA_HOME:-/usr/local/cuda} ]] && cfg+=("-DCUDAToolkit_ROOT=${CUDA_HOME:-/usr/local/cuda}")
    if [[ ! -f ${CUDA_HOME:-/usr/local/cuda}/include/cudnn_graph.h && -f $CUDNN_DIR/include/cudnn_graph.h ]]; then
        cfg+=("-DFUSEC_CUDNN_INCLUDE_DIR=$CUDNN_DIR/include")
    fi
    start=$SECONDS
    { cmake "${cfg[@]}" && timeout 300 cmake --build build -j "$(nproc)" --target fusec test_conv_library; } \
        >"$OUT/build.log" 2>&1 || { echo "!! build failed"; tail -20 "$OUT/build.log"; exit 1; }
    echo "   built in $((SECONDS - start)) s"
    grep -E "ONNX importer|cuDNN" "$OUT/build.log" | head -3 | sed 's/^/   | /'
fi

echo "== test_conv_library (lowering decisions, values on the reference, a CUDA compile's plan)"
FUSEC_SRC=. FUSEC_CACHE_DIR="$OUT/test-cache" timeout 60 build/tests/test_conv_library 2>&1 | tail -4
echo "== tests/test_conv.sh on CUDA, fast numerics (every conv graph against the reference; no CPU backend in this build)"
start=$SECONDS
FUSEC=build/fusec SRC=. FUSEC_CACHE_DIR="$OUT/test-cache" CONV_NUMERICS=${CONV_NUMERICS:-fast} timeout 100 \
    bash tests/test_conv.sh >"$OUT/test_conv.log" 2>&1
echo "   rc=$? in $((SECONDS - start)) s: $(grep -c '^ok:' "$OUT/test_conv.log") ok, $(grep -c '^FAIL' "$OUT/test_conv.log") failed"
grep -A12 '^FAIL' "$OUT/test_conv.log" | head -30
for f in resnet_block_bf16 conv_geometry resnet_block:bf16; do
    g=${f%%:*} prec=${f#*:}
    [[ $prec == "$f" ]] && prec=as-written
    popt=(); [[ $prec != as-written ]] && popt=(--precision="$prec")
    build/fusec "tests/conv/$g.ir" --emit=plan "${popt[@]}" >"$OUT/plan_${g}_$prec.txt" 2>&1
    echo "   $g ($prec): $(grep -c 'library conv_cl' "$OUT/plan_${g}_$prec.txt") cuDNN calls; $(grep '^convolutions:' "$OUT/plan_${g}_$prec.txt")"
done
echo "== the f32 ResNet block under --precision=bf16 through cuDNN, --check against the autocast graph on the reference"
FUSEC_CACHE_DIR="$OUT/test-cache" timeout 60 build/fusec tests/conv/resnet_block.ir --run --device=cuda \
    --precision=bf16 --check >"$OUT/check_resnet_block_bf16.txt" 2>&1
echo "   rc=$?: $(grep -iE 'check|error|max' "$OUT/check_resnet_block_bf16.txt" | tail -2 | tr '\n' ' ')"

echo "== conv_bench.py"
timeout 300 python3 bench/conv_bench.py --fusec build/fusec --out "$OUT" \
    --models "${CONV_MODELS:-resnet50:32,efficientnet_b0:32,resnet50:1,mobilenet_v3_large:32}" \
    --modes "${CONV_MODES:-eager,compile,reduce-overhead}" --reps "${CONV_REPS:-30}" --budget "${CONV_BUDGET:-120}"
echo "   rc=$?"
