#!/usr/bin/env bash
# run-variant-grid.sh - the dynamic variant's steady state by T with the
# frame kernels' grid (FUSEC_FRAME_GRID times the occupancy), plus ncu's
# time of each kernel at one T (docs/DYNAMIC.md, "The frame"). One device call, carry [".deps"]; logs under $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export FUSEC_SRC=$PWD FUSEC_CACHE_DIR=/tmp/fusec-grid-cache
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF \
    -DFUSEC_XXHASH_DIR="$PWD/.deps/xxhash" >"$OUT/build.log" 2>&1 && ninja -C build dynamic_bench >>"$OUT/build.log" 2>&1
echo "build: rc=$?"
TS=${GRID_TS:-1,32,64,128,200,300,350,450,550,600,650,700,750,800,900,1000}
for round in 1 2; do
    for mode in frame1 frame2 frame4; do
        case $mode in
        frame1) envs=(FUSEC_FRAME_GRID=1) ;;
        frame2) envs=() ;;
        frame4) envs=(FUSEC_FRAME_GRID=4) ;;
        esac
        env "${envs[@]}" VARIANT_TS="$TS" timeout 60 build/dynamic_bench variant 2>&1 | sed "s/^RESULT fusec variant /$mode $round /"
    done
done >"$OUT/grid.log"
for mode in frame; do
    envs=(FUSEC_CUDA_GRAPHS=1) # the default grid
    env "${envs[@]}" VARIANT_TS=${NCU_T:-700} timeout 120 ncu --metrics gpu__time_duration.sum --launch-skip 36 \
        --launch-count 24 --csv build/dynamic_bench variant >"$OUT/ncu-$mode.csv" 2>"$OUT/ncu-$mode.err"
    echo "ncu $mode: rc=$?"
done
python3 - "$OUT" <<'PY'
import csv, sys, collections, statistics as S
out = sys.argv[1]
rows = collections.defaultdict(list)
for line in open(f"{out}/grid.log"):
    p = line.split()
    if len(p) == 4 and p[2].startswith("T="):
        rows[(p[0], int(p[2][2:]))].append(float(p[3].split("=")[1]) * 1e3)
modes = ["frame1", "frame2", "frame4"]
ts = sorted({t for _, t in rows})
print("steady call, us (median of rounds):", "  ".join(f"{m:>8s}" for m in modes))
for t in ts:
    print(f"T={t:5d}", "  ".join(f"{S.median(rows[(m, t)]):8.1f}" if rows[(m, t)] else "       -" for m in modes))
for mode in ["frame"]:
    try:
        lines = [l for l in open(f"{out}/ncu-{mode}.csv") if l.startswith('"')]
        r = list(csv.DictReader(lines))
        by = collections.defaultdict(list)
        for x in r:
            if x.get("Metric Name") == "gpu__time_duration.sum":
                by[x["Kernel Name"]].append(float(x["Metric Value"].replace(",", "")))
        print(f"ncu {mode}, T={__import__('os').environ.get('NCU_T', '700')}:",
              " ".join(f"{k.split('_')[-1]}={S.median(v)/1e3:.1f}" for k, v in sorted(by.items(), key=lambda kv: int(kv[0].split('_k')[-1]) if '_k' in kv[0] else 0)))
    except Exception as e:
        print("ncu", mode, "parse failed:", e)
PY
