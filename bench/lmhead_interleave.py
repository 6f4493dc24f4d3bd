#!/usr/bin/env python3
"""lmhead_interleave.py - can a GEMM with an unaligned N write its compact
result at the aligned speed? A measurement for the LM head (docs/GEMM.md,
"Unaligned shapes"), PyTorch and cuBLAS alone, no fusec.

    python3 bench/lmhead_interleave.py [--m 8192] [--n 50257] [--k 768] [--reps 50]

y = x @ W^T with x [M, K], W [N, K], y [M, N] row-major, bf16. With N odd
(50257) the rows of y start at 2-byte-aligned addresses, so cuBLAS takes a
one-element-at-a-time kernel. fusec today pads N to N_p (50264) and copies
the padded result into the compact one, a third of the time. But every 8th
row of y starts 16-byte aligned after the right column shift: row r starts
at element r * N, and (r * N + c) % 8 == 0 for c = (-r * N) % 8. So the
rows r = j (mod 8) form a matrix with leading dimension 8 N (16-byte
multiple) and an aligned first element at column c_j: y[j::8, c_j : c_j +
N_j] with N_j = (N - c_j) // 8 * 8 is an aligned GEMM of x[j::8] (leading
dimension 8 K) and W[c_j : c_j + N_j] (aligned: K * 2 bytes a row). Eight
such GEMMs write all but at most 14 columns of each row in place; the edge
columns (the first 8 and last 16 of every row) are two small GEMMs whose
results land in y by a strided copy.

Rows:
  torch as-is      y = x @ W^T (cuBLAS on the unaligned output)
  padded + copy    fusec's plan today: x @ W_p^T into [M, N_p], then the
                   compaction copy (both times, and their sum)
  interleaved      the 8 in-place GEMMs plus the edges, into the compact y
  aligned bound    x @ W_p^T alone (the floor the other rows aim at)
Each timed as a CUDA Graph (no launch overhead), median of --reps; the
interleaved result is checked against the padded one (exactly equal: the
same dot products in bf16, fp32 accumulate, except where cuBLAS splits K
differently; the max abs difference is printed).
"""
import argparse
import statistics

import torch


def timed(fn, reps):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--n", type=int, default=50257)
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    M, N, K = a.m, a.n, a.k
    assert M % 8 == 0 and N > 24
    torch.manual_seed(0)
    dt = torch.bfloat16
    x = torch.randn(M, K, device="cuda", dtype=dt)
    W = (torch.randn(N, K, device="cuda", dtype=dt) / K**0.5).contiguous()
    Np = (N + 7) // 8 * 8
    Wp = torch.zeros(Np, K, device="cuda", dtype=dt)
    Wp[:N] = W
    yp = torch.empty(M, Np, device="cuda", dtype=dt)
    y = torch.empty(M, N, device="cuda", dtype=dt)
    y0 = torch.empty(M, N, device="cuda", dtype=dt)
    flat = y.view(-1)
    parts = []
    for j in range(8):
        c = (-j * N) % 8
        nj = (N - c) // 8 * 8
        d = flat[j * N + c:].as_strided((M // 8, nj), (8 * N, 1))
        assert d.data_ptr() % 16 == 0
        parts.append((x[j::8], W[c:c + nj], d))
    left = torch.empty(M, 8, device="cuda", dtype=dt)
    right = torch.empty(M, 16, device="cuda", dtype=dt)

    def as_is():
        torch.mm(x, W.t(), out=y0)

    def padded():
        torch.mm(x, Wp.t(), out=yp)

    def compact():
        y.copy_(yp[:, :N])

    def padded_copy():
        padded()
        compact()

    def interleaved():
        for xa, wa, d in parts:
            torch.mm(xa, wa.t(), out=d)
        torch.mm(x, W[:8].t(), out=left)
        torch.mm(x, W[N - 16:].t(), out=right)
        y[:, :8].copy_(left)
        y[:, N - 16:].copy_(right)

    rows = {}
    rows["torch as-is"] = timed(as_is, a.reps)
    rows["padded gemm"] = timed(padded, a.reps)
    rows["compaction copy"] = timed(compact, a.reps)
    rows["padded + copy"] = timed(padded_copy, a.reps)
    rows["interleaved"] = timed(interleaved, a.reps)
    padded_copy()
    want = y.clone()
    y.zero_()
    interleaved()
    torch.cuda.synchronize()
    diff = (y.float() - want.float()).abs().max().item()
    print(f"M={M} N={N} K={K} bf16, CUDA Graph replay, median of {a.reps}")
    for k, v in rows.items():
        print(f"  {k:16s} {v:8.4f} ms  ({rows['padded gemm'] / v * 100:5.1f}% of the padded GEMM's speed)")
    print(f"  interleaved vs padded + copy: max abs diff {diff:.3g} (bf16 results)")


if __name__ == "__main__":
    main()
