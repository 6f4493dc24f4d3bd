#!/usr/bin/env python3
"""graphs_torch.py - issue 7's CUDA-graph benchmark, PyTorch side.

    python3 bench/graphs_torch.py [--workloads gpt2,mlp8] [--modes eager,reduce-overhead]
                                  [--T 64] [--iters 2000] [--warmup 50]
                                  [--json F] [--dry-run]

Times the per-call (per forward) cost of small models, bf16 on the GPU, to
compare with fusec's CUDA-graph replay:

  gpt2   one GPT-2 small block exactly as examples/gpt2_block_bf16.ir computes
         it: x [1, T, 768], LayerNorm, qkv matmul + bias, 12 heads of 64,
         scores * 0.125, causal where(-inf), softmax in bf16, proj, residual,
         LayerNorm, fc + bias, gelu(tanh), out + bias, residual
  mlp8   an 8-layer MLP on x [32, 256]: y = relu(y @ W_i + b_i), W_i [256, 256]

each in two modes:

  eager            the plain PyTorch function
  reduce-overhead  torch.compile(fn, mode="reduce-overhead") (Inductor kernels
                   replayed as a CUDA graph; torch.compiler.cudagraph_mark_step_begin()
                   is called before each call)

The weights are nn.Module parameters (no grad), so the CUDA graph uses them in
place; only x is an input, called as model(x) under torch.no_grad().

Timing, per workload and mode, after --warmup calls (at least 3, enough for
compilation and graph recording):

  per_call_ms  wall clock (time.perf_counter) around --iters back-to-back calls,
               synchronized before and after, divided by --iters
  gpu_ms       CUDA events recorded around the same loop, divided by --iters
               (about equal to per_call_ms when the GPU is the bottleneck)
  host_us      median of time.perf_counter around the Python call alone, over
               200 calls without synchronizing (the host-side launch cost)

Prints `RESULT torch <workload> <mode> per_call_ms=X gpu_ms=Y host_us=Z` (or
`RESULT torch <workload> <mode> error=MESSAGE`) per result, then a table.
--dry-run parses the arguments, prints the plan and exits without importing torch.
"""

import argparse
import json
import statistics
import sys
import time

WORKLOADS = ("gpt2", "mlp8")
MODES = ("eager", "reduce-overhead", "default")
HOST_CALLS = 200
MLP_M, MLP_N, MLP_LAYERS = 32, 256, 8


