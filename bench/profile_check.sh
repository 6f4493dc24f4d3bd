#!/usr/bin/env bash
# profile_check.sh - the CUDA profile on the GPU machine, in one device call:
# build fusec, dynamic_bench and the profile's tests (Release, no LLVM, the
# carried .deps/ as bench/onnx-gpu-build.sh has them), run test_cupti_map and
# test_cuda_profile, then for the GPT-2 block (examples/gpt2_block.ir, its
# bf16 twin) and the whole GPT-2 124M (bench/models/irgen.py, bf16), at
# B=1, T=64, check the two targets of docs/PROFILING.md:
#   (a) profiling on changes the median run time by at most 5%: the
#       profile's plain runs (fc_run's CUDA Graph replays, no CUPTI) against
#       its profiled runs (the same replays with CUPTI recording kernels),
#       PROFILE_REPS profiles of PROFILE_RUNS runs each, and both beside
#       `--run --bench` (CUDA events, graph replays back to back);
#   (b) each kernel's time agrees within 5% with Nsight Compute's
#       gpu__time_duration.sum, run with --clock-control none --cache-control
#       none (the clocks and caches as a run in flight has them; ncu's
#       defaults lock the clocks to base and flush the caches), and with a
#       plain CUPTI trace of the same replays (`dynamic_bench trace`: CUPTI's
#       kernel records of 200 replays back to back, no fusec profile code;
#       both as own times, each kernel from the end of the ones before it),
#       and Nsight Systems' kernel summary where nsys is installed. Kernels
#       are matched by name (the mangled name; a name that runs several
#       times a run, as a layer's kernels do, by the median of all its runs).
# Prints the per-kernel ratio table, then the overhead, last.
#
#   here:   bash scripts/prepare-gpu-carry.sh
#   device run, carry [".deps"], timeout_s 600:
#           bash bench/profile_check.sh
# Expected: the build ~150 s, then ~150-200 s (the whole model's cold
# compile is most of it; ncu's per-kernel passes the rest); every step has
# its own timeout.
#
# Knobs: PROFILE_BIND (B=1,T=64), PROFILE_RUNS (200), PROFILE_REPS (3),
# ONNX_NOBUILD=1, ONNX_BUILD_DIR (build). Back in $OUT: run.log, build.log,
# per graph <name>.table.txt, <name>.<rep>.json, <name>.trace.json,
# <name>.bench.txt, <name>.cupti.txt, <name>.ncu.csv (and .nsys), and
# check.json with every number and verdict.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
BUILD=${ONNX_BUILD_DIR:-build}
BIND=${PROFILE_BIND:-B=1,T=64}
RUNS=${PROFILE_RUNS:-200}
REPS=${PROFILE_REPS:-3}
echo "== env: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
echo "   commit: $(git rev-parse HEAD 2>/dev/null || echo unknown); ncu: $(command -v ncu || echo none); nsys: $(command -v nsys || echo none)"

source bench/onnx-gpu-build.sh
onnx_gpu_build fusec dynamic_bench test_cupti_map test_cuda_profile || exit 1
FUSEC=$ROOT/$BUILD/fusec
DB=$ROOT/$BUILD/dynamic_bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export FUSEC_CACHE_DIR=$work/cache
start=$SECONDS

echo "== tests: test_cupti_map test_cuda_profile"
timeout 150 ctest --test-dir "$BUILD" -R '^(test_cupti_map|test_cuda_profile)$' --output-on-failure 2>&1 | tail -8

# The whole model's .ir inside the tree (dynamic_bench reads a path under FUSEC_SRC).
mkdir -p "$BUILD/profile_check"
python3 - "$BUILD/profile_check/gpt2.ir" <<'PY'
import sys
sys.path.insert(0, "bench/models")
import irgen
cfg = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, layer_norm_epsilon=1e-5)
open(sys.argv[1], "w").write(irgen.gpt2_ir(cfg, "bf16")[0])
PY

