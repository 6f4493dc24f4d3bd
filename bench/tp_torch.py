#!/usr/bin/env python3
"""tp_torch.py - PyTorch tensor parallelism beside bench/tp_bench.c, run by
bench/tp_bench.sh: the Llama-shaped model of bench/models/decode_irgen.py
(the same shapes, bf16, random weights), one process per GPU,
torch.distributed with DTensor's parallelize_module (ColwiseParallel for
q, k, v, gate, up and the LM head; RowwiseParallel for o and down: one
all_reduce per attention block and per MLP, as fusec's sharding), eager.

    python3 bench/tp_torch.py --degrees 1,2 --layers 4 --embd 4096 --heads 32 \
        --kv-heads 8 --mlp 14336 --vocab 32000 --ctx 1024 [--iters 20]

For each degree: one decode step at position 128 (attention over 129
cached positions) and a 128-token prefill at position 0, each the median
of --iters runs timed with CUDA events on rank 0 after a barrier; prints
one line per run:

    torch_tp run=decode tp=2 ms=1.2345
"""

import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def model(a, dev):
    """The layers as nn.Linear modules (bias-free, as Llama's), random."""
    D = a.embd // a.heads
    g = torch.Generator(device="cpu").manual_seed(0)

    def lin(i, o):
        m = torch.nn.Linear(i, o, bias=False, dtype=torch.bfloat16, device="meta").to_empty(device=dev)
        with torch.no_grad():
            m.weight.copy_((torch.rand(o, i, generator=g) * 2 - 1) / i**0.5)
        return m

    layers = torch.nn.ModuleList()
    for _ in range(a.layers):
        layer = torch.nn.Module()
        layer.q, layer.k, layer.v = lin(a.embd, a.embd), lin(a.embd, a.kv_heads * D), lin(a.embd, a.kv_heads * D)
        layer.o = lin(a.embd, a.embd)
        layer.gate, layer.up, layer.down = lin(a.embd, a.mlp), lin(a.embd, a.mlp), lin(a.mlp, a.embd)
        layers.append(layer)
    emb = (torch.rand(a.vocab, a.embd, generator=g) * 0.2 - 0.1).to(dev, torch.bfloat16)
    head = lin(a.embd, a.vocab)
    inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = torch.outer(torch.arange(a.ctx, dtype=torch.float32), inv)
    ang = torch.cat([ang, ang], -1)
    return layers, emb, head, ang.cos().to(dev, torch.bfloat16), ang.sin().to(dev, torch.bfloat16)


def rms(x, eps=1e-5):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def forward(m, caches, ids, pos, D):
    layers, emb, head, cos, sin = m
    B, T = ids.shape
    x = emb[ids]
    c, s = cos[pos:pos + T], sin[pos:pos + T]
    for layer, (kc, vc) in zip(layers, caches):
        h = rms(x)
        q = layer.q(h).view(B, T, -1, D).transpose(1, 2)  # the rank's heads
        k = layer.k(h).view(B, T, -1, D).transpose(1, 2)
        v = layer.v(h).view(B, T, -1, D).transpose(1, 2)
        q, k = rope(q, c, s), rope(k, c, s)
        kc[:, :, pos:pos + T] = k
        vc[:, :, pos:pos + T] = v
        att = F.scaled_dot_product_attention(q, kc[:, :, :pos + T], vc[:, :, :pos + T], is_causal=T > 1,
                                             enable_gqa=True)
        x = x + layer.o(att.transpose(1, 2).reshape(B, T, -1))
        h = rms(x)
        x = x + layer.down(F.silu(layer.gate(h)) * layer.up(h))
    return head(rms(x))


def run(rank, n, a, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29600 + n))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", rank))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    dev = torch.device("cuda", rank)
    m = model(a, dev)
    if n > 1:
        mesh = init_device_mesh("cuda", (n,))
        plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel(),
                "gate": ColwiseParallel(), "up": ColwiseParallel(), "down": RowwiseParallel()}
        for layer in m[0]:
            parallelize_module(layer, mesh, plan)
        # The LM head column-parallel, its logits gathered, as fusec's.
        from torch.distributed.tensor import Replicate
        parallelize_module(m[2], mesh, ColwiseParallel(output_layouts=Replicate()))
    D = a.embd // a.heads
    kvh = a.kv_heads // n if a.kv_heads % n == 0 else a.kv_heads
    caches = [(torch.zeros(1, kvh, a.ctx, D, dtype=torch.bfloat16, device=dev),
               torch.zeros(1, kvh, a.ctx, D, dtype=torch.bfloat16, device=dev)) for _ in range(a.layers)]
    out = {}
    with torch.no_grad():
        for name, T, pos in (("decode", 1, 128), ("prefill", 128, 0)):
            ids = torch.randint(0, a.vocab, (1, T), device=dev, generator=torch.Generator(device=dev).manual_seed(1))
            for _ in range(3):
                forward(m, caches, ids, pos, D)
            ts = []
            for _ in range(a.iters):
                dist.barrier()
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(True), torch.cuda.Event(True)
                s.record()
                forward(m, caches, ids, pos, D)
                e.record()
                e.synchronize()
                ts.append(s.elapsed_time(e))
            out[name] = sorted(ts)[len(ts) // 2]
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--degrees", default="1,2")
    for k, v in (("layers", 4), ("embd", 4096), ("heads", 32), ("kv-heads", 8), ("mlp", 14336), ("vocab", 32000),
                 ("ctx", 1024), ("iters", 20)):
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    ngpu = torch.cuda.device_count()
    for n in [int(d) for d in a.degrees.split(",") if int(d) <= ngpu]:
        q = mp.get_context("spawn").SimpleQueue()
        ctx = mp.start_processes(run, args=(n, a, q), nprocs=n, join=False, start_method="spawn")

        def stop(*_):  # a timeout's SIGTERM ends the ranks too (they hold the GPUs)
            for p in ctx.processes:
                p.kill()
            sys.exit(1)

        signal.signal(signal.SIGTERM, stop)
        try:
            while not ctx.join():
                pass
        except Exception as ex:  # a degree that fails still lets the others run
            print(f"torch_tp tp={n} failed: {ex}", file=sys.stderr)
            continue
        for name, ms in q.get().items():
            print(f"torch_tp run={name} tp={n} ms={ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
