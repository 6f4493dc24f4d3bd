#!/usr/bin/env bash
# run-ab.sh - two builds of fusec side by side on the GPU machine, in one
# call: the benchmark set run by each build in turn, twice, and a table of
# the two builds' times last.
#
#   here:   bash scripts/prepare-gpu-carry.sh
#           git archive --format=tar.gz -o .deps/old.tar.gz <old commit>
#   device run, carry [".deps"]:  bash bench/run-ab.sh
#
# Steps (AB_STEPS, default "buildold build bench"): buildold (from
# .deps/old.tar.gz into /tmp/ab-old), build (this tree; Release, no LLVM), ctest (the new
# build's tests, GPU ones included: AB_TESTS, a ctest -R regex), bench.
# The bench step runs, per build and round (old, new, old, new):
#   fusec X.ir --run --device=cuda --bench N   for the memory-bound kernels,
#     the GEMM epilogue, the MLP, attention, and the GPT-2 and Llama blocks at
#     B=1, T=64 and B=8, T=1024
#   dynamic_bench gpt2 gpt2_8x1024 mlp8 sweep  (graph replay, the T sweep)
# and the table takes each build's best of its two rounds.
# Logs under $OUT: build-*.log, ctest.log, ab.log (every line), ab.md.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
STEPS=${AB_STEPS:-"buildold build bench"}
on() { [[ " $STEPS " == *" $1 "* ]]; }
REPS=${AB_REPS:-50}
OLD=/tmp/ab-old
export FUSEC_CACHE=rw

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/env.txt"
build() { # SRC DIR LOG
    cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF \
        -DFUSEC_XXHASH_DIR="$ROOT/.deps/xxhash" >"$3" 2>&1 && ninja -C "$2" >>"$3" 2>&1
}
if on buildold; then
    rm -rf "$OLD" && mkdir -p "$OLD" && tar -xzf .deps/old.tar.gz -C "$OLD"
    build "$OLD" "$OLD/build" "$OUT/build-old.log" &
fi
if on build; then
    build "$ROOT" "$ROOT/build" "$OUT/build-new.log"
    echo "build new: rc=$?"
fi
if on buildold; then
    wait
    echo "build old: rc=$(grep -c FAILED "$OUT/build-old.log") failures"
fi
if on ctest; then
    if [[ -n ${AB_TESTS:-} ]]; then T=(-R "$AB_TESTS"); else T=(); fi
    (cd build && timeout "${AB_CTEST_TIMEOUT:-400}" ctest -j4 --output-on-failure "${T[@]}") >"$OUT/ctest.log" 2>&1
    echo "ctest: rc=$?"
    grep -E "tests passed|tests failed|\*\*\*Failed|Timeout|Not Run" "$OUT/ctest.log" | head -20
fi
# The CLI's binary moved between builds (build/fusec, build/tools/fusec).
cli() { for f in "$1/build/fusec" "$1/build/tools/fusec"; do [[ -x $f ]] && { echo "$f"; return; }; done; }
dynb() { for f in "$1/build/dynamic_bench" "$1/build/bench/dynamic_bench"; do [[ -x $f ]] && { echo "$f"; return; }; done; }

WL=(
    "pointwise bench/pointwise.ir"
    "softmax bench/softmax.ir"
    "add_layernorm bench/add_layernorm.ir"
    "rmsnorm bench/rmsnorm.ir"
    "gemm_gelu bench/gemm_gelu.ir"
    "gemm_bare bench/gemm_bare.ir"
    "mlp_gpt2 bench/mlp_gpt2.ir"
    "swiglu bench/swiglu.ir"
    "attention bench/attention.ir"
    "gpt2_b1t64 examples/gpt2_block_bf16.ir B=1,T=64"
    "gpt2_b8t1024 examples/gpt2_block_bf16.ir B=8,T=1024"
    "llama_b1t64 examples/llama_block.ir B=1,T=64"
    "llama_b8t1024 examples/llama_block.ir B=8,T=1024"
)
if on bench; then
    : >"$OUT/ab.log"
    for round in 1 2; do
        for tree in old new; do
            src=$ROOT; [[ $tree == old ]] && src=$OLD
            export FUSEC_CACHE_DIR=/tmp/ab-cache-$tree
            f=$(cli "$src")
            for w in "${WL[@]}"; do
                read -r name file bind <<<"$w"
                args=("$src/$file" --run --device=cuda --bench "$REPS")
                [[ -n ${bind:-} ]] && args+=(--bind "$bind")
                t=$(timeout 120 "$f" "${args[@]}" 2>>"$OUT/ab-stderr.log" | sed -n 's/^time: \([0-9.]*\) ms.*/\1/p')
                echo "AB $tree $round $name ${t:-fail}" | tee -a "$OUT/ab.log"
            done
            (cd "$src" && timeout 200 "$(dynb "$src")" gpt2 gpt2_8x1024 mlp8 sweep 2>&1) |
                sed "s/^RESULT/RESULT $tree $round/" >>"$OUT/ab.log"
        done
    done
    python3 - "$OUT/ab.log" >"$OUT/ab.md" <<'PY'
import re, sys
best = {}
def put(tree, name, v):
    k = best.setdefault(name, {})
    k[tree] = min(v, k.get(tree, v))
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("AB ") and f[4] != "fail":
        put(f[1], f[3], float(f[4]))
    elif line.startswith("RESULT "):
        tree, wl = f[1], f[4]
        m = re.search(r"per_call_ms=([0-9.]+)", line)
        if m and wl in ("gpt2", "gpt2_8x1024", "mlp8"):
            put(tree, "dyn_" + wl, float(m.group(1)))
        m = re.search(r"dynamic_all_T_latency median_call_ms=([0-9.]+)", line)
        if m:
            put(tree, "sweep_variant_median", float(m.group(1)))
print("| workload | old ms | new ms | new/old |\n|---|---|---|---|")
for name, k in best.items():
    o, n = k.get("old"), k.get("new")
    r = f"{n / o:.3f}" if o and n else "-"
    print(f"| {name} | {o if o else '-'} | {n if n else '-'} | {r} |")
PY
    cat "$OUT/ab.md"
fi
