#!/usr/bin/env bash
# run-speed.sh - GPT-2's whole-model speed with the weights computed at
# load (docs/GEMM.md, "Weights computed at load time"), on the GPU machine
# in one device call: build fusec and the tests that cover load-time
# kernels, run those tests on the GPU, the LM head through fusec (written
# in place over interleaved rows, and padded with the compaction copy) and
# in PyTorch (bench/lmhead_interleave.py), then bench/whole_model.py for GPT-2 at
# B=1,T=128 and B=8,T=1024 with bf16 weights and from f32 weights with
# --precision=bf16, beside HF eager and torch.compile (default mode).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/run-speed.sh
#
# Knobs (environment): SPEED_STEPS (default "build tests lmhead attn whole";
# attn: head dims 80 and 96 as they run and padded to 128),
# SPEED_TESTS (the ctest -R regex), SPEED_SIZES (default
# "gpt2:1x128,gpt2:8x1024"), SPEED_REPS (20), SPEED_TOTAL_S (560: the
# whole-model step gets what is left). Back in $OUT: run.log, build.log,
# ctest.log, lmhead.log, attn_*.ir, plan.txt (the f32 GPT-2 block's plan under
# --precision=bf16) and run-whole.sh's files (whole.json, whole.md, ...).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
START=$SECONDS
STEPS=" ${SPEED_STEPS:-build tests lmhead attn whole} "
TOTAL=${SPEED_TOTAL_S:-560}
exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!
echo "== env: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "   commit: ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}; steps:$STEPS"

