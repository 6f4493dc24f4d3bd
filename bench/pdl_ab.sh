#!/usr/bin/env bash
# pdl_ab.sh - the A/B of programmatic dependent launches on the GPU machine,
# in one device call (docs/RUNTIME-GRAPHS.md, "Programmatic dependent
# launches"). fusec is built (Release, no LLVM, in build-pdl/) three ways
# with the benchmark-only CMake option FUSEC_BENCH_PDL, which only
# codegen/cuda/emit.c and runtime/cuda/cuda_driver.c read (so a switch
# rebuilds those two and relinks), and each way's fusec and
# example_generate (static) are copied to build-pdl/bin-LEVEL/, each run
# with its own kernel and program cache:
#   all   the product: every generated kernel waits first and is launched as
#         a programmatic dependent, in graphs and on the stream;
#   old   the kernels that were programmatic dependents before (GEMVs, skinny
#         GEMMs, decode and frame kernels), in graphs only;
#   none  no programmatic edge or launch at all.
# Then: test_pdl (the 200-kernel chain exact, graphs on and off) and
# test_decode (the tiny decode models on CUDA against the reference) with
# the "all" build, and in PDL_AB_ROUNDS rounds, the variants interleaved in
# each round: examples/generate.c's decode steps at the cache's last
# position (--bench: steps back to back, the per-token time) for GPT-2 124M
# (cache 1024) and a Llama-style 1B (cache 2048) at B=1, random bf16
# weights, as bench/decode_bench.sh writes them; and the GPT-2 block
# (examples/gpt2_block_bf16.ir) at B=1, T=128 (fusec --bench: the median of
# replays timed one by one). Prints a table of the medians over the rounds,
# and each variant's programmatic edge count ($FUSEC_LOG=graphs).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/pdl_ab.sh
#
# Knobs: PDL_AB_LEVELS (all,old,none), PDL_AB_ROUNDS (3), PDL_AB_STEPS (300),
# PDL_AB_MODELS (gpt2,llama,block), PDL_AB_NOBUILD=1 (the binaries of an
# earlier call in the same machine), PDL_AB_BUILD_DIR (build-pdl). Back in $OUT: run.log, build-*.log,
# test_pdl.log, test_decode.log, pdl_ab.tsv (level, case, round, ms).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
source bench/bench_env.sh
IFS=, read -r -a levels <<<"${PDL_AB_LEVELS:-all,old,none}"
IFS=, read -r -a models <<<"${PDL_AB_MODELS:-gpt2,llama,block}"
ROUNDS=${PDL_AB_ROUNDS:-3}
STEPS=${PDL_AB_STEPS:-300}
echo "   commit: ${BENCH_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}; nproc $(nproc)"

# build LEVEL: build-pdl/ configured for LEVEL, its binaries copied to
# build-pdl/bin-LEVEL/ (the tests with the first level only).
B=${PDL_AB_BUILD_DIR:-build-pdl}
build() {
    local level=$1 start=$SECONDS
    [[ ${PDL_AB_NOBUILD:-0} == 1 ]] && { [[ -x $B/bin-$level/fusec ]]; return; }
    local args=(-S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF
        "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash" "-DFUSEC_BENCH_PDL=$level")
    [[ -d ${CUDA_HOME:-/usr/local/cuda} ]] && args+=("-DCUDAToolkit_ROOT=${CUDA_HOME:-/usr/local/cuda}")
    local targets=(fusec example_generate)
    [[ $level == all ]] && targets+=(test_pdl test_decode)
    { cmake "${args[@]}" && timeout 300 cmake --build "$B" -j "$(nproc)" --target "${targets[@]}" &&
        mkdir -p "$B/bin-$level" && cp "$B/fusec" "$B/example_generate" "$B/bin-$level/"; } >"$OUT/build-$level.log" 2>&1
    local rc=$?
    echo "   build $level: rc=$rc in $((SECONDS - start)) s"
    ((rc == 0)) || tail -15 "$OUT/build-$level.log"
    return $rc
}