for spec in "gpt2_block examples/gpt2_block.ir" "gpt2_block_bf16 examples/gpt2_block_bf16.ir" \
    "gpt2 $BUILD/profile_check/gpt2.ir"; do
    name=${spec%% *} ir=${spec#* }
    echo "== $name ($ir, $BIND): --profile, $RUNS runs (the first call compiles)"
    t=$SECONDS
    timeout 240 "$FUSEC" "$ir" --bind "$BIND" --device=cuda --profile --profile-runs="$RUNS" >"$OUT/$name.table.txt" 2>&1
    echo "   rc=$? in $((SECONDS - t)) s"
    grep -E '^(device time|profiled runs|plain run|largest)' "$OUT/$name.table.txt" | sed 's/^/   /'
    for ((r = 1; r <= REPS; r++)); do
        extra=()
        ((r == 1)) && extra=(--trace "$OUT/$name.trace.json")
        timeout 90 "$FUSEC" "$ir" --bind "$BIND" --device=cuda --profile --profile-format=json --profile-runs="$RUNS" \
            "${extra[@]}" >"$OUT/$name.$r.json" 2>"$OUT/$name.$r.err" || echo "   profile $r: rc=$? $(head -c 300 "$OUT/$name.$r.err")"
    done
    echo "== $name: --run --bench 200 (CUDA events, graph replays)"
    timeout 90 "$FUSEC" "$ir" --bind "$BIND" --device=cuda --run --bench 200 2>&1 | tail -1 | tee "$OUT/$name.bench.txt" | sed 's/^/   /'
    echo "== $name: a plain CUPTI trace of the replays (dynamic_bench trace, 200 replays)"
    FUSEC_SRC=$ROOT TRACE_IR=$ir TRACE_BIND=$BIND TRACE_ITERS=200 timeout 120 "$DB" trace >"$OUT/$name.cupti.txt" 2>&1
    echo "   rc=$?; $(grep -c 'trace kernel=' "$OUT/$name.cupti.txt") kernels a forward; $(grep -o 'per_call_ms=[0-9.]* traced_per_call_ms=[0-9.]*' "$OUT/$name.cupti.txt")"
    if command -v ncu >/dev/null; then
        count=300
        [[ $name == gpt2 ]] && count=400
        echo "== $name: ncu gpu__time_duration.sum, --clock-control none --cache-control none, $count kernels of --run --bench 20"
        t=$SECONDS
        timeout 150 ncu --csv --print-kernel-base mangled --metrics gpu__time_duration.sum --clock-control none \
            --cache-control none --launch-count "$count" "$FUSEC" "$ir" --bind "$BIND" --device=cuda --run --bench 20 \
            >"$OUT/$name.ncu.csv" 2>"$OUT/$name.ncu.err"
        echo "   ncu rc=$? in $((SECONDS - t)) s; $(grep -c gpu__time_duration "$OUT/$name.ncu.csv" 2>/dev/null) records"
        tail -2 "$OUT/$name.ncu.err" | sed 's/^/   | /'
    fi
    if command -v nsys >/dev/null; then
        echo "== $name: nsys, graph nodes traced"
        timeout 120 nsys profile -t cuda --cuda-graph-trace=node -o "$work/$name" --force-overwrite true \
            "$FUSEC" "$ir" --bind "$BIND" --device=cuda --run --bench 200 >/dev/null 2>"$OUT/$name.nsys.err" &&
            timeout 60 nsys stats --report cuda_gpu_kern_sum --format csv -o "$OUT/$name.nsys" "$work/$name.nsys-rep" \
                >/dev/null 2>>"$OUT/$name.nsys.err"
        echo "   nsys rc=$?"
    fi
done
echo "== $((SECONDS - start)) s after the build"

echo "== checks"
python3 - "$OUT" "$REPS" <<'PY'
import csv, glob, io, json, re, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
graphs = ("gpt2_block", "gpt2_block_bf16", "gpt2")
KEY = 60  # names are compared on their first 60 characters (the tools cut them differently)
UNIT = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3}
report, overhead, table = {}, [], []