if [[ $STEPS == *" build "* ]]; then
    args=(-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    [[ -d .deps/onnx ]] && args+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    [[ -d ${CUDA_HOME:-/usr/local/cuda} ]] && args+=("-DCUDAToolkit_ROOT=${CUDA_HOME:-/usr/local/cuda}")
    echo "== build [t=$((SECONDS - START))s]"
    targets=(fusec test_loadtime test_autocast test_pad test_specialize test_program test_gemm)
    { cmake "${args[@]}" && timeout 300 cmake --build build -j "$(nproc)" --target "${targets[@]}"; } >"$OUT/build.log" 2>&1
    rc=$?
    echo "   rc=$rc in $((SECONDS - START))s"
    ((rc == 0)) || { tail -20 "$OUT/build.log"; exit 1; }
fi

if [[ $STEPS == *" tests "* ]]; then
    echo "== GPU tests [t=$((SECONDS - START))s]"
    (cd build && timeout 240 ctest -R "${SPEED_TESTS:-test_loadtime|test_autocast|test_pad|test_specialize|test_program|test_gemm$}" \
        --output-on-failure) >"$OUT/ctest.log" 2>&1
    echo "   rc=$?"
    grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest.log" | sed 's/^/   | /'
    grep -E "^cuda: " "$OUT/ctest.log" | sed 's/^/   | /'
fi

if [[ $STEPS == *" lmhead "* ]]; then
    echo "== the f32 GPT-2 block's plan under --precision=bf16 [t=$((SECONDS - START))s]"
    build/fusec examples/gpt2_block.ir --bind B=8,T=1024 --emit=plan --precision=bf16 >"$OUT/plan.txt" 2>&1
    grep -E "at weight load|^total" "$OUT/plan.txt" | sed 's/^/   | /'
    # fusec's LM head as the product runs it (N = 50257 at M = 8192: the
    # result written in place over interleaved rows) and as before (the
    # weight given padded to 50264 rows, the result sliced: the compaction
    # copy), both with --bench.
    printf 'graph f(%%x: bf16[8192, 768], %%w: bf16[50257, 768]) {\n  %%wt = permute(%%w, perm=[1, 0])\n  %%y = matmul(%%x, %%wt)\n  return %%y\n}\n' >"$OUT/lmhead.ir"
    printf 'graph f(%%x: bf16[8192, 768], %%w: bf16[50264, 768]) {\n  %%wt = permute(%%w, perm=[1, 0])\n  %%y0 = matmul(%%x, %%wt)\n  %%y = slice(%%y0, axis=1, start=0, end=50257)\n  return %%y\n}\n' >"$OUT/lmhead_padded.ir"
    for f in lmhead lmhead_padded; do
        echo "   fusec $f: $(timeout 90 build/fusec "$OUT/$f.ir" --run --device=cuda --bench 50 2>&1 | grep -iE "median" | head -1)"
        build/fusec "$OUT/$f.ir" --emit=plan 2>&1 | grep -E "^launch|^total" | sed 's/^/      /'
    done
    echo "== bench/lmhead_interleave.py [t=$((SECONDS - START))s]"
    for n in 50257 32001; do
        timeout 120 python3 bench/lmhead_interleave.py --m 8192 --n $n --k 768 2>&1 | tee -a "$OUT/lmhead.log" | sed 's/^/   | /'
    done
fi

if [[ $STEPS == *" attn "* ]]; then
    # Head dims 80 and 96 run the mma flash kernel, 64 and 128 the wgmma
    # one: is padding the head to 128 (zeros in q, k, v; the scale kept;
    # the result sliced) faster? "pad" times the padded graph with its
    # concat and slice copies (in a model they join the producing and
    # consuming kernels), "d128" the wgmma kernel alone at 128.
    echo "== attention head dims [t=$((SECONDS - START))s]"
    for D in 80 96; do
        P=$((128 - D))
        sh="[4, 16, 1024, $D]"
        printf 'graph f(%%q: bf16%s, %%k: bf16%s, %%v: bf16%s) {\n  %%o = attention(%%q, %%k, %%v, causal=true)\n  return %%o\n}\n' \
            "$sh" "$sh" "$sh" >"$OUT/attn_d$D.ir"
        printf 'graph f(%%q: bf16%s, %%k: bf16%s, %%v: bf16%s) {\n  %%z = full(shape=[4, 16, 1024, %d], value=0.0, dtype=bf16)\n  %%qp = concat(%%q, %%z, axis=3)\n  %%kp = concat(%%k, %%z, axis=3)\n  %%vp = concat(%%v, %%z, axis=3)\n  %%op = attention(%%qp, %%kp, %%vp, causal=true, scale=%s)\n  %%o = slice(%%op, axis=3, start=0, end=%d)\n  return %%o\n}\n' \
            "$sh" "$sh" "$sh" $P "$(python3 -c "print(1/$D**0.5)")" $D >"$OUT/attn_d${D}_pad.ir"
    done
    sh="[4, 16, 1024, 128]"
    printf 'graph f(%%q: bf16%s, %%k: bf16%s, %%v: bf16%s) {\n  %%o = attention(%%q, %%k, %%v, causal=true)\n  return %%o\n}\n' \
        "$sh" "$sh" "$sh" >"$OUT/attn_d128.ir"
    for f in attn_d80 attn_d80_pad attn_d96 attn_d96_pad attn_d128; do
        echo "   $f: $(timeout 60 build/fusec "$OUT/$f.ir" --run --device=cuda --bench 50 2>&1 | grep -iE "median|ms" | head -1)"
        build/fusec "$OUT/$f.ir" --emit=plan 2>&1 | grep attention | sed 's/^/      /'
    done
fi

if [[ $STEPS == *" whole "* ]]; then
    left=$((TOTAL - (SECONDS - START)))
    echo "== run-whole.sh: GPT-2, bf16 and --precision=bf16, torch.compile default [t=$((SECONDS - START))s, ${left}s left]"
    WHOLE_NOBUILD=1 WHOLE_MODELS=gpt2 WHOLE_SIZES=${SPEED_SIZES:-gpt2:1x128,gpt2:8x1024} WHOLE_ROWS=bf16,precision \
        WHOLE_MODES=default WHOLE_REPS=${SPEED_REPS:-20} WHOLE_BUDGET_S=$((left > 60 ? left - 30 : 30)) \
        OUT="$OUT" bash bench/run-whole.sh >/dev/null 2>&1
    echo "   rc=$?"
    [[ -f $OUT/whole.md ]] && sed 's/^/   | /' "$OUT/whole.md"
fi
echo "== done in $((SECONDS - START))s"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit 0
