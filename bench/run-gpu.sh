#!/usr/bin/env bash
# run-gpu.sh - build, test and benchmark fusec on the GPU machine, in one call.
#
#   bash scripts/prepare-gpu-carry.sh          # here, once: .deps/xxhash/xxhash.h
#   device run, carry [".deps"]:  bash bench/run-gpu.sh
#
# Steps (each under its own timeout; a failing step never stops the later ones):
#   1. env      nvidia-smi, git commit, versions               -> $OUT/env.txt
#   2. build    cmake (Release, Ninja, -DFUSEC_WITH_LLVM=OFF,
#               -DFUSEC_XXHASH_DIR=$PWD/.deps/xxhash) + ninja  -> $OUT/build.log
#   3. ctest    every test, GPU ones included                  -> $OUT/ctest.log
#   4. bench    build/fusec bench/<wl>.ir --run --device=cuda --bench $REPS
#               (last line: "time: X ms median of N")
#   5. torch    bench/torch_bench.py: eager and torch.compile (default mode)
#               times, device-to-device copy bandwidth
#   6. inputs   bench/torch_bench.py --make-inputs: bf16-exact .npy inputs
#   7. save     build/fusec ... --inputs <them> --save-outputs DIR
#   8. check    bench/torch_bench.py --check: fusec's outputs against float64
#   9. fcheck   build/fusec bench/<wl>.ir --run --device=cuda --check
#               (exit 4 on a tolerance failure; max_abs_err / max_rel_err)
#  10. summary  the table -> stdout, $OUT/summary.md, $OUT/results.json
# Every step's full output goes to $OUT/steps.log (build and ctest to their
# own logs); the console copy is in $OUT/run.log.
#
# The whole run keeps within BENCH_BUDGET_S seconds (default 470): a step's
# timeout is its own cap or the time left, whichever is less, and a step with
# under 5 s left is skipped. Knobs (environment):
#   BENCH_BUDGET_S   total seconds (default 470)
#   BENCH_REPS       timed repetitions, fusec and torch (default 50)
#   BENCH_WORKLOADS  space-separated subset (default: all four)
#   BENCH_STEPS      space-separated subset of: build ctest bench torch check fcheck
#                    (default: all; "check" covers inputs, save and check)
#   BENCH_COMMIT     commit to record when the tree has no .git
#   BENCH_WORK       scratch folder for logs and ~6 GiB of .npy files (default
#                    /dev/shm/fusec-bench when /dev/shm has 16 GiB free, else
#                    /tmp/fusec-bench)
set -uo pipefail   # no -e: steps fail on their own
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD

export PYTHONUNBUFFERED=1
OUT=${OUT:-$ROOT/out}
# Scratch: /dev/shm when it has room (the check step writes ~6 GiB of .npy and
# a slow disk would eat the time budget), else /tmp.
WORK=${BENCH_WORK:-}
if [[ -z $WORK ]]; then
    shm_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $4}')
    if [[ ${shm_kib:-0} =~ ^[0-9]+$ ]] && ((shm_kib > 16 * 1024 * 1024)); then
        WORK=/dev/shm/fusec-bench
    else
        WORK=/tmp/fusec-bench
    fi
fi
BUDGET=${BENCH_BUDGET_S:-470}
REPS=${BENCH_REPS:-50}
WORKLOADS=${BENCH_WORKLOADS:-"pointwise softmax add_layernorm rmsnorm"}
STEPS=${BENCH_STEPS:-"build ctest bench torch check fcheck"}
WL_LIST=$(echo "$WORKLOADS" | xargs | tr ' ' ',')   # for torch_bench.py --workloads
RESERVE=15         # seconds kept back for the summary
START=$SECONDS
FUSEC=$ROOT/build/fusec
PY=${PYTHON:-python3}

mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK"
STEPS_LOG=$OUT/steps.log
: >"$STEPS_LOG"

exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!

want() { [[ " $STEPS " == *" $1 "* ]]; }
elapsed() { echo $((SECONDS - START)); }

