"""cuda_timing.py - the median time of a workload on the GPU, as the bench
scripts measure PyTorch's side (import it from a script in bench/)."""


def median_ms(fn, reps, warmup=3):
    """Runs fn() warmup times, then reps times each between two CUDA events;
    returns the median in milliseconds (the upper middle of an even count)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
