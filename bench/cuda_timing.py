"""cuda_timing.py - the time of a workload, as the bench scripts measure
PyTorch's side (import it from a script in bench/)."""
import time


def samples_ms(fn, reps, warmup=3, cuda=True, before=None):
    """Runs fn() warmup times, then reps times; returns each timed call's
    milliseconds: CUDA events around it on the GPU, the wall clock when cuda
    is false. before() (when given) runs ahead of every call, untimed."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    if cuda:
        import torch

        torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if before:
            before()
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def median_ms(fn, reps, warmup=3):
    """The median of samples_ms on the GPU (the upper middle of an even count)."""
    ts = sorted(samples_ms(fn, reps, warmup))
    return ts[len(ts) // 2]