def parse_list(text, allowed, what):
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise SystemExit(f"graphs_torch.py: error: --{what} is empty")
    for s in items:
        if s not in allowed:
            raise SystemExit(f"graphs_torch.py: error: unknown {what[:-1]} {s!r}; "
                             f"choose from {','.join(allowed)}")
    return items


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="issue 7: per-call time of small models, "
                                             "torch eager vs torch.compile reduce-overhead")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma list from: " + ",".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma list from: " + ",".join(MODES))
    ap.add_argument("--T", type=int, default=64, help="gpt2 sequence length (default 64)")
    ap.add_argument("--B", type=int, default=1, help="gpt2 batch (default 1)")
    ap.add_argument("--iters", type=int, default=2000, help="timed calls (default 2000)")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up calls (default 50, min 3)")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan and exit without importing torch")
    args = ap.parse_args(argv)
    args.workloads = parse_list(args.workloads, WORKLOADS, "workloads")
    args.modes = parse_list(args.modes, MODES, "modes")
    if args.T < 1:
        ap.error("--T must be >= 1")
    if args.iters < 1:
        ap.error("--iters must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    args.warmup = max(args.warmup, 3)
    return args


def describe(workload, T, B=1):
    if workload == "gpt2":
        return f"GPT-2 small block, x bf16[{B}, {T}, 768], 12 heads of 64, MLP 3072"
    return f"{MLP_LAYERS}-layer MLP relu(y @ W + b), x bf16[{MLP_M}, {MLP_N}], W [{MLP_N}, {MLP_N}]"


# --- workloads -----------------------------------------------------------------

def as_module(torch, named_weights, body):
    """An nn.Module whose forward(x) is body(x, *weights), the weights held as
    parameters (requires_grad=False): torch.compile's CUDA graphs then treat them
    as static addresses instead of copying them into the graph's inputs each call."""
    names = [n for n, _ in named_weights]

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for n, t in named_weights:
                self.register_parameter(n, torch.nn.Parameter(t, requires_grad=False))

        def forward(self, x):
            return body(x, *[getattr(self, n) for n in names])

    return Model().eval()


def make_gpt2(torch, T, B=1):
    """Function and arguments of examples/gpt2_block_bf16.ir."""
    F = torch.nn.functional
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    C, H, D, FF = 768, 12, 64, 3072

    def unif(*shape, scale=0.02):
        return ((torch.rand(*shape, device=dev, generator=g) * 2 - 1) * scale).to(bf)

    def ln_w(n):
        return (1.0 + (torch.rand(n, device=dev, generator=g) * 2 - 1) * 0.05).to(bf)

    x = torch.randn(B, T, C, device=dev, generator=g).to(bf)
    params = [
        ln_w(C), unif(C),            # ln1_w, ln1_b
        unif(C, 3 * C), unif(3 * C),  # attn_w, attn_b
        unif(C, C), unif(C),          # proj_w, proj_b
        ln_w(C), unif(C),            # ln2_w, ln2_b
        unif(C, FF), unif(FF),        # fc_w, fc_b
        unif(FF, C), unif(C),         # out_w, out_b
    ]

    def gpt2_block(x, ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b,
                   ln2_w, ln2_b, fc_w, fc_b, out_w, out_b):
        b, t, c = x.shape
        h = F.layer_norm(x, (c,), ln1_w, ln1_b, eps=1e-5)
        qkv = h @ attn_w + attn_b
        q0, k0, v0 = qkv.split(c, dim=-1)
        q = q0.reshape(b, t, H, D).permute(0, 2, 1, 3)    # [B, 12, T, 64]
        kt = k0.reshape(b, t, H, D).permute(0, 2, 3, 1)   # [B, 12, 64, T]
        v = v0.reshape(b, t, H, D).permute(0, 2, 1, 3)    # [B, 12, T, 64]
        s = (q @ kt) * 0.125                              # [B, 12, T, T]
        i = torch.arange(t, device=x.device)
        keep = i[:, None] >= i[None, :]                   # query i sees key j when i >= j
        sm = s.masked_fill(~keep, float("-inf"))          # where(keep, s, -inf)
        p = torch.softmax(sm, dim=-1)                     # in bf16, like the .ir
        a = (p @ v).permute(0, 2, 1, 3).reshape(b, t, c)
        x1 = x + (a @ proj_w + proj_b)
        h2 = F.layer_norm(x1, (c,), ln2_w, ln2_b, eps=1e-5)
        f = F.gelu(h2 @ fc_w + fc_b, approximate="tanh")
        return x1 + (f @ out_w + out_b)

    names = ["ln1_w", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b",
             "ln2_w", "ln2_b", "fc_w", "fc_b", "out_w", "out_b"]
    return as_module(torch, list(zip(names, params)), gpt2_block), [x]


def make_mlp8(torch):
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    x = torch.randn(MLP_M, MLP_N, device=dev, generator=g).to(bf)
    params = []
    for _ in range(MLP_LAYERS):
        # uniform(+-sqrt(3/n)), variance 1/n: keeps the activations O(1) through 8 layers
        w = ((torch.rand(MLP_N, MLP_N, device=dev, generator=g) * 2 - 1) * (3.0 / MLP_N) ** 0.5).to(bf)
        bias = ((torch.rand(MLP_N, device=dev, generator=g) * 2 - 1) * 0.02).to(bf)
        params += [w, bias]

    def mlp8(x, *wb):
        y = x
        for j in range(0, len(wb), 2):
            y = torch.relu(y @ wb[j] + wb[j + 1])
        return y

    names = [f"{k}{j}" for j in range(MLP_LAYERS) for k in ("w", "b")]
    return as_module(torch, list(zip(names, params)), mlp8), [x]


# --- timing --------------------------------------------------------------------

def measure(torch, fn, fargs, mode, iters, warmup):
    if mode == "default":
        call = torch.compile(fn)
    elif mode == "reduce-overhead":
        compiled = torch.compile(fn, mode="reduce-overhead")
        mark = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
        if mark is not None:
            def call(*a):
                mark()
                return compiled(*a)
        else:
            call = compiled
    else:
        call = fn

    with torch.no_grad():
        out = None
        for _ in range(warmup):
            out = call(*fargs)
        torch.cuda.synchronize()
        if out is None or not torch.isfinite(out.float()).all().item():
            raise RuntimeError("output is not finite after warm-up")
        del out

        # wall clock and CUDA events around the same loop
        ev0 = torch.cuda.Event(enable_timing=True)
        ev1 = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ev0.record()
        for _ in range(iters):
            out = call(*fargs)
        ev1.record()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        del out
        per_call_ms = (t1 - t0) / iters * 1e3
        gpu_ms = ev0.elapsed_time(ev1) / iters

        # host side: the Python call alone, no synchronization
        torch.cuda.synchronize()
        host = []
        for _ in range(HOST_CALLS):
            a = time.perf_counter()
            out = call(*fargs)
            host.append(time.perf_counter() - a)
        torch.cuda.synchronize()
        del out
        host_us = statistics.median(host) * 1e6

    return {"per_call_ms": per_call_ms, "gpu_ms": gpu_ms, "host_us": host_us}


def one_line(e):
    msg = f"{type(e).__name__}: {e}"
    msg = " ".join(msg.split())
    return msg[:400] + ("..." if len(msg) > 400 else "")


def main(argv=None):
    args = parse_args(argv)

    print(f"graphs_torch: workloads={','.join(args.workloads)} modes={','.join(args.modes)} "
          f"B={args.B} T={args.T} iters={args.iters} warmup={args.warmup} host_calls={HOST_CALLS}")
    if args.dry_run:
        print("dry run; would run:")
        for w in args.workloads:
            for m in args.modes:
                print(f"  torch {w:5} {m:16} {describe(w, args.T, args.B)}")
        if args.json:
            print(f"  and write JSON to {args.json}")
        return 0

    try:
        import torch
    except ImportError as e:
        print(f"graphs_torch.py: error: cannot import torch ({e})", file=sys.stderr)
        return 1
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    if not torch.cuda.is_available():
        print("graphs_torch.py: error: torch.cuda.is_available() is False (no GPU or a CPU-only torch)",
              file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name(0)
    print(f"GPU: {gpu}")
    sys.stdout.flush()

    results = []
    for w in args.workloads:
        for m in args.modes:
            rec = {"workload": w, "mode": m}
            try:
                fn, fargs = make_gpt2(torch, args.T, args.B) if w == "gpt2" else make_mlp8(torch)
                rec.update(measure(torch, fn, fargs, m, args.iters, args.warmup))
                print(f"RESULT torch {w} {m} per_call_ms={rec['per_call_ms']:.5f} "
                      f"gpu_ms={rec['gpu_ms']:.5f} host_us={rec['host_us']:.2f}")
            except Exception as e:  # noqa: BLE001 - one mode failing must not stop the rest
                rec["error"] = one_line(e)
                print(f"RESULT torch {w} {m} error={rec['error']}")
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001
                    pass
            results.append(rec)
            sys.stdout.flush()

    print()
    print(f"{'workload':8} {'mode':16} {'per_call_ms':>12} {'gpu_ms':>10} {'host_us':>9}")
    for r in results:
        if "error" in r:
            print(f"{r['workload']:8} {r['mode']:16} error: {r['error'][:80]}")
        else:
            print(f"{r['workload']:8} {r['mode']:16} {r['per_call_ms']:12.4f} "
                  f"{r['gpu_ms']:10.4f} {r['host_us']:9.1f}")

    if args.json:
        doc = {"torch_version": torch.__version__, "cuda": torch.version.cuda, "gpu": gpu,
               "T": args.T, "iters": args.iters, "warmup": args.warmup,
               "host_calls": HOST_CALLS, "results": results}
        try:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=2)
            print(f"wrote {args.json}")
        except OSError as e:
            print(f"graphs_torch.py: error: cannot write {args.json}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
