#!/usr/bin/env bash
# profile_check.sh - the CUDA profile on the GPU machine, in one device call:
# build fusec (Release, no LLVM, the carried deps as bench/run-whole.sh
# has them), profile the GPT-2 block (examples/gpt2_block.ir, and its bf16
# twin) with --profile, --trace and --report, and check the two targets of
# docs/PROFILING.md:
#   (a) profiling on changes the median run time by at most 5%: the
#       profile's own plain runs (as fc_run runs them, CUDA Graphs on, no
#       CUPTI) against its profiled runs (launch by launch under CUPTI), and
#       both against `--run --bench` (CUDA events) of the same graph;
#   (b) each kernel's median time agrees within 5% with an independent
#       measure: Nsight Compute's gpu__time_duration.sum (caches and clocks
#       left alone), else Nsight Systems' kernel summary, else it says that
#       neither ran (hardware counters are often off on shared machines).
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/profile_check.sh
#
# Knobs: PROFILE_BIND (B=1,T=64), PROFILE_RUNS (50), PROFILE_NOBUILD=1,
# PROFILE_BUILD_DIR (build). Back in $OUT: run.log, build.log, for each graph
# <name>.table.txt, <name>.json, <name>.trace.json, <name>.html, ncu or nsys
# output, and check.json (every number and verdict).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
BUILD=${PROFILE_BUILD_DIR:-build}
BIND=${PROFILE_BIND:-B=1,T=64}
RUNS=${PROFILE_RUNS:-50}
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== env: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "   commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"

