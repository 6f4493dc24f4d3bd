#!/usr/bin/env python3
"""autocast_numerics.py - fusec --precision=bf16|f16 against torch.autocast,
both against float64, on the same f32 graphs and the same data, in one run.

For each graph (an f32 MLP, a GPT-2 block, a Llama block, all .ir files in
the tree) it makes one set of inputs (weights scaled by 1/sqrt(fan-in), as a
model's are), runs

  - fusec FILE --run --precision=P --save-outputs (the autocast pass), and
    fusec FILE --run as written (f32: checks that the torch code below is
    the same graph, to f32's rounding);
  - the same graph written in PyTorch, in float64 (the oracle), in float32,
    and in float32 under torch.autocast(device_type="cuda", dtype=P);

and prints the relative L2 error ||y - y64|| / ||y64|| of each, with the
ratio fusec / torch.autocast (at most about 1: fusec within autocast's own
error). Needs a GPU, torch and numpy; run from the source root:

  python3 bench/autocast_numerics.py [--fusec build/fusec] [--small]
                                     [--device cuda] [--precision bf16,f16]

Without torch (a machine without it), the oracle is fusec's reference
interpreter (--device=ref, float64) and the torch columns are empty; with
--device cpu --small this runs anywhere, as a check of the script itself.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the fusec columns still work
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------
# The graphs, as the .ir files write them.
# ---------------------------------------------------------------------------


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def t_mlp(p):
    h = gelu_tanh(p["x"] @ p["w1"] + p["b1"])
    return p["x"] + (h @ p["w2"] + p["b2"])


def t_gpt2_block(p):
    x = p["x"]
    B, T, C = x.shape
    H, D = 12, 64

    def ln(v, w, b):
        return F.layer_norm(v, (C,), w, b, eps=1e-5)

    h = ln(x, p["ln1_w"], p["ln1_b"])
    qkv = h @ p["attn_w"] + p["attn_b"]
    q, k, v = qkv.split(C, dim=-1)
    q = q.reshape(B, T, H, D).permute(0, 2, 1, 3)
    kt = k.reshape(B, T, H, D).permute(0, 2, 3, 1)
    v = v.reshape(B, T, H, D).permute(0, 2, 1, 3)
    s = (q @ kt) * 0.125
    keep = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    s = s.masked_fill(~keep, float("-inf"))
    a = torch.softmax(s, dim=-1) @ v
    a = a.permute(0, 2, 1, 3).reshape(B, T, C)
    x1 = x + (a @ p["proj_w"] + p["proj_b"])
    h2 = ln(x1, p["ln2_w"], p["ln2_b"])
    m = gelu_tanh(h2 @ p["fc_w"] + p["fc_b"]) @ p["out_w"] + p["out_b"]
    return x1 + m


def t_llama_block(p):
    x = p["x"]
    B, T, C = x.shape
    H, D = 8, 64

    def rms(v, w):
        return v * torch.rsqrt((v * v).mean(-1, keepdim=True) + 1e-5) * w

    def heads(v):
        return v.reshape(B, T, H, D).permute(0, 2, 1, 3)

    def rope(v):
        rot = torch.cat([-v[..., 32:], v[..., :32]], dim=-1)
        return v * p["cos"] + rot * p["sin"]

    h = rms(x, p["attn_norm_w"])
    q, k, v = heads(h @ p["wq"]), heads(h @ p["wk"]), heads(h @ p["wv"])
    a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
    x1 = x + a.permute(0, 2, 1, 3).reshape(B, T, C) @ p["wo"]
    h2 = rms(x1, p["ffn_norm_w"])
    return x1 + (F.silu(h2 @ p["w_gate"]) * (h2 @ p["w_up"])) @ p["w_down"]


GRAPHS = [
    # name, file, torch function, binds (large), binds (--small)
    ("MLP 768-3072", "bench/mlp_f32.ir", t_mlp, "B=4096", "B=64"),
    ("GPT-2 block", "examples/gpt2_block.ir", t_gpt2_block, "B=4,T=512", "B=1,T=32"),
    ("Llama block", "bench/llama_block_f32.ir", t_llama_block, "B=4,T=512", "B=1,T=32"),
]

# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def params_of(fusec, path, binds):
    """[(name, shape)] of the graph's parameters, from its canonical print."""
    out = subprocess.run([fusec, path, "--bind", binds, "--emit=ir"], check=True, capture_output=True, text=True).stdout
    head = out[: out.index("{")]
    ps = []
    for name, dt, dims in re.findall(r"%(\w+): (\w+)\[([^\]]*)\]", head):
        if dt != "f32":
            sys.exit(f"{path}: parameter %{name} is {dt}; these graphs are f32")
        ps.append((name, tuple(int(d) for d in dims.split(",")) if dims.strip() else ()))
    return ps