echo "== builds [t=$((SECONDS - START))s]"
[[ -f .deps/xxhash/xxhash.h ]] || echo "!! .deps/xxhash missing: run scripts/prepare-gpu-carry.sh here and carry [\".deps\"]"
ok_levels=()
for level in "${levels[@]}"; do build "$level" && ok_levels+=("$level"); done
((${#ok_levels[@]})) || exit 1

if [[ -x $B/tests/test_pdl && " ${ok_levels[*]} " == *" all "* ]]; then
    echo "== correctness (the all build) [t=$((SECONDS - START))s]"
    FUSEC_SRC=$ROOT FUSEC_CACHE_DIR=$ROOT/$B/test-cache timeout 150 "$B/tests/test_pdl" \
        >"$OUT/test_pdl.log" 2>&1
    echo "   test_pdl rc=$?"; grep -E "pdl_chain|device:|passed" "$OUT/test_pdl.log" | sed 's/^/   | /'
    FUSEC_SRC=$ROOT FUSEC_CACHE_DIR=$ROOT/$B/test-cache timeout 120 "$B/tests/test_decode" \
        >"$OUT/test_decode.log" 2>&1
    echo "   test_decode rc=$?"; tail -2 "$OUT/test_decode.log" | sed 's/^/   | /'
fi

echo "== models [t=$((SECONDS - START))s]"
M=$OUT/models
mkdir -p "$M"
python3 bench/models/decode_irgen.py --arch gpt2 --layers 12 --embd 768 --heads 12 --vocab 50257 --ctx 1024 \
    --dtype bf16 >"$M/gpt2.ir" || echo "!! gpt2.ir"
python3 bench/models/decode_irgen.py --arch llama --layers 16 --embd 2048 --heads 32 --kv-heads 8 --mlp 8192 \
    --vocab 128256 --ctx 2048 --tied --dtype bf16 >"$M/llama.ir" || echo "!! llama.ir"

# one LEVEL CASE: one measurement in ms on stdout (empty on failure); the
# run's output in $OUT/runs/LEVEL-CASE.log (the last round's).
one() {
    local level=$1 case=$2 dir=$B/bin-$1 log=$OUT/runs/$1-$2.log
    local env=(FUSEC_CACHE_DIR="$ROOT/$dir/cache" FUSEC_LOG=graphs)
    case $case in
    gpt2 | llama)
        env "${env[@]}" timeout 150 "$dir/example_generate" "$M/$case.ir" --device cuda --tokens 4 --bench "$STEPS" \
            >"$log" 2>&1
        sed -n 's/^bench: .*: \([0-9.]*\) ms\/token.*/\1/p' "$log" | tail -1 ;;
    block)
        env "${env[@]}" timeout 150 "$dir/fusec" examples/gpt2_block_bf16.ir --bind B=1,T=128 --run --device cuda \
            --bench 500 >"$log" 2>&1
        sed -n 's/^time: \([0-9.]*\) ms.*/\1/p' "$log" | tail -1 ;;
    esac
}

mkdir -p "$OUT/runs"
TSV=$OUT/pdl_ab.tsv
printf 'level\tcase\tround\tms\n' >"$TSV"
for ((r = 1; r <= ROUNDS; r++)); do
    echo "== round $r [t=$((SECONDS - START))s]"
    for c in "${models[@]}"; do
        line="   $c:"
        for level in "${ok_levels[@]}"; do
            ms=$(one "$level" "$c")
            printf '%s\t%s\t%d\t%s\n' "$level" "$c" "$r" "${ms:-nan}" >>"$TSV"
            line+=" $level ${ms:-FAIL}"
        done
        echo "$line"
        ((SECONDS - START > 520)) && { echo "!! time budget: stopping after round $r"; break 2; }
    done
done

echo "== programmatic edges (FUSEC_LOG=graphs, the last round's runs)"
for level in "${ok_levels[@]}"; do
    for c in "${models[@]}"; do
        echo "   $level $c: $(grep -o 'graph built, [0-9]* programmatic edges' "$OUT/runs/$level-$c.log" 2>/dev/null |
            sort | uniq -c | tr -s ' ' | paste -sd';')"
    done
done

echo "== medians over the rounds (ms; ratio to the old build) [t=$((SECONDS - START))s]"
python3 - "$TSV" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cases = list(dict.fromkeys(r["case"] for r in rows))
levels = list(dict.fromkeys(r["level"] for r in rows))
med = {}
for c in cases:
    for l in levels:
        v = [float(r["ms"]) for r in rows if r["case"] == c and r["level"] == l and r["ms"] != "nan"]
        med[c, l] = (statistics.median(v), min(v), max(v), len(v)) if v else None
print("| case | " + " | ".join(levels) + " |")
print("|---|" + "---|" * len(levels))
for c in cases:
    base = med.get((c, "old"))
    cells = []
    for l in levels:
        m = med[c, l]
        if not m:
            cells.append("-")
            continue
        s = "%.4f (%.4f-%.4f, n=%d)" % m
        if base and l != "old":
            s += " x%.3f" % (m[0] / base[0])
        cells.append(s)
    print("| %s | %s |" % (c, " | ".join(cells)))
EOF
