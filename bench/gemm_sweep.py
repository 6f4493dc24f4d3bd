"""PyTorch's side of bench/gemm_sweep.sh: eager times of y = x @ W for the
sweep's shapes, median of CUDA event timings, on the GPU.

    python3 bench/gemm_sweep.py --form tb|nn --dtype bf16|f16|f32 --tail none|softmax|f32 --reps 30
                                [--budget S] [FORM,]M,N,K ...

form tb: W stored [N, K] and used transposed (the tied LM head, x @ w.t());
form nn: W stored [K, N]; a shape's own FORM, prefix replaces --form. For
every shape it prints one line

    torch FORM M N K <ms> <ms of the next aligned shape (N and K to multiples of 8)>

(once S seconds have passed, "-" for both: no new shape is started)
and at the end the copy bandwidth in the same run ("copy_gbps G"), so the
table can say how far a padded shape's extra copy is from its floor."""
import argparse
import time

import torch

import cuda_timing  # bench/, the script's own folder

DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def timeit(fn, reps, warm=3):
    return cuda_timing.median_ms(fn, reps, warm)


def up(x, a):
    return (x + a - 1) // a * a


TAILS = {"none": lambda y: y, "softmax": lambda y: torch.softmax(y, dim=-1), "f32": lambda y: y.float()}


def gemm_ms(form, dt, M, N, K, reps, tail="none"):
    x = torch.randn(M, K, device="cuda", dtype=torch.float32).to(dt)
    if form == "tb":
        w = (torch.randn(N, K, device="cuda", dtype=torch.float32) * 0.02).to(dt)
        fn = lambda: TAILS[tail](x @ w.t())
    else:
        w = (torch.randn(K, N, device="cuda", dtype=torch.float32) * 0.02).to(dt)
        fn = lambda: TAILS[tail](x @ w)
    ms = timeit(fn, reps)
    del x, w
    torch.cuda.empty_cache()
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--form", default="tb", choices=["tb", "nn"])
    ap.add_argument("--dtype", default="bf16", choices=list(DT))
    ap.add_argument("--tail", default="none", choices=list(TAILS))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds after which no shape is started")
    ap.add_argument("shapes", nargs="+", help="[FORM,]M,N,K")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    dt = DT[a.dtype]
    align = 4 if dt == torch.float32 else 8
    start = time.monotonic()
    for s in a.shapes:
        parts = s.split(",")
        form = parts.pop(0) if len(parts) == 4 else a.form
        M, N, K = (int(v) for v in parts)
        if time.monotonic() - start > a.budget:
            print(f"torch {form} {M} {N} {K} - -", flush=True)
            continue
        t = gemm_ms(form, dt, M, N, K, a.reps, a.tail)
        ta = gemm_ms(form, dt, M, up(N, align), up(K, align), a.reps, a.tail)
        print(f"torch {form} {M} {N} {K} {t:.4f} {ta:.4f}", flush=True)
    src = torch.empty(1 << 28, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = timeit(lambda: dst.copy_(src), a.reps)
    print(f"copy_gbps {2 * src.numel() / ms / 1e6:.0f}", flush=True)


if __name__ == "__main__":
    main()