def ours(name):
    """Per kernel name: the profile's device times (us) over its measured runs, and the runs."""
    try:
        t = json.load(open(f"{out}/{name}.trace.json"))
    except Exception:
        return {}, {}, 0
    by, alone, runs = {}, {}, {}
    for e in t["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "device":
            by.setdefault(e["name"][:KEY], []).append(e["dur"])
            runs.setdefault(e["args"]["run"], []).append(e)
    # A kernel after a programmatic edge starts before the one before it
    # ends and waits inside it: "alone" is its time after that one's end.
    for evs in runs.values():
        evs.sort(key=lambda e: e["ts"])
        prev_end = None
        for e in evs:
            start = e["ts"] if prev_end is None else max(e["ts"], prev_end)
            alone.setdefault(e["name"][:KEY], []).append(max(0.0, e["ts"] + e["dur"] - start))
            prev_end = e["ts"] + e["dur"] if prev_end is None else max(prev_end, e["ts"] + e["dur"])
    return by, alone, len(runs)

def ncu(name):
    by = {}
    try:
        text = open(f"{out}/{name}.ncu.csv").read()
    except OSError:
        return by
    if '"ID"' not in text:
        return by
    for row in csv.DictReader(io.StringIO(text[text.find('"ID"'):])):
        f = UNIT.get(row.get("Metric Unit", ""))
        if row.get("Metric Name") == "gpu__time_duration.sum" and f:
            by.setdefault(row["Kernel Name"][:KEY], []).append(float(row["Metric Value"].replace(",", "")) * f)
    return by

def cupti(name):
    by = {}
    try:
        for line in open(f"{out}/{name}.cupti.txt"):
            # its own time (own_us: after every kernel before it ended), as --profile's rows count it
            m = re.search(r"trace kernel=\d+ us=[0-9.]+ gap_us=\S+ own_us=([0-9.]+) .* name=(.*)$", line)
            if m: by.setdefault(m.group(2)[:KEY], []).append(float(m.group(1)))
    except OSError:
        pass
    return by

def nsys(name):
    by = {}
    for f in glob.glob(f"{out}/{name}.nsys*kern_sum*.csv"):
        for row in csv.DictReader(open(f)):
            med = row.get("Med (ns)") or row.get("Median (ns)")
            if row.get("Name") and med: by[row["Name"][:KEY]] = [float(med.replace(",", "")) * 1e-3]
    return by

for name in graphs:
    profs = []
    for r in range(1, reps + 1):
        try:
            profs.append(json.load(open(f"{out}/{name}.{r}.json"))["summary"])
        except Exception as e:
            print(f"{name}: profile {r}: none ({e})")
    rep = report[name] = {}
    if profs:
        changes = [s["wall_ms"] / s["plain_wall_ms"] - 1 for s in profs if s["plain_wall_ms"]]
        bench = None
        try:
            m = re.search(r"time: ([0-9.]+) ms", open(f"{out}/{name}.bench.txt").read())
            bench = float(m.group(1)) if m else None
        except OSError:
            pass
        ch = statistics.median(changes) if changes else None
        rep["a"] = {"plain_ms": [s["plain_wall_ms"] for s in profs], "profiled_ms": [s["wall_ms"] for s in profs],
                    "changes": changes, "change": ch, "bench_ms": bench, "replayed": [s.get("replayed") for s in profs],
                    "mode": profs[0].get("mode"), "pass": ch is not None and abs(ch) <= 0.05}
        overhead.append((name, rep["a"]))
    mine, alone, nruns = ours(name)
    srcs = {"ncu": ncu(name), "cupti": cupti(name), "nsys": nsys(name)}
    rows = []
    for k, v in mine.items():
        row = {"kernel": k, "per_run": len(v) / nruns if nruns else 0, "profile_us": statistics.median(v),
               "alone_us": statistics.median(alone[k]) if alone.get(k) else None}
        for s, by in srcs.items():
            if k in by:
                # --profile's rows are each kernel's own time (alone); ncu serializes the kernels.
                mine_us = row["alone_us"] if row["alone_us"] is not None else row["profile_us"]
                row[s + "_us"] = statistics.median(by[k])
                row[s + "_ratio"] = mine_us / row[s + "_us"] if row[s + "_us"] else None
        rows.append(row)
    rows.sort(key=lambda r: -r["profile_us"] * r["per_run"])
    rep["b"] = {"kernels": rows}
    for s in srcs:
        got = [r for r in rows if r.get(s + "_ratio")]
        if not got:
            rep["b"][s] = None
            continue
        w_ours = sum((r["alone_us"] if r["alone_us"] is not None else r["profile_us"]) * r["per_run"] for r in got)
        w_theirs = sum(r[s + "_us"] * r["per_run"] for r in got)
        within = sum(abs(r[s + "_ratio"] - 1) <= 0.05 for r in got)
        rep["b"][s] = {"matched": len(got), "of": len(rows), "within_5pct": within, "time_weighted_ratio": w_ours / w_theirs,
                       "pass": within == len(got)}
    table.append((name, rows, rep["b"]))
json.dump(report, open(f"{out}/check.json", "w"), indent=1)

def f(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) else "-"

print("\nper kernel (us; profile = the trace's span, the median over its replayed runs; alone = its own time, after the kernels"
      " before it ended (a programmatic edge lets it start earlier), as the table's rows count it; ratio = alone / the other;"
      " cupti = the plain trace's own times)")
for name, rows, b in table:
    print(f"-- {name}")
    print(f"   {'kernel':44s} {'n/run':>5s} {'profile':>8s} {'alone':>8s} {'ncu':>8s} {'ratio':>6s} {'cupti':>8s} {'ratio':>6s} {'nsys':>8s} {'ratio':>6s}")
    for r in rows[:30]:
        print(f"   {r['kernel'][:44]:44s} {r['per_run']:5.1f} {r['profile_us']:8.2f} {f(r.get('alone_us'), '8.2f'):>8s} {f(r.get('ncu_us'), '8.2f'):>8s} "
              f"{f(r.get('ncu_ratio'), '6.3f'):>6s} {f(r.get('cupti_us'), '8.2f'):>8s} {f(r.get('cupti_ratio'), '6.3f'):>6s} "
              f"{f(r.get('nsys_us'), '8.2f'):>8s} {f(r.get('nsys_ratio'), '6.3f'):>6s}")
    if len(rows) > 30: print(f"   ... {len(rows) - 30} more in check.json")
    for s in ("ncu", "cupti", "nsys"):
        v = b.get(s)
        if v:
            print(f"   against {s}: {v['within_5pct']} of {v['matched']} matched kernels within 5% ({v['of']} in all), "
                  f"time-weighted ratio {v['time_weighted_ratio']:.3f}: {'PASS' if v['pass'] else 'FAIL'}")
        else:
            print(f"   against {s}: nothing matched (not run, or no records)")
    # A graph passes when the profile agrees with Nsight Compute's or with
    # CUPTI's own per-kernel times: ncu runs each kernel alone, CUPTI's trace
    # the graph as it runs, and a whole model's kernels run slower in flight
    # than alone.
    agreed = [s for s in ("ncu", "cupti") if b.get(s) and b[s]["pass"]]
    print(f"   agrees with ncu or CUPTI: {'PASS (' + ', '.join(agreed) + ')' if agreed else 'FAIL'}")

print("\noverhead (ms; plain = fc_run's replays unprofiled, profiled = the same with CUPTI; median of the profiles' changes)")
for name, a in overhead:
    print(f"   {name:16s} plain {' '.join(f'{x:.4f}' for x in a['plain_ms'])}  profiled {' '.join(f'{x:.4f}' for x in a['profiled_ms'])}"
          f"  change {f(100 * a['change'] if a['change'] is not None else None, '+.1f')}%  --bench {a['bench_ms']}  replayed {a['replayed']}: {'PASS' if a['pass'] else 'FAIL'} (<= 5%)")
    print(f"   {'':16s} mode: {a['mode']}")
PY
exit 0