# step NAME CAP CMD...: run CMD with timeout min(CAP, time left); its output
# goes to $WORK/NAME.log (and into $STEPS_LOG), its exit code to $WORK/NAME.rc
# (124 or 137: timed out; "skipped": no time left). Prints a few lines of it.
step() {
    local name=$1 cap=$2
    shift 2
    local left=$((BUDGET - (SECONDS - START) - RESERVE))
    local t=$((cap < left ? cap : left))
    if ((t < 5)); then
        echo "== $name: skipped (out of time at $(elapsed)s)"
        echo skipped >"$WORK/$name.rc"
        return 0
    fi
    echo "== $name [t=$(elapsed)s, timeout ${t}s]: $*"
    local t0=$SECONDS rc
    timeout --kill-after=10 "$t" "$@" >"$WORK/$name.log" 2>&1 </dev/null
    rc=$?
    echo "$rc" >"$WORK/$name.rc"
    echo "   rc=$rc in $((SECONDS - t0))s"
    tail -n "${TAIL:-4}" "$WORK/$name.log" | cut -c1-300 | sed 's/^/   | /'
    {
        echo "===== $name (rc=$rc, $((SECONDS - t0))s): $*"
        cat "$WORK/$name.log"
        echo
    } >>"$STEPS_LOG"
    return 0
}

# nobin NAME: record that a fusec step could not run (no binary).
nobin() {
    echo "== $1: skipped (no build/fusec)"
    echo no-binary >"$WORK/$1.rc"
}

# ---------------------------------------------------------------- 1. env
echo "== env"
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    commit=${BENCH_COMMIT:-}
    if [[ -z $commit ]] && git rev-parse HEAD >/dev/null 2>&1; then
        commit=$(git rev-parse HEAD)
        git diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"
    fi
    echo "commit: ${commit:-unknown (no .git; set BENCH_COMMIT)}"
    echo "${commit:-unknown}" >"$WORK/commit.txt"
    echo "uname: $(uname -a)"
    echo "nproc: $(nproc)"
    echo "--- nvidia-smi"
    timeout 30 nvidia-smi 2>&1
    echo "--- nvidia-smi --query-gpu"
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv 2>&1
    echo "--- nvcc"
    timeout 30 nvcc --version 2>&1 || timeout 30 /usr/local/cuda/bin/nvcc --version 2>&1
    echo "--- cmake / ninja / python"
    cmake --version 2>&1 | head -1
    echo "ninja $(ninja --version 2>&1)"
    timeout 60 "$PY" -c 'import sys, torch, triton; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)' 2>&1 | tail -1
    echo "--- git status --short"
    git status --short 2>&1 | head -50
} >"$OUT/env.txt" 2>&1
gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "${gpu:-unknown}" >"$WORK/gpu.txt"
echo "   gpu: ${gpu:-unknown}; commit: $(cat "$WORK/commit.txt"); scratch: $WORK"

# ---------------------------------------------------------------- 2. build
if want build; then
    if [[ ! -f .deps/xxhash/xxhash.h ]]; then
        echo "!! .deps/xxhash/xxhash.h missing: run scripts/prepare-gpu-carry.sh here and carry [\".deps\"]"
    fi
    # A build/ from another tree or generator would make cmake refuse.
    if [[ -f build/CMakeCache.txt ]] &&
        ! { grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" build/CMakeCache.txt &&
            grep -qx "CMAKE_GENERATOR:INTERNAL=Ninja" build/CMakeCache.txt; }; then
        echo "   removing a stale build/"
        rm -rf build
    fi
    cmake_args=(-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEC_WITH_LLVM=OFF
        "-DFUSEC_XXHASH_DIR=$ROOT/.deps/xxhash")
    # protobuf-c, cJSON and onnx.pb-c carried by prepare-gpu-carry.sh: the ONNX importer and --weights.
    [[ -d .deps/onnx ]] && cmake_args+=("-DCMAKE_PREFIX_PATH=$ROOT/.deps/onnx" "-DFUSEC_ONNX_PB_DIR=$ROOT/.deps/onnx/pb")
    cuda=${CUDA_HOME:-/usr/local/cuda}
    [[ -d $cuda ]] && cmake_args+=("-DCUDAToolkit_ROOT=$cuda")
    # shellcheck disable=SC2016  # $@ expands in the inner bash
    step build 240 bash -c 'cmake "$@" && cmake --build build -j "$(nproc)"' build "${cmake_args[@]}"
    cp "$WORK/build.log" "$OUT/build.log" 2>/dev/null
