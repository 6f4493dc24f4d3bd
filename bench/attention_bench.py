#!/usr/bin/env python3
"""attention_bench.py - issue 8's attention benchmark, PyTorch side and fusec side.

    python3 bench/attention_bench.py [--reps 50] [--warmup 10] [--fusec build/fusec]
                                     [--no-compile] [--json F] [--dims 128,64]

Times, in one run on the GPU machine, for B=8, H=16, S=2048, bf16:

  sdpa       torch.nn.functional.scaled_dot_product_attention (its fastest
             backend: flash or cuDNN), causal and not, at each head dim of
             --dims (D=128 and D=64 unless told)
  eager      the written-out pattern of bench/attention.ir in PyTorch eager
             (matmul, scale, causal where(-inf), softmax in f32, matmul)
  compile    the same under torch.compile (default mode)
  fusec      build/fusec bench/attention.ir --run --device=cuda --bench N,
             when the binary exists (the written-out pattern, which the
             attention pass turns into one kernel); its "time: X ms" line

and prints ms and TFLOP/s (4 B H S^2 D, halved for causal) for each. The
fusec kernel alone, for every shape here, is also timed by
`FUSEC_ATTN_BENCH=1 build/tests/test_attention` (no integration needed),
both the mma.sync kernel and the Hopper one. On an H100/H200 fusec runs the
Hopper kernel (fc_attn_fa3, an sm_90a unit), on other GPUs the mma.sync
kernel (docs/ATTENTION.md).

Timing: CUDA events around each repetition, median of --reps after --warmup.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
B, H, S = 8, 16, 2048


def flops(d, causal):
    return 4.0 * B * H * S * S * d * (0.5 if causal else 1.0)


def time_cuda(torch, fn, reps, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def written_out(torch, q, k, v, causal):
    """bench/attention.ir in PyTorch: the scores in bf16, the softmax in f32."""
    d = q.shape[-1]
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / d ** 0.5)
    if causal:
        keep = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).to(q.dtype)
    return torch.matmul(p, v)


def pattern_ir(d, causal):
    """bench/attention.ir (causal, D=128) rewritten for head dim d, and without
    the mask lines for the non-causal pattern: the same spelling at every shape."""
    with open(os.path.join(HERE, "attention.ir")) as f:
        text = f.read()
    text = text.replace(", 128]", f", {d}]").replace("0.08838834764831845", repr(1.0 / d ** 0.5))
    if not causal:
        lines = [ln for ln in text.splitlines() if not re.match(r"\s*%(qi|kj|keep|sm)\s*=", ln)]
        text = "\n".join(lines).replace("cast(%sm,", "cast(%s,") + "\n"
    return text


def run_fusec(binary, reps, d=128, causal=True):
    ir, temp = os.path.join(HERE, "attention.ir"), None
    if (d, causal) != (128, True):
        import tempfile
        fd, ir = tempfile.mkstemp(suffix=".ir")
        temp = ir
        with os.fdopen(fd, "w") as f:
            f.write(pattern_ir(d, causal))
    try:
        out = subprocess.run([binary, ir, "--run", "--device=cuda", "--bench", str(reps)], capture_output=True,
                             text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    finally:
        if temp:
            os.unlink(temp)
    m = re.search(r"time: ([0-9.]+) ms", out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        return None, (out.stdout + out.stderr).strip()[-400:]
    return float(m.group(1)), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--fusec", default=os.path.join(HERE, "..", "build", "fusec"))
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--dims", default="128,64", help="head dims, comma-separated (eager and compile at 128 only)")
    args = ap.parse_args()
    dims = [int(d) for d in args.dims.split(",") if d]

    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    rows = []
    for d in dims:
        q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for causal in (True, False):
            ms = time_cuda(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), args.reps,
                           args.warmup)
            rows.append(("sdpa", d, causal, ms))
            if d == 128:
                ms = time_cuda(torch, lambda: written_out(torch, q, k, v, causal), args.reps, args.warmup)
                rows.append(("eager", d, causal, ms))
                if not args.no_compile:
                    fn = torch.compile(lambda q, k, v: written_out(torch, q, k, v, causal))
                    ms = time_cuda(torch, lambda: fn(q, k, v), args.reps, args.warmup)
                    rows.append(("compile", d, causal, ms))
        del q, k, v

    # fusec's whole pipeline on the written-out pattern at each shape
    # (bench/attention.ir, rewritten by pattern_ir for the others).
    fusec_ms, err = (None, "not built")
    for d in dims:
        for causal in (True, False):
            if os.path.exists(args.fusec):
                fusec_ms, err = run_fusec(args.fusec, args.reps, d, causal)
            if fusec_ms is not None:
                rows.append(("fusec", d, causal, fusec_ms))

    print(f"attention B={B} H={H} S={S} bf16, {torch.cuda.get_device_name()}")
    print(f"{'who':8} {'D':>4} {'mask':7} {'ms':>9} {'TFLOP/s':>8}")
    for who, d, causal, ms in rows:
        print(f"{who:8} {d:4d} {'causal' if causal else 'full':7} {ms:9.3f} {flops(d, causal) / ms * 1e-9:8.0f}")
    if fusec_ms is None:
        print(f"fusec: {err}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": [dict(who=w, d=d, causal=c, ms=m, tflops=flops(d, c) / m * 1e-9) for w, d, c, m in rows],
                       "fusec_error": err if fusec_ms is None else None}, f, indent=1)


if __name__ == "__main__":
    main()
