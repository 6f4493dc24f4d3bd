#!/usr/bin/env python3
"""conv_bench.py - convolutional networks: fusec against PyTorch eager and
torch.compile, bf16, 224x224, on the GPU.

    python3 bench/conv_bench.py --fusec build/fusec [--models resnet50:32,resnet50:1,...]
        [--modes eager,compile,max-autotune,reduce-overhead] [--reps N] [--out DIR]

Per model (torchvision, random init, eval mode) and batch size:
  - the f32 model on the GPU is the reference (TF32 off);
  - torch eager and torch.compile (each --mode) run the bf16 model in
    channels_last memory format, timed with CUDA events (median of --reps
    after warm-up);
  - fusec imports the f32 model exported by torch.onnx.export (opset 17,
    constant folding, which folds each BatchNorm into its Conv in eval mode)
    and runs it with --precision=bf16 (`fusec M.onnx --run --device=cuda
    --precision=bf16 --inputs x.npy --bench N --time`): its time, its
    compile time (cold: an empty cache; warm: a second process on the same
    cache, which must not search algorithms again), its kernels and library
    calls, and its output against the f32 reference;
  - numerics: relative L2 error of each output against the f32 reference
    (fusec's must stay within torch bf16 eager's).
Rows go to stdout as a table and to DIR/conv_bench.json.
"""
import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cuda_timing  # bench/, the script's own folder

RE_TIME = re.compile(r"^time: ([0-9.]+) ms median of", re.M)
# --time's first line: "to the first run" after --run, "to a compiled
# program" without one; then one line per phase ("  nvrtc  12.3 ms")
RE_COMPILED = re.compile(r"^time: ([0-9.]+) ms to (?:the first run|a compiled program) \(([^)]*)\)", re.M)
RE_PHASE = re.compile(r"^  (parse|passes|codegen|nvrtc|cache|other|device|load) +([0-9.]+) ms", re.M)
RE_CACHE = re.compile(r"^(gemm algorithms|compiles): +(\d+)", re.M)
RE_TOTAL = re.compile(r"^total: (\d+) kernels, (\d+) library calls", re.M)
# the plan's "convolutions:" line: which path each 2-D convolution took
RE_CONVS = re.compile(r"of (\d+) 2-D convolutions: (\d+) through cuDNN, (\d+) depthwise \(elementwise\), (\d+) im2col")
RE_KERNEL = re.compile(r"^launch \d+: kernel .*$", re.M)

p = argparse.ArgumentParser()
p.add_argument("--fusec", default="build/fusec")
p.add_argument("--models", default="resnet50:32,resnet50:1,mobilenet_v3_large:32,efficientnet_b0:32")
p.add_argument("--modes", default="eager,compile,reduce-overhead")
p.add_argument("--reps", type=int, default=50)
p.add_argument("--out", default="out")
p.add_argument("--timeout", type=int, default=300, help="seconds per fusec command")
p.add_argument("--budget", type=int, default=0, help="seconds: models after this are skipped (0: no limit)")
p.add_argument("--profile", action="store_true", help="also write fusec's --profile table per model to DIR/profile_MODEL_B.txt")
ARGS = p.parse_args()


def log(*a):
    print(*a, flush=True)


def sh(cmd, env=None, timeout=None):
    t0 = time.monotonic()
    try:
        r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True,
                           timeout=timeout or ARGS.timeout)
        return r.returncode, r.stdout, r.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return 124, "", "timed out", time.monotonic() - t0


