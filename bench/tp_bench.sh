#!/usr/bin/env bash
# tp_bench.sh - tensor parallelism on the GPUs of this host (docs/PARALLEL.md),
# everything in one run, ending in the targets' table:
#
#  1. tests/test_shard: golden sharding, the plans around the collectives,
#     TP=2/4 against TP=1 on ref, CPU and CUDA at every degree the GPUs
#     allow, each rank's second run a CUDA Graph with its collectives;
#  2. Llama-3-8B's shape, 4 layers (bench/models/decode_irgen.py: 32 heads, 8
#     key/value heads, MLP 14336, vocabulary 32000, bf16, cache 1024):
#     decode one token at position 128 and prefill 128, at each degree
#     against the unsharded program on one GPU (speedup, worst logit
#     difference);
#  3. PyTorch tensor parallelism on the same model (bench/tp_torch.py:
#     torch.distributed, DTensor's Colwise/RowwiseParallel, eager) at TP=1
#     and each degree;
#  4. Llama-3-70B's shape (8192 wide, 64 heads, 8 key/value heads, MLP
#     28672, vocabulary 128256): 2 layers at the largest degree against one
#     GPU (numerics at 70B's widths), then all 80 layers (141 GB of bf16
#     weights: more than one H200 holds) at the largest degree, decode and
#     prefill, each rank's shards made on the host directly;
#  5. one 64 MiB bf16 all_reduce at each degree (bus bandwidth as nccl-tests
#     reports it; nccl-tests' own when all_reduce_perf is on PATH).
#
# On a one-GPU machine it runs steps 1, 2 and 3 at TP=1 (the sharded
# program's collectives through NCCL over one rank) and says what it skipped.
#
#   bash bench/tp_bench.sh        (from the repository root; OUT=dir for the logs)
#
# About 150 s of build, then at most 290 s (each step's timeout is cut to
# what is left of that), about 120 s on one GPU.
set -uo pipefail
source bench/bench_env.sh
source bench/onnx-gpu-build.sh
onnx_gpu_build tp_bench test_shard || exit 1
# NCCL: the system's, or PyTorch's wheel's (dlopen finds it on the path).
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[[ -n $NCCL_DIR ]] && export LD_LIBRARY_PATH=$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
degrees=()
for t in 2 4 8; do ((t <= NGPU)) && degrees+=("$t"); done
((${#degrees[@]})) || degrees=(1)
TOP=${degrees[${#degrees[@]} - 1]}
echo "== $NGPU GPU(s); NCCL from ${NCCL_DIR:-the system}; degrees ${degrees[*]}"
# Every step's timeout is its own limit or what is left of 290 s after the
# build, whichever is less: the table comes out within the device call.
T0=$SECONDS
budget() { local b=$((T0 + 290 - SECONDS)); ((b > $1)) && b=$1; ((b < 1)) && b=1; echo "$b"; }

echo "== test_shard"
timeout "$(budget 90)" build/tests/test_shard >"$OUT/test_shard.log" 2>&1
echo "   rc=$?"; grep -E "cuda|test_shard:|failed" "$OUT/test_shard.log" | tail -14 | sed 's/^/   /'

get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
llama() { # layers embd heads kv mlp vocab ctx
    python3 bench/models/decode_irgen.py --arch llama --layers "$1" --embd "$2" --heads "$3" --kv-heads "$4" \
        --mlp "$5" --vocab "$6" --ctx "$7" --dtype bf16
}
DEC="B=1,T=1,P=128" PRE="B=1,T=128,P=0"

echo "== 8B-shaped, 4 layers: fusec"
M8=$OUT/llama8b_4.ir
llama 4 4096 32 8 14336 32000 1024 >"$M8" || exit 1
declare -A R
for t in "${degrees[@]}"; do
    for run in decode prefill; do
        b=$DEC; [[ $run == prefill ]] && b=$PRE
        R[$run.$t]=$(timeout "$(budget 90)" build/tp_bench model "$M8" llama_decode "$b" "$t" 20 cuda 2>>"$OUT/tp_bench.err" | tail -1)
        echo "   $run tp=$t: ${R[$run.$t]:-failed (tp_bench.err)}"
    done
done

echo "== 8B-shaped, 4 layers: PyTorch DTensor"
tdeg=1; [[ ${degrees[0]} != 1 ]] && tdeg="1,$(IFS=,; echo "${degrees[*]}")"
TORCH=$(timeout "$(budget 150)" python3 bench/tp_torch.py --degrees "$tdeg" --iters 10 \
    2>"$OUT/tp_torch.err")
echo "   rc=$?"; sed 's/^/   /' <<<"$TORCH"; tail -3 "$OUT/tp_torch.err" | sed 's/^/   | /'
torch_ms() { sed -n "s/^torch_tp run=$1 tp=$2 ms=\([^ ]*\).*/\1/p" <<<"$TORCH"; }

if ((NGPU >= 2)); then
    echo "== 70B-shaped, 2 layers, tp=$TOP against one GPU"
    M70S=$OUT/llama70b_2.ir
    llama 2 8192 64 8 28672 128256 1024 >"$M70S" || exit 1
    R[small70]=$(timeout "$(budget 90)" build/tp_bench model "$M70S" llama_decode "$DEC" "$TOP" 10 cuda 2>>"$OUT/tp_bench.err" | tail -1)
    echo "   ${R[small70]:-failed (tp_bench.err)}"
    echo "== 70B-shaped, 80 layers, tp=$TOP (does not fit one GPU)"
    M70=$OUT/llama70b_80.ir
    llama 80 8192 64 8 28672 128256 1024 >"$M70" || exit 1
    BIG=$(timeout "$(budget 150)" build/tp_bench shards "$M70" llama_decode "$TOP" 10 cuda "$DEC" "$PRE" 2>>"$OUT/tp_bench.err")
    echo "   rc=$?"; sed 's/^/   /' <<<"$BIG"
    nvidia-smi --query-gpu=index,memory.total --format=csv,noheader | sed 's/^/   gpu /'
fi

echo "== all_reduce, 64 MiB bf16 per rank"
for t in "${degrees[@]}"; do
    R[ar.$t]=$(timeout "$(budget 30)" build/tp_bench allreduce 67108864 "$t" 20 cuda 2>>"$OUT/tp_bench.err" | tail -1)
    echo "   tp=$t: ms=$(get ms "${R[ar.$t]}") busbw_GBps=$(get busbw_GBps "${R[ar.$t]}")"
done
if command -v all_reduce_perf >/dev/null && ((NGPU >= 2)); then
    timeout "$(budget 30)" all_reduce_perf -b 64M -e 64M -d bfloat16 -g "$NGPU" >"$OUT/nccl_tests.log" 2>&1
    grep -E "^ +67108864" "$OUT/nccl_tests.log" | sed 's/^/   nccl-tests: /'
fi

# The targets: decode at TP=2 at most 0.6x TP=1's time, prefill throughput
# at least 1.8x, the logits within bf16's error of TP=1's (tp_bench model
# fails a run whose worst difference exceeds 5e-2 of the largest logit).
verdict() { awk -v x="$1" -v op="$2" -v g="$3" 'BEGIN { if (x == "") print "not run"; else if ((op == "<=" && x + 0 <= g + 0) || (op == ">=" && x + 0 >= g + 0)) print "met"; else print "MISSED" }'; }
echo
echo "== tensor parallelism: targets (ms: median, the slowest rank; fusec vs PyTorch DTensor eager, same run)"
printf "%-44s %12s %10s %8s\n" target measured goal "verdict (or torch/fusec)"
for t in "${degrees[@]}"; do
    ((t == 1)) && continue
    d=${R[decode.$t]:-} p=${R[prefill.$t]:-}
    dr=$(awk -v a="$(get tp_ms "$d")" -v b="$(get base_ms "$d")" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b }')
    pr=$(get speedup "$p")
    printf "%-44s %12s %10s %8s\n" "8B-4L decode tp=$t / tp=1 time" "${dr:-}" "<= 0.60" "$(verdict "$dr" "<=" 0.60)"
    printf "%-44s %12s %10s %8s\n" "8B-4L prefill tp=$t / tp=1 throughput" "${pr:-}" ">= 1.80" "$(verdict "$pr" ">=" 1.80)"
    for run in decode prefill; do
        x=${R[$run.$t]:-}
        printf "%-44s %12s %10s %8s\n" "8B-4L $run tp=$t logits vs tp=1" "$(get maxdiff "$x")" "<= 5e-2" \
            "$(verdict "$(get maxdiff "$x")" "<=" 0.05)"
        tm=$(torch_ms "$run" "$t")
        printf "%-44s %12s %10s %8s\n" "8B-4L $run tp=$t fusec ms (torch ms)" "$(get tp_ms "$x") ($tm)" "-" \
            "$(awk -v a="$(get tp_ms "$x")" -v b="$tm" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", b / a }')"
    done
done
for run in decode prefill; do
    printf "%-44s %12s %10s %8s\n" "8B-4L $run tp=1: fusec ms (torch ms)" "$(get base_ms "${R[$run.${degrees[0]}]:-}") ($(torch_ms "$run" 1))" "-" ""
done
if ((NGPU >= 2)); then
    printf "%-44s %12s %10s %8s\n" "70B-2L decode tp=$TOP logits vs tp=1" "$(get maxdiff "${R[small70]:-}")" "<= 5e-2" \
        "$(verdict "$(get maxdiff "${R[small70]:-}")" "<=" 0.05)"
    while read -r line; do
        [[ -n $line ]] || continue
        name=decode; [[ $(get binds "$line") == "$PRE" ]] && name=prefill
        printf "%-44s %12s %10s %8s\n" "70B-80L $name tp=$TOP ms ($(get param_gb_per_rank "$line") GB/rank)" \
            "$(get tp_ms "$line")" "finite" "$([[ $(get finite "$line")$(get ranks_agree "$line") == 11 ]] && echo met || echo MISSED)"
    done <<<"${BIG:-}"
    [[ -n ${BIG:-} ]] || printf "%-44s %12s %10s %8s\n" "70B-80L tp=$TOP" "" "runs" "MISSED"
else
    echo "   (one GPU: the TP=2 targets and the 70B-shaped model need nvidia-h200-x2 or larger)"
fi
echo "== done in $((SECONDS - START)) s"