def make_inputs(ps, seed):
    """Order-one data: activations uniform [-1, 1); matrices scaled by
    1/sqrt(fan-in); norm weights near 1; biases small; the rotary tables
    real cos/sin."""
    rng = np.random.default_rng(seed)
    data = {}
    for name, shape in ps:
        u = rng.uniform(-1.0, 1.0, size=shape)
        if name in ("cos", "sin"):
            T, D = shape
            inv = 1.0 / (10000.0 ** (np.arange(0, D, 2) / D))
            ang = np.outer(np.arange(T), inv)
            ang = np.concatenate([ang, ang], axis=-1)
            v = np.cos(ang) if name == "cos" else np.sin(ang)
        elif len(shape) == 2:
            v = u * math.sqrt(3.0 / shape[0])  # variance 1/fan-in
        elif name.endswith("norm_w") or re.match(r"ln\d_w", name):
            v = 1.0 + 0.1 * u
        elif len(shape) == 1:
            v = 0.1 * u
        else:
            v = u
        data[name] = v.astype(np.float32)
    return data


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def run_fusec(fusec, path, binds, ps, files, device, precision, outdir):
    cmd = [fusec, path, "--bind", binds, "--run", f"--device={device}",
           "--inputs", ",".join(files[n] for n, _ in ps), "--save-outputs", outdir]
    if precision:
        cmd.append(f"--precision={precision}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nfailed ({r.returncode}):\n{r.stderr}")
    return np.load(os.path.join(outdir, "out0.npy")).astype(np.float64)


def run_torch(fn, data, dtype, autocast_dtype, device):
    p = {k: torch.from_numpy(v).to(device=device, dtype=dtype) for k, v in data.items()}
    with torch.no_grad():
        if autocast_dtype is None:
            y = fn(p)
        else:
            with torch.autocast(device_type=device, dtype=autocast_dtype):
                y = fn(p)
    return y.double().cpu().numpy()


def rel_l2(y, ref):
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fusec", default=os.path.join(ROOT, "build", "fusec"))
    ap.add_argument("--device", default="cuda", help="fusec's device (cuda; cpu to check the script)")
    ap.add_argument("--precision", default="bf16,f16")
    ap.add_argument("--small", action="store_true", help="small sizes (a quick run)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    tdev = "cuda" if torch is not None and torch.cuda.is_available() else None
    if torch is not None and tdev is None:
        print("torch has no CUDA device: the torch columns are empty", file=sys.stderr)
    precisions = [p for p in a.precision.split(",") if p]
    tdt = {"bf16": getattr(torch, "bfloat16", None), "f16": getattr(torch, "float16", None)}

    rows = []
    with tempfile.TemporaryDirectory(prefix="autocast-numerics-") as tmp:
        for gi, (name, rel, fn, big, small) in enumerate(GRAPHS):
            path = os.path.join(ROOT, rel)
            binds = small if a.small else big
            ps = params_of(a.fusec, path, binds)
            data = make_inputs(ps, a.seed + gi)
            files = {}
            for n, _ in ps:
                files[n] = os.path.join(tmp, f"g{gi}_{n}.npy")
                np.save(files[n], data[n])
            d = os.path.join(tmp, f"g{gi}")
            if tdev:
                ref = run_torch(fn, data, torch.float64, None, tdev)
                t32 = rel_l2(run_torch(fn, data, torch.float32, None, tdev), ref)
            else:
                ref = run_fusec(a.fusec, path, binds, ps, files, "ref", None, d + "_ref")
                t32 = None
            f32 = rel_l2(run_fusec(a.fusec, path, binds, ps, files, a.device, None, d + "_f32"), ref)
            for p in precisions:
                fe = rel_l2(run_fusec(a.fusec, path, binds, ps, files, a.device, p, d + "_" + p), ref)
                te = rel_l2(run_torch(fn, data, torch.float32, tdt[p], tdev), ref) if tdev else None
                rows.append((name, binds, p, fe, te, f32, t32))

    def f(x):
        return "-" if x is None else f"{x:.3e}"

    print(f"fusec {a.fusec} on {a.device}; oracle: {'torch float64' if tdev else 'fusec --device=ref (float64)'}")
    print("relative L2 error against float64, same inputs")
    hdr = ("graph", "binds", "P", "fusec --precision=P", "torch.autocast(P)", "fusec/torch", "fusec f32", "torch f32")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    worst = 0.0
    for name, binds, p, fe, te, f32, t32 in rows:
        ratio = fe / te if te else None
        if ratio is not None:
            worst = max(worst, ratio)
        print(f"| {name} | {binds} | {p} | {f(fe)} | {f(te)} | {'-' if ratio is None else f'{ratio:.2f}'} | "
              f"{f(f32)} | {f(t32)} |")
    if tdev:
        print(f"worst fusec/torch.autocast ratio: {worst:.2f} (at most about 1: within autocast's own error)")
        # The f32 columns check that the torch code is the graph: both near f32 rounding.
        bad = [r for r in rows if r[5] > 1e-4]
        if bad:
            print("warning: fusec f32 differs from torch float64 by more than 1e-4: the torch code and the .ir "
                  "disagree", file=sys.stderr)
        return 1 if worst > 1.25 or bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
