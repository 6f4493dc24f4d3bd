#!/usr/bin/env bash
# tp_bench.sh - tensor parallelism on the GPUs of this host (docs/PARALLEL.md):
# a Llama-shaped model (bench/models/decode_irgen.py: 4 layers of Llama-3-8B's
# shape, bf16, 32 heads, 8 key/value heads) decoding one token and prefilling
# 128, at TP 1/2/4/8 as far as the GPUs go, each against the unsharded
# program on one GPU (speedup, worst difference of the logits); then one
# bf16 all_reduce's bandwidth at each degree, beside torch.distributed's
# NCCL all_reduce (and nccl-tests' all_reduce_perf when it is on PATH).
# On a one-GPU machine it runs TP=1 through NCCL end to end: the sharded
# program with its collectives over one rank equals the plain one.
#
#   bash bench/tp_bench.sh        (from the repository root; OUT=dir for the logs)
#
# About 150 s of build, then about 120 s on one GPU and 250 s on eight.
set -uo pipefail
source bench/bench_env.sh
source bench/onnx-gpu-build.sh
onnx_gpu_build tp_bench test_shard || exit 1
# NCCL: the system's, or PyTorch's wheel's (dlopen finds it on the path).
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[[ -n $NCCL_DIR ]] && export LD_LIBRARY_PATH=$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "== $NGPU GPU(s); NCCL from ${NCCL_DIR:-the system}"

echo "== test_shard (golden sharding, TP=2/4 = TP=1 on ref and CPU, CUDA at every degree the GPUs allow)"
timeout 120 build/tests/test_shard >"$OUT/test_shard.log" 2>&1; echo "   rc=$?"; grep -E "cuda|test_shard:" "$OUT/test_shard.log" | tail -12

MODEL=$OUT/llama4.ir
python3 bench/models/decode_irgen.py --arch llama --layers 4 --embd 4096 --heads 32 --kv-heads 8 --mlp 14336 \
    --vocab 32000 --ctx 1024 --dtype bf16 >"$MODEL" || exit 1
degrees=(1)
for t in 2 4 8; do ((t <= NGPU)) && degrees+=("$t"); done
rows=()
for t in "${degrees[@]}"; do
    for run in "decode B=1,T=1,P=128" "prefill B=1,T=128,P=0"; do
        set -- $run
        line=$(timeout 200 build/tp_bench model "$MODEL" llama_decode "$2" "$t" 20 cuda 2>>"$OUT/tp_bench.err" | tail -1)
        echo "   $1 tp=$t: ${line:-failed (see tp_bench.err)}"
        rows+=("$1|$t|$line")
    done
done
ar=()
for t in "${degrees[@]}"; do
    line=$(timeout 60 build/tp_bench allreduce 67108864 "$t" 20 cuda 2>>"$OUT/tp_bench.err" | tail -1)
    ar+=("$t|$line")
done
torch_ar=""
if ((NGPU >= 2)); then
    torch_ar=$(timeout 90 python3 - "$NGPU" <<'PY' 2>>"$OUT/torch_ar.err"
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
def run(rank, n, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("nccl", rank=rank, world_size=n)
    torch.cuda.set_device(rank)
    x = torch.zeros(64 << 19, dtype=torch.bfloat16, device="cuda")
    for _ in range(5): dist.all_reduce(x)
    torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True); ts = []
    for _ in range(20):
        s.record(); dist.all_reduce(x); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    if rank == 0: q.put(sorted(ts)[10])
    dist.destroy_process_group()
if __name__ == "__main__":
    for n in [k for k in (2, 4, 8) if k <= int(sys.argv[1])]:
        q = mp.get_context("spawn").SimpleQueue()
        mp.spawn(run, args=(n, q), nprocs=n)
        ms = q.get(); alg = (64 << 20) / (ms * 1e-3) / 1e9
        print(f"torch tp={n} ms={ms:.4f} busbw_GBps={alg * 2 * (n - 1) / n:.1f}")
PY
)
fi
if command -v all_reduce_perf >/dev/null && ((NGPU >= 2)); then
    timeout 60 all_reduce_perf -b 64M -e 64M -d bfloat16 -g "$NGPU" >"$OUT/nccl_tests.log" 2>&1
fi

echo
echo "== tensor parallelism: Llama-shaped, 4 layers of 8B's shape, bf16 (ms: median of 20, the slowest rank)"
printf "%-8s %3s %10s %10s %8s %10s\n" run tp base_ms tp_ms speedup maxdiff
for r in "${rows[@]}"; do
    IFS='|' read -r name t line <<<"$r"
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
    printf "%-8s %3s %10s %10s %8s %10s\n" "$name" "$t" "$(get base_ms)" "$(get tp_ms)" "$(get speedup)" "$(get maxdiff)"
done
echo "== all_reduce, 64 MiB bf16 per rank (busbw as nccl-tests)"
for r in "${ar[@]}"; do
    IFS='|' read -r t line <<<"$r"
    echo "   fusec tp=$t: $(sed -n 's/.* ms=\([^ ]*\) algbw_GBps=\([^ ]*\) busbw_GBps=\([^ ]*\).*/\1 ms, algbw \2 GB\/s, busbw \3 GB\/s/p' <<<"$line")"
done
[[ -n $torch_ar ]] && sed 's/^/   /' <<<"$torch_ar"
[[ -f $OUT/nccl_tests.log ]] && grep -E "^ +67108864" "$OUT/nccl_tests.log" | sed 's/^/   nccl-tests: /'
echo "== done in $((SECONDS - START)) s"