def last_err(err):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def rel_l2(torch, y, ref):
    y, ref = y.float().flatten().cpu(), ref.float().flatten().cpu()
    return float(torch.linalg.vector_norm(y - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def time_torch(torch, fn, x, reps):
    return cuda_timing.median_ms(lambda: fn(x), reps)


def save_npy(np, t, path):
    np.save(path, t.detach().float().cpu().numpy())


def fusec_env(cache):
    env = dict(os.environ)
    env["FUSEC_CACHE_DIR"] = str(cache)
    return env


def cache_counts(env):
    """The cache's algorithm records (GEMM algorithms and cuDNN plans) and
    its NVRTC compile count: a process that searched nothing adds neither."""
    rc, out, err, _ = sh([ARGS.fusec, "--cache-info"], env)
    return {k: int(v) for k, v in RE_CACHE.findall(out)}


def run_fusec(torch, np, onnx_path, x_npy, ref, work, row):
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = fusec_env(cache)
    base = [ARGS.fusec, onnx_path, "--precision=bf16"]
    rc, out, err, _ = sh(base + ["--emit=plan"], env)
    m = RE_TOTAL.search(out)
    if not m:
        row["fusec_error"] = "plan: " + last_err(err)
        return
    (Path(ARGS.out) / f"plan_{row['model']}_{row['B']}.txt").write_text(out)
    row["kernels"], row["library_calls"] = int(m.group(1)), int(m.group(2))
    row["kernels_per_run"] = sum("(at weight load)" not in ln for ln in RE_KERNEL.findall(out))
    m = RE_CONVS.search(out)
    if m:
        row["convs"], row["convs_cudnn"], row["convs_depthwise"], row["convs_im2col"] = map(int, m.groups())
    shutil.rmtree(cache, ignore_errors=True)
    run = base + ["--run", "--device=cuda", "--inputs", x_npy]
    # cold: an empty cache; warm: a second process on the cache it left
    # compile = parse .. other (fc_compile); first run = that plus the
    # device, the module and library handles and the cuDNN plans (load)
    for key in ("cold", "warm"):
        rc, out, err, wall = sh(run + ["--bench", str(ARGS.reps), "--time"], env)
        t, c = RE_TIME.search(out), RE_COMPILED.search(err)
        if rc != 0 or not t:
            row["fusec_error"] = f"{key} run rc={rc}: " + last_err(err)
            return
        row["fusec_ms" if key == "cold" else "fusec_ms_warm"] = float(t.group(1))
        if c:
            phases = {k: float(v) for k, v in RE_PHASE.findall(err)}
            row[f"first_run_ms_{key}"] = float(c.group(1))
            row[f"compile_ms_{key}"] = float(c.group(1)) - phases.get("device", 0) - phases.get("load", 0)
            row[f"nvrtc_ms_{key}"] = phases.get("nvrtc", 0)
            row[f"load_ms_{key}"] = phases.get("load", 0)
            row[f"compile_note_{key}"] = c.group(2)[:120]
        counts = cache_counts(env)
        if key == "cold":
            cold_counts = counts
        else:
            # what the second process added: 0 and 0 when it searched nothing
            row["warm_new_algorithms"] = counts.get("gemm algorithms", 0) - cold_counts.get("gemm algorithms", 0)
            row["warm_nvrtc_compiles"] = counts.get("compiles", 0) - cold_counts.get("compiles", 0)
    if ARGS.profile:
        rc, out, err, _ = sh(run + ["--profile", "--profile-runs", "10"], env)
        (Path(ARGS.out) / f"profile_{row['model']}_{row['B']}.txt").write_text(out + err)
    save = work / "outs"
    shutil.rmtree(save, ignore_errors=True)
    rc, out, err, _ = sh(run + ["--save-outputs", save], env)
    if rc == 0 and (save / "out0.npy").exists():
        y = torch.from_numpy(np.load(save / "out0.npy"))
        row["fusec_rel_l2"] = rel_l2(torch, y, ref)
    else:
        row["fusec_save_error"] = f"rc={rc}: " + last_err(err)


def bench_model(torch, torchvision, np, name, B, work):
    row = {"model": name, "B": B}
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(B, 3, 224, 224)
    dev = torch.device("cuda")
    m32 = copy.deepcopy(model).to(dev)
    with torch.no_grad():
        ref = m32(x.to(dev)).float().cpu()
    del m32
    mb = copy.deepcopy(model).to(dev, torch.bfloat16).to(memory_format=torch.channels_last)
    xb = x.to(dev, torch.bfloat16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        for mode in ARGS.modes.split(","):
            if mode == "reduce-overhead" and B != 1:
                continue
            if mode == "compile" and B == 1 and "reduce-overhead" in ARGS.modes.split(","):
                continue  # B=1 is compared with reduce-overhead
            try:
                t0 = time.monotonic()
                fn = mb if mode == "eager" else torch.compile(mb, mode=None if mode == "compile" else mode)
                # compiles; a clone, since the CUDA-graph modes (reduce-overhead,
                # max-autotune) overwrite their output at the next replay
                y = fn(xb).clone()
                torch.cuda.synchronize()
                row[f"{mode}_first_s"] = round(time.monotonic() - t0, 1)
                row[f"{mode}_ms"] = time_torch(torch, fn, xb, ARGS.reps)
                row[f"{mode}_rel_l2"] = rel_l2(torch, y, ref)
                log(f"   {name} B={B} torch {mode}: {row[f'{mode}_ms']:.3f} ms, rel L2 {row[f'{mode}_rel_l2']:.3g}")
            except Exception as e:  # a mode that fails is a row entry, not the end of the run
                row[f"{mode}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
                log(f"   {name} B={B} torch {mode}: {row[f'{mode}_error']}")
            torch._dynamo.reset()
    del mb, xb
    torch.cuda.empty_cache()
    onnx_path = work / f"{name}_b{B}.onnx"
    t0 = time.monotonic()
    # the TorchScript exporter first (it folds BatchNorm into Conv in eval
    # mode), then the dynamo one (opset 18; fusec folds the norms itself)
    errors = []
    for kw in (dict(opset_version=17, do_constant_folding=True, dynamo=False), dict(opset_version=18, dynamo=True)):
        try:
            torch.onnx.export(model, (x,), str(onnx_path), input_names=["x"], output_names=["y"], **kw)
            row["exporter"] = "dynamo" if kw["dynamo"] else "torchscript"
            break
        except Exception as e:
            errors.append(f"{type(e).__name__}: {str(e)[:160]}")
    else:
        row["export_error"] = " / ".join(errors)
        log(f"   {name} B={B} export: {row['export_error']}")
        return row
    row["export_s"] = round(time.monotonic() - t0, 1)
    x_npy = work / f"x_b{B}.npy"
    save_npy(np, x, x_npy)
    run_fusec(torch, np, onnx_path, x_npy, ref, work, row)
    if "fusec_ms" in row:
        log(f"   {name} B={B} fusec: {row['fusec_ms']:.3f} ms (warm process {row.get('fusec_ms_warm', 0):.3f}), "
            f"compile cold {row.get('compile_ms_cold', 0):.0f} ms (nvrtc {row.get('nvrtc_ms_cold', 0):.0f}) / "
            f"warm {row.get('compile_ms_warm', 0):.0f} ms, load+plans cold {row.get('load_ms_cold', 0):.0f} / "
            f"warm {row.get('load_ms_warm', 0):.0f} ms, the warm process added {row.get('warm_new_algorithms')} "
            f"algorithm records and {row.get('warm_nvrtc_compiles')} NVRTC compiles, "
            f"{row.get('kernels')} kernels ({row.get('kernels_per_run')} per run, the rest at weight load) + "
            f"{row.get('library_calls')} library calls; convolutions: {row.get('convs_cudnn')} cuDNN, "
            f"{row.get('convs_im2col')} im2col, {row.get('convs_depthwise')} depthwise of {row.get('convs')}, "
            f"rel L2 {row.get('fusec_rel_l2', float('nan')):.3g}")
    else:
        log(f"   {name} B={B} fusec: {row.get('fusec_error')}")
    onnx_path.unlink(missing_ok=True)
    return row


def main():
    import numpy as np
    import torch
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="conv_bench_"))
    rows = []
    t_start = time.monotonic()
    for spec in ARGS.models.split(","):
        name, B = spec.split(":")
        if ARGS.budget and time.monotonic() - t_start > ARGS.budget:
            log(f"== {name} B={B}: skipped (past the {ARGS.budget} s budget)")
            continue
        log(f"== {name} B={B}")
        try:
            rows.append(bench_model(torch, torchvision, np, name, int(B), work))
        except Exception as e:
            rows.append({"model": name, "B": int(B), "error": f"{type(e).__name__}: {str(e)[:300]}"})
            log(f"   {rows[-1]['error']}")
        (out / "conv_bench.json").write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    modes = [m for m in ARGS.modes.split(",")]
    head = ["model", "B"] + [f"{m} ms" for m in modes] + ["fusec ms", "torch/fusec", "compile cold/warm ms",
                                                          "first run cold/warm ms", "warm: new records, nvrtc",
                                                          "kernels+lib", "convs cuDNN/im2col/dw",
                                                          ] + [f"rel L2 {m}" for m in modes] + ["rel L2 fusec"]
    log("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        f = r.get("fusec_ms")
        c = (r.get("reduce-overhead_ms") if r["B"] == 1 else None) or r.get("compile_ms")
        cells = [r["model"], str(r["B"])] + [f"{r[m + '_ms']:.3f}" if m + "_ms" in r else "-" for m in modes]
        cells += [f"{f:.3f}" if f else r.get("fusec_error", r.get("error", "-"))[:60],
                  f"{c / f:.2f}x" if f and c else "-",
                  f"{r.get('compile_ms_cold', 0):.0f}/{r.get('compile_ms_warm', 0):.0f}",
                  f"{r.get('first_run_ms_cold', 0):.0f}/{r.get('first_run_ms_warm', 0):.0f}",
                  f"{r.get('warm_new_algorithms', '-')}, {r.get('warm_nvrtc_compiles', '-')}",
                  f"{r.get('kernels', '-')} ({r.get('kernels_per_run', '-')} per run)+{r.get('library_calls', '-')}",
                  f"{r.get('convs_cudnn', '-')}/{r.get('convs_im2col', '-')}/{r.get('convs_depthwise', '-')}",
                  ] + [f"{r[m + '_rel_l2']:.3g}" if m + "_rel_l2" in r else "-" for m in modes + ["fusec"]]
        log("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
