#!/usr/bin/env bash
# decode_bench.sh - the decode benchmark on the GPU machine, in one device
# call: build fusec and examples/generate.c (Release, no LLVM, as
# bench/run-whole.sh configures the GPU build), run test_decode (the tiny
# models on CUDA against the reference), then bench/decode_bench.py (GPT-2
# 124M with a cache of 1024 and a Llama-style 1B with a cache of 2048, at
# B=1, 8 and 32, beside HF generate with a static cache, eager and
# torch.compile reduce-overhead; a 512-token prefill beside the model's
# forward; the teacher-forced argmax agreement with the f32 model; its
# header says what it measures). About 150 s of build, test_skinny (the
# GEMVs the decode steps run, against the reference; up to 150 s, about 30
# expected), each model's decode plan and a `fusec --profile` of one step
# (about 20 s a model), then the python part keeps to DECODE_BUDGET seconds
# (later phases are skipped past it).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/decode_bench.sh
#
# Knobs (environment): DECODE_MODELS (gpt2,llama), DECODE_TOKENS (64),
# DECODE_BENCH (300), DECODE_BATCHES (1,8,32), DECODE_BUDGET (200),
# DECODE_ARGS (more decode_bench.py options, e.g. --no-compile,
# --prefill-len 0), DECODE_NOBUILD=1, DECODE_BUILD_DIR (build).
# Back in $OUT: run.log, build.log, test_decode.log, test_decode_plan.log,
# test_skinny.log (the skinny GEMMs and GEMVs on this GPU),
# decode_prof/ (per model: the .ir, its decode plan, a fusec --profile
# table of one step at the cache's last position), decode.json, decode.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source bench/bench_env.sh
source bench/onnx-gpu-build.sh
BUILD=${DECODE_BUILD_DIR:-build}
echo "   commit: ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}; nproc $(nproc)"
if [[ ${DECODE_NOBUILD:-0} != 1 ]]; then
    ONNX_BUILD_DIR=$BUILD onnx_gpu_build fusec example_generate test_decode test_decode_plan test_skinny || exit 1
fi
echo "== test_decode (CUDA against the reference) [t=$((SECONDS - START))s]"
FUSEC_SRC=$ROOT timeout 120 "$BUILD/tests/test_decode" >"$OUT/test_decode.log" 2>&1
echo "   rc=$?"; tail -8 "$OUT/test_decode.log"
FUSEC_SRC=$ROOT FUSEC="$(cd "$BUILD" && pwd)/fusec" timeout 60 "$BUILD/tests/test_decode_plan" >"$OUT/test_decode_plan.log" 2>&1
echo "   test_decode_plan rc=$?"; tail -3 "$OUT/test_decode_plan.log"
# The skinny GEMMs and the GEMVs (the decode steps' projections and LM
# heads) against the reference on this GPU.
FUSEC_SRC=$ROOT timeout 150 "$BUILD/tests/test_skinny" >"$OUT/test_skinny.log" 2>&1
echo "   test_skinny rc=$?"; tail -3 "$OUT/test_skinny.log"
# A bf16 Llama-style decode step on CUDA against the reference (GEMVs of
# 1, 8 and 6 rows, the cache updates inside the attention, a 3-token
# prefill): exit 4 beyond the dtypes' rounding.
for bind in B=1,T=1 B=8,T=1 B=2,T=3; do
    log=$OUT/check_llama_bf16_${bind//[=,]/_}.log
    timeout 60 "$BUILD/fusec" tests/decode/llama_bf16.ir --bind "$bind" --run --device cuda --check >"$log" 2>&1
    echo "   llama_bf16.ir $bind --check rc=$? $(grep '^check' "$log" | head -1)"
done
# The decode step's plan and profile, per model: the launch count of its
# plan (fusec --emit=plan at B=1, T=1) and a `fusec --profile` table of one
# step with the position at the cache's last row (random weights; %pos,
# parameter 1, from a .npy). The models as decode_bench.py writes them
# (bench/models/decode_irgen.py, HF's GPT-2 124M and Llama-1B shapes).
echo "== decode plans and profiles [t=$((SECONDS - START))s]"
PROF=$OUT/decode_prof
mkdir -p "$PROF"
FUSEC_BIN=$BUILD/fusec
declare -A IRGEN=([gpt2]="--arch gpt2 --layers 12 --embd 768 --heads 12 --vocab 50257 --ctx 1024"
                  [llama]="--arch llama --layers 16 --embd 2048 --heads 32 --kv-heads 8 --mlp 8192 --vocab 128256 --ctx 2048 --tied")
declare -A CTXLEN=([gpt2]=1024 [llama]=2048)
IFS=, read -r -a prof_models <<<"${DECODE_MODELS:-gpt2,llama}"
for m in "${prof_models[@]}"; do
    [[ -n ${IRGEN[$m]:-} ]] || continue
    read -r -a gen <<<"${IRGEN[$m]}"
    python3 bench/models/decode_irgen.py "${gen[@]}" --dtype bf16 >"$PROF/$m.ir" || continue
    python3 -c "import numpy as np, sys; np.save(sys.argv[1], np.array(int(sys.argv[2]) - 1, dtype=np.int64))" \
        "$PROF/${m}_pos.npy" "${CTXLEN[$m]}" || continue
    timeout 120 "$FUSEC_BIN" "$PROF/$m.ir" --bind B=1,T=1 --emit=plan >"$PROF/${m}_plan.txt" 2>&1
    echo "   $m decode plan (B=1): $(grep '^total:' "$PROF/${m}_plan.txt" || tail -1 "$PROF/${m}_plan.txt")"
    echo "   $m per layer: $(grep -c 'fc_cache_attention' "$PROF/${m}_plan.txt") attention launches," \
        "$(grep -c 'fc_update_slice' "$PROF/${m}_plan.txt") update_slice launches," \
        "$(grep -c 'library gemm' "$PROF/${m}_plan.txt") library GEMMs"
    timeout 150 "$FUSEC_BIN" "$PROF/$m.ir" --bind B=1,T=1 --device cuda --inputs ",$PROF/${m}_pos.npy" \
        --profile --profile-runs 20 >"$PROF/${m}_profile.txt" 2>&1
    echo "   $m profile rc=$? ($PROF/${m}_profile.txt):"
    grep -iE 'device|plain run|total' "$PROF/${m}_profile.txt" | head -6 | sed 's/^/      /'
done
echo "== decode_bench.py [t=$((SECONDS - START))s]"
read -r -a extra <<<"${DECODE_ARGS:-}"
timeout --kill-after=10 $((560 - (SECONDS - START))) python3 bench/decode_bench.py --generate "$BUILD/example_generate" \
    --models "${DECODE_MODELS:-gpt2,llama}" --tokens "${DECODE_TOKENS:-64}" --bench "${DECODE_BENCH:-300}" \
    --batches "${DECODE_BATCHES:-1,8,32}" --budget "${DECODE_BUDGET:-200}" --out "$OUT" "${extra[@]}"
echo "   rc=$? in $((SECONDS - START))s"