fi
have_fusec=0
[[ -x $FUSEC ]] && have_fusec=1

# ---------------------------------------------------------------- 3. ctest
if want ctest; then
    if [[ -f build/CTestTestfile.cmake ]]; then
        TAIL=6 step ctest 100 ctest --test-dir build --output-on-failure -j 8 --timeout 60
        cp "$WORK/ctest.log" "$OUT/ctest.log" 2>/dev/null
    else
        echo "== ctest: skipped (no build/)"
        echo no-binary >"$WORK/ctest.rc"
    fi
fi

# ---------------------------------------------------------------- 4. fusec --bench
if want bench; then
    for wl in $WORKLOADS; do
        if ((have_fusec)); then
            step "fusec_${wl}_bench" 60 "$FUSEC" "bench/$wl.ir" --run --device=cuda --bench "$REPS"
        else
            nobin "fusec_${wl}_bench"
        fi
    done
fi

# ---------------------------------------------------------------- 5. torch
if want torch; then
    step torch_bench 240 "$PY" bench/torch_bench.py --workloads "$WL_LIST" \
        --reps "$REPS" --json "$WORK/torch.json"
fi

# ---------------------------------------------------------------- 6-8. check
if want check; then
    step make_inputs 90 "$PY" bench/torch_bench.py --workloads "$WL_LIST" --make-inputs "$WORK/data"
    for wl in $WORKLOADS; do
        ins=$(ls "$WORK/data/$wl"/in*.npy 2>/dev/null | sort | paste -sd, -)
        if ((!have_fusec)); then
            nobin "fusec_${wl}_save"
        elif [[ -z $ins ]]; then
            echo "== fusec_${wl}_save: skipped (no inputs)"
            echo no-inputs >"$WORK/fusec_${wl}_save.rc"
        else
            step "fusec_${wl}_save" 60 "$FUSEC" "bench/$wl.ir" --run --device=cuda \
                --inputs "$ins" --save-outputs "$WORK/data/$wl/out"
        fi
    done
    TAIL=8 step torch_check 120 "$PY" bench/torch_bench.py --workloads "$WL_LIST" \
        --check "$WORK/data" --json "$WORK/check.json"
    rm -rf "$WORK/data"   # several GiB of .npy
fi

# ---------------------------------------------------------------- 9. fusec --check
if want fcheck; then
    for wl in $WORKLOADS; do
        if ((have_fusec)); then
            TAIL=6 step "fusec_${wl}_check" 60 "$FUSEC" "bench/$wl.ir" --run --device=cuda --check
        else
            nobin "fusec_${wl}_check"
        fi
    done
fi

# ---------------------------------------------------------------- 10. summary
echo "== summary [t=$(elapsed)s]"
timeout 60 "$PY" bench/torch_bench.py --workloads "$WL_LIST" \
    --summary "$WORK" --md "$OUT/summary.md" --out-json "$OUT/results.json" \
    >"$WORK/summary.log" 2>&1 || echo "!! summary failed (rc=$?)"
cat "$WORK/summary.log" >>"$STEPS_LOG"
# Files over 16 MiB do not come back from the device: keep each log's head and tail.
for f in "$OUT"/*.log; do
    [[ $f == "$OUT/run.log" ]] && continue   # tee still writes it
    if [[ -f $f ]] && (($(stat -c %s "$f") > 12 * 1024 * 1024)); then
        { head -c 4M "$f"; printf '\n[... cut by run-gpu.sh ...]\n'; tail -c 4M "$f"; } >"$f.cut" && mv "$f.cut" "$f"
    fi
done
echo "done in $(elapsed)s; files in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
echo
cat "$WORK/summary.log"

exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit 0
