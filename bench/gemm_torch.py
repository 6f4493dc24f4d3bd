"""PyTorch eager and torch.compile times for the GEMM workloads of issue 5
(bench/gemm_*.ir, mlp_gpt2.ir, swiglu.ir), bf16 on the GPU, median of CUDA
event timings. Prints one line per workload and mode."""
import torch
import torch.nn.functional as F

import cuda_timing  # bench/, the script's own folder

torch.manual_seed(0)
dev = "cuda"
bf = torch.bfloat16


def t(*shape, scale=1.0):
    return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(bf)


def timeit(fn, args, reps=30, warm=5):
    return cuda_timing.median_ms(lambda: fn(*args), reps, warm)


def bare(x, w):
    return x @ w


def gelu_epi(x, w, b):
    return F.gelu(x @ w + b, approximate="tanh")


def mlp(x, w1, b1, w2, b2):
    return F.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2 + x


def swiglu(x, wg, wu, wd):
    return (F.silu(x @ wg) * (x @ wu)) @ wd


work = {
    "gemm_bare": (bare, (t(8192, 4096), t(4096, 16384, scale=0.02))),
    "gemm_gelu": (gelu_epi, (t(8192, 4096), t(4096, 16384, scale=0.02), t(16384))),
    "mlp_gpt2": (mlp, (t(8192, 768), t(768, 3072, scale=0.02), t(3072), t(3072, 768, scale=0.02), t(768))),
    "swiglu": (swiglu, (t(8192, 512), t(512, 1408, scale=0.02), t(512, 1408, scale=0.02), t(1408, 512, scale=0.02))),
}
for name, (fn, args) in work.items():
    e = timeit(fn, args)
    c = timeit(torch.compile(fn), args)
    print(f"{name}: eager {e:.4f} ms, torch.compile {c:.4f} ms", flush=True)