if [[ ${PROFILE_NOBUILD:-0} != 1 ]]; then
    if [[ -f $BUILD/CMakeCache.txt ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD/CMakeCache.txt"; then
        rm -rf "$BUILD"
    fi
    args=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    [[ -d .deps/onnx ]] && args+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    cuda=${CUDA_HOME:-/usr/local/cuda}
    [[ -d $cuda ]] && args+=("-DCUDAToolkit_ROOT=$cuda")
    echo "== build: cmake ${args[*]}"
    { cmake "${args[@]}" && timeout 300 cmake --build "$BUILD" -j "$(nproc)" --target fusec; } >"$OUT/build.log" 2>&1 ||
        { tail -20 "$OUT/build.log"; exit 1; }
fi
FUSEC=$ROOT/$BUILD/fusec
export FUSEC_CACHE_DIR=$OUT/cache

for ir in examples/gpt2_block.ir examples/gpt2_block_bf16.ir; do
    name=$(basename "$ir" .ir)
    echo "== $name: --profile (table), then JSON + trace + report"
    "$FUSEC" "$ir" --bind "$BIND" --device=cuda --profile --profile-runs="$RUNS" | tee "$OUT/$name.table.txt"
    "$FUSEC" "$ir" --bind "$BIND" --device=cuda --profile --profile-format=json --profile-runs="$RUNS" \
        --trace "$OUT/$name.trace.json" --report "$OUT/$name.html" >"$OUT/$name.json"
    echo "   rc=$?"
    echo "== $name: --run --bench 200 (CUDA events, graphs on)"
    "$FUSEC" "$ir" --bind "$BIND" --device=cuda --run --bench 200 | tail -1 | tee "$OUT/$name.bench.txt"
    echo "== $name: Nsight Compute, gpu__time_duration.sum per kernel (launch by launch, as profiled)"
    if command -v ncu >/dev/null; then
        timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none \
            --launch-count 400 "$FUSEC" "$ir" --bind "$BIND" --device=cuda --run --no-graphs --bench 20 \
            >"$OUT/$name.ncu.csv" 2>"$OUT/$name.ncu.err"
        echo "   ncu rc=$?; $(grep -c gpu__time_duration "$OUT/$name.ncu.csv" 2>/dev/null) records"
        tail -3 "$OUT/$name.ncu.err" | sed 's/^/   | /'
    else
        echo "   no ncu"
    fi
    if ! grep -q gpu__time_duration "$OUT/$name.ncu.csv" 2>/dev/null && command -v nsys >/dev/null; then
        echo "== $name: Nsight Systems instead"
        timeout 240 nsys profile -t cuda -o "$OUT/$name.nsys" --force-overwrite true \
            "$FUSEC" "$ir" --bind "$BIND" --device=cuda --run --no-graphs --bench 50 >/dev/null 2>"$OUT/$name.nsys.err"
        nsys stats --report cuda_gpu_kern_sum --format csv -o "$OUT/$name" "$OUT/$name.nsys.nsys-rep" \
            >/dev/null 2>>"$OUT/$name.nsys.err"
        ls "$OUT"/"$name"*kern_sum*.csv 2>/dev/null | head -1 | sed 's/^/   /'
    fi
done

echo "== checks"
python3 - "$OUT" <<'PY'
import csv, glob, io, json, os, re, statistics, sys
out = sys.argv[1]
report = {}
def unit_ms(unit):
    return {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0}.get(unit, None)
for name in ("gpt2_block", "gpt2_block_bf16"):
    try:
        p = json.load(open(f"{out}/{name}.json"))
    except Exception as e:
        print(f"{name}: no profile ({e})"); continue
    s = p["summary"]
    r = report[name] = {"summary": s}
    # (a) the cost of profiling.
    change = s["wall_ms"] / s["plain_wall_ms"] - 1 if s["plain_wall_ms"] else None
    bench = None
    try:
        m = re.search(r"time: ([0-9.]+) ms", open(f"{out}/{name}.bench.txt").read())
        bench = float(m.group(1)) if m else None
    except OSError:
        pass
    r["a"] = {"plain_wall_ms": s["plain_wall_ms"], "profiled_wall_ms": s["wall_ms"], "bench_ms": bench,
              "change": change, "pass": change is not None and abs(change) <= 0.05}
    print(f"{name} (a): plain {s['plain_wall_ms']:.4f} ms, profiled {s['wall_ms']:.4f} ms "
          f"({100 * change:+.1f}%), --bench {bench} ms: {'PASS' if r['a']['pass'] else 'FAIL'} (<= 5%)")
    # (b) per-kernel times against Nsight Compute, else Nsight Systems.
    ours = {}
    for l in p["launches"]:
        if l["kind"] == "kernel": ours.setdefault(l["name"], []).append(l["median_ms"])
    theirs, source = {}, None
    try:
        text = open(f"{out}/{name}.ncu.csv").read()
        rows = list(csv.DictReader(io.StringIO(text[text.find('"ID"'):]))) if '"ID"' in text else []
        for row in rows:
            if row.get("Metric Name") != "gpu__time_duration.sum": continue
            f = unit_ms(row.get("Metric Unit", ""))
            if f is None: continue
            theirs.setdefault(row["Kernel Name"].split("(")[0], []).append(float(row["Metric Value"].replace(",", "")) * f)
        source = "ncu gpu__time_duration.sum" if theirs else None
    except OSError:
        pass
    if not theirs:
        for f in glob.glob(f"{out}/{name}*kern_sum*.csv"):
            for row in csv.DictReader(open(f)):
                k = row.get("Name", "").split("(")[0]
                med = row.get("Med (ns)") or row.get("Median (ns)")
                if k and med: theirs.setdefault(k, []).append(float(med.replace(",", "")) * 1e-6)
            source = "nsys cuda_gpu_kern_sum median" if theirs else None
    cmp = []
    for k, v in ours.items():
        if k in theirs:
            a, b = statistics.median(v), statistics.median(theirs[k])
            cmp.append({"kernel": k, "profile_ms": a, "independent_ms": b, "ratio": a / b if b else None})
    r["b"] = {"source": source, "kernels": cmp,
              "pass": bool(cmp) and all(c["ratio"] and abs(c["ratio"] - 1) <= 0.05 for c in cmp)}
    if not source:
        print(f"{name} (b): no independent measure ran (ncu and nsys missing or refused): UNCHECKED")
    else:
        for c in cmp:
            print(f"   {c['kernel'][:40]:40s} profile {c['profile_ms']:.5f} ms  {source.split()[0]} {c['independent_ms']:.5f} ms"
                  f"  ratio {c['ratio']:.3f}")
        print(f"{name} (b): {len(cmp)} kernels against {source}: {'PASS' if r['b']['pass'] else 'FAIL'} (within 5%)")
json.dump(report, open(f"{out}/check.json", "w"), indent=1)
PY
exit 0
