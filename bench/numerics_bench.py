#!/usr/bin/env python3
"""numerics_bench.py - fusec's numerics beside PyTorch's (docs/NUMERICS.md).

For each graph: fusec with --numerics=fast and --numerics=eager, PyTorch
eager and torch.compile, each on the same inputs (model-like: activations
N(0, 1), matmul weights N(0, 0.02) as GPT-2 initializes them, norm weights
1 + 0.1 N(0, 1), biases 0.02 N(0, 1), RoPE tables cos/sin of real angles),
against float64 computed by PyTorch on the same inputs; relative L2 error
and max error in ulps of the output's dtype. Then the bf16 pointwise chain's
time (fusec, both modes; the explicit-cast chain; eager; torch.compile)
against the device-to-device copy bandwidth measured in the same run.
One table on stdout (and --md FILE).

The graphs are read from their .ir text (printed canonically by
`fusec --emit=ir`), and PyTorch runs them through a small interpreter of
that text (run_graph below): the declared dtypes give eager PyTorch's
semantics (each op on bf16 tensors, a bare number a Python scalar), float64
everywhere gives the reference, and torch.compile compiles the same
function. So the three sides cannot drift from the .ir files.

  python3 bench/numerics_bench.py [--fusec build/fusec] [--graphs a,b] [--reps 50] [--md F]

Needs torch with CUDA and build/fusec built with CUDA (bench/numerics_bench.sh).
"""

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import cuda_timing  # bench/, the script's own folder
from ir_variants import layernorm_after

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# name, .ir file, --bind (for files with symbolic dims)[, a rewrite of its text]
GRAPHS = [
    ("pointwise_bf16", "bench/pointwise_bf16.ir", None),
    ("pointwise_cast", "bench/pointwise.ir", None),
    ("softmax", "bench/softmax.ir", None),
    ("add_layernorm", "bench/add_layernorm.ir", None),
    ("rmsnorm", "bench/rmsnorm.ir", None),
    ("gemm_gelu", "bench/gemm_gelu.ir", None),
    ("attention", "bench/attention.ir", None),
    ("gpt2_block_bf16", "examples/gpt2_block_bf16.ir", "B=8,T=1024"),
    ("gpt2_block_ln_bf16", "examples/gpt2_block_bf16.ir", "B=8,T=1024", layernorm_after),
    ("llama_block", "examples/llama_block.ir", "B=8,T=1024"),
]

TORCH_DTYPE = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
               "i64": torch.int64, "i32": torch.int32, "i8": torch.int8, "bool": torch.bool}
MANT = {"bf16": 7, "f16": 10, "f32": 23, "f64": 52}

# ---- the .ir text ---------------------------------------------------------

def split_top(s, sep=","):
    """Split s at sep outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_type(t):
    m = re.match(r"(\w+)\[(.*)\]", t.strip())
    dims = [int(d) for d in m.group(2).split(",") if d.strip()] if m.group(2).strip() else []
    return m.group(1), dims


def parse_value(a):
    a = a.strip()
    if a.startswith("["):
        return [parse_value(x) for x in split_top(a[1:-1])]
    if a in ("true", "false"):
        return a == "true"
    if a in ("inf", "-inf", "nan"):
        return float(a)
    if re.fullmatch(r"-?\d+", a):
        return int(a)
    try:
        return float(a)
    except ValueError:
        return a  # a name (a dtype)


def parse_ir(text):
    """Canonical .ir text -> (params [(name, dtype, dims)], stmts, returns)."""
    header, body = text.split("{", 1)
    params = []
    for p in split_top(header[header.index("(") + 1: header.rindex(")")]):
        name, ty = p.split(":", 1)
        params.append((name.strip(), *parse_type(ty)))
    stmts, rets = [], []
    for line in body.splitlines():
        line = line.strip()
        if not line or line == "}":
            continue
        if line.startswith("return"):
            rets = [r.strip() for r in line[len("return"):].split(",")]
            continue
        lhs, rhs = line.split("=", 1)
        outs = [o.strip() for o in lhs.split(",")]
        m = re.match(r"\s*(\w+)\((.*)\)\s*:(.*)$", rhs)
        op, args, types = m.group(1), split_top(m.group(2)), split_top(m.group(3))
        operands, attrs = [], {}
        for a in args:
            if "=" in a and not a.startswith("%"):
                k, v = a.split("=", 1)
                attrs[k.strip()] = parse_value(v)
            else:
                operands.append(a if a.startswith("%") else parse_value(a))
        stmts.append((outs, op, operands, attrs, [parse_type(t) for t in types]))
    return params, stmts, rets

# ---- running it in PyTorch ------------------------------------------------

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "recip": torch.reciprocal, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "hardswish": F.hardswish, "erf": torch.erf,
}


def binary(op, a, b):
    if op == "add": return a + b
    if op == "sub": return a - b
    if op == "mul": return a * b
    if op == "div": return a / b
    if op == "pow": return a ** b
    if op in ("max", "min"):
        fn = torch.maximum if op == "max" else torch.minimum
        if not torch.is_tensor(a): a, b = b, a
        if not torch.is_tensor(b): b = torch.tensor(b, dtype=a.dtype, device=a.device)
        return fn(a, b)
    if op == "eq": return a == b
    if op == "ne": return a != b
    if op == "lt": return a < b
    if op == "le": return a <= b
    if op == "gt": return a > b
    if op == "ge": return a >= b
    raise KeyError(op)


def run_graph(graph, inputs, f64):
    """graph: parse_ir's result; inputs: tensors; f64: compute every float in float64."""
    params, stmts, rets = graph
    env = {p[0]: x for p, x in zip(params, inputs)}

    def dt(name):
        t = TORCH_DTYPE[name]
        return torch.float64 if f64 and t.is_floating_point else t

    for outs, op, opnds, a, types in stmts:
        x = [env[o] if isinstance(o, str) else o for o in opnds]
        if op in UNARY:
            r = UNARY[op](x[0])
        elif op in ("add", "sub", "mul", "div", "pow", "max", "min", "eq", "ne", "lt", "le", "gt", "ge"):
            r = binary(op, x[0], x[1])
        elif op == "where":
            r = torch.where(x[0], x[1], x[2])
        elif op == "cast":
            r = x[0].to(dt(a["to"]))
        elif op.startswith("reduce_"):
            axes = a.get("axes", []) or list(range(x[0].dim()))
            keep = a.get("keepdim", False)
            fn = {"reduce_sum": torch.sum, "reduce_mean": torch.mean, "reduce_max": torch.amax,
                  "reduce_min": torch.amin}[op]
            r = fn(x[0], dim=axes, keepdim=keep)
        elif op == "softmax":
            r = torch.softmax(x[0], dim=a.get("axis", -1))
        elif op == "layernorm":
            axis = a.get("axis", -1) % x[0].dim()
            xt = x[0].movedim(axis, -1)
            r = F.layer_norm(xt, (xt.shape[-1],), x[1], x[2], a.get("eps", 1e-5)).movedim(-1, axis)
        elif op == "rmsnorm":
            r = F.rms_norm(x[0], (x[0].shape[-1],), x[1], a.get("eps", 1e-6))
        elif op == "matmul":
            r = torch.matmul(x[0], x[1])
        elif op == "attention":
            s = a.get("scale", 0.0)
            r = F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=a.get("causal", False),
                                               scale=s if s else None)
        elif op == "reshape":
            r = x[0].reshape(a["shape"])
        elif op == "permute":
            r = x[0].permute(a["perm"])
        elif op == "expand":
            r = x[0].expand(a["shape"])
        elif op == "slice":
            ax = a["axis"] % x[0].dim()
            idx = [slice(None)] * x[0].dim()
            idx[ax] = slice(a.get("start", 0), min(a.get("end", 2**62), x[0].shape[ax]), a.get("step", 1))
            r = x[0][tuple(idx)]
        elif op == "concat":
            r = torch.cat(x, dim=a["axis"])
        elif op == "split":
            ax = a["axis"] % x[0].dim()
            sizes = list(a["sizes"])
            if -1 in sizes:
                sizes[sizes.index(-1)] = x[0].shape[ax] - sum(s for s in sizes if s != -1)
            r = list(torch.split(x[0], sizes, dim=ax))
        elif op == "iota":
            shape, ax = a["shape"], a["axis"] % len(a["shape"])
            v = torch.arange(shape[ax], device="cuda", dtype=dt(a.get("dtype", "i32")))
            view = [1] * len(shape)
            view[ax] = shape[ax]
            r = v.reshape(view).expand(shape)
        elif op == "full":
            r = torch.full(a["shape"], a["value"], dtype=dt(a.get("dtype", "f32")), device="cuda")
        elif op == "gather":
            tab, ix, ax = x[0], x[1], a.get("axis", 0) % x[0].dim()
            g = tab.index_select(ax, ix.reshape(-1).long())
            r = g.reshape(tab.shape[:ax] + ix.shape + tab.shape[ax + 1:])
        else:
            raise KeyError("numerics_bench: no PyTorch mirror for op " + op)
        rs = r if isinstance(r, list) else [r]
        for name, val in zip(outs, rs):
            env[name] = val
    return [env[r] for r in rets]

# ---- inputs ---------------------------------------------------------------

def make_input(name, dtype, dims, gen):
    n = name.lstrip("%")
    if n in ("cos", "sin"):  # RoPE tables [T, D]: position t, frequency 10000^(-2i/D)
        T, D = dims
        inv = 10000.0 ** (-np.arange(0, D, 2) / D)
        ang = np.outer(np.arange(T), inv)
        ang = np.concatenate([ang, ang], axis=1)
        x = np.cos(ang) if n == "cos" else np.sin(ang)
    elif len(dims) == 2 and (n.startswith("w") or n.endswith("_w")) and "norm" not in n and not n.startswith("ln"):
        x = 0.02 * gen.standard_normal(dims)
    elif len(dims) == 1 and (n.endswith("_w") or n in ("w", "g", "gamma") or "norm" in n):
        x = 1.0 + 0.1 * gen.standard_normal(dims)
    elif len(dims) == 1 and (n.endswith("_b") or n in ("b", "bias", "beta")):
        x = 0.02 * gen.standard_normal(dims)
    else:
        x = gen.standard_normal(dims)
    # Values exactly representable in the parameter's dtype, so fusec (which
    # rounds a float32 .npy to bf16, nearest-even) and PyTorch see the same.
    t = torch.tensor(x, dtype=torch.float32).to(TORCH_DTYPE[dtype]).float()
    return t.numpy()

# ---- errors ---------------------------------------------------------------

def errors(got, ref, dtype):
    g, r = got.double().flatten(), ref.double().flatten()
    fin = torch.isfinite(r)
    g, r = g[fin], r[fin]
    d = (g - r).abs()
    rel_l2 = (d.norm() / r.norm()).item() if r.norm() > 0 else 0.0
    if dtype in MANT:
        tiny = 2.0 ** (-126 if dtype != "f16" else -14)
        ulp = torch.exp2(torch.floor(torch.log2(r.abs().clamp_min(tiny))) - MANT[dtype])
        max_ulp = (d / ulp).max().item() if d.numel() else 0.0
    else:
        max_ulp = float("nan")
    return rel_l2, max_ulp


def sh(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:]))
    return p.stdout


def fusec_outputs(fusec, ir, bind, files, outdir, mode):
    cmd = [fusec, ir, "--run", "--device=cuda", "--numerics=" + mode, "--inputs", ",".join(files),
           "--save-outputs", outdir]
    if bind:
        cmd += ["--bind", bind]
    sh(cmd)
    outs, i = [], 0
    while os.path.exists(os.path.join(outdir, "out%d.npy" % i)):
        outs.append(torch.from_numpy(np.load(os.path.join(outdir, "out%d.npy" % i))).cuda())
        i += 1
    return outs


def fusec_time(fusec, ir, mode, reps):
    out = sh([fusec, ir, "--run", "--device=cuda", "--numerics=" + mode, "--bench", str(reps)])
    m = re.search(r"time: ([0-9.]+) ms median", out)
    return float(m.group(1))


def cuda_time(fn, reps, warmup=10):
    return cuda_timing.median_ms(fn, reps, warmup)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", default=os.path.join(ROOT, "build", "fusec"))
    ap.add_argument("--graphs", default=",".join(g[0] for g in GRAPHS))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--md", default=None)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    want = set(args.graphs.split(","))
    rows = []
    lines = []

    def emit(s):
        print(s, flush=True)
        lines.append(s)

    emit("| graph | output | fusec fast: rel L2 / max ulp | fusec eager | PyTorch eager | torch.compile |")
    emit("|---|---|---|---|---|---|")
    ir_dir = tempfile.mkdtemp(prefix="fusec-numerics-ir-")
    for entry in GRAPHS:
        name, path, bind = entry[:3]
        if name not in want:
            continue
        ir = os.path.join(ROOT, path)
        if len(entry) > 3:
            with open(ir) as f:
                text = entry[3](f.read())
            ir = os.path.join(ir_dir, name + ".ir")
            with open(ir, "w") as f:
                f.write(text)
        cmd = [args.fusec, ir, "--emit=ir"] + (["--bind", bind] if bind else [])
        graph = parse_ir(sh(cmd))
        params, _, rets = graph
        gen = np.random.default_rng(args.seed)
        arrays = [make_input(p[0], p[1], p[2], gen) for p in params]
        with tempfile.TemporaryDirectory(prefix="fusec-numerics-") as tmp:
            files = []
            for i, x in enumerate(arrays):
                f = os.path.join(tmp, "in%d.npy" % i)
                np.save(f, x)
                files.append(f)
            res = {}
            for mode in ("fast", "eager"):
                try:
                    res[mode] = fusec_outputs(args.fusec, ir, bind, files, os.path.join(tmp, mode), mode)
                except RuntimeError as e:
                    print("fusec %s %s: %s" % (name, mode, e), file=sys.stderr)
            typed = [torch.from_numpy(x).cuda().to(TORCH_DTYPE[p[1]]) for x, p in zip(arrays, params)]
            with torch.no_grad():
                ref = run_graph(graph, [t.double() if t.is_floating_point() else t for t in typed], True)
                res["torch"] = run_graph(graph, typed, False)
                if not args.no_compile:
                    try:
                        fn = torch.compile(lambda *xs: run_graph(graph, list(xs), False))
                        res["compile"] = fn(*typed)
                    except Exception as e:  # a graph Inductor cannot compile: say so, go on
                        print("torch.compile %s: %s" % (name, e), file=sys.stderr)
            out_types = {s[0][i]: s[4][i][0] for s in graph[1] for i in range(len(s[0]))}
            for k, r in enumerate(rets):
                dtype = out_types.get(r, params[[p[0] for p in params].index(r)][1] if r in [p[0] for p in params] else "f32")
                cells = []
                for side in ("fast", "eager", "torch", "compile"):
                    if side in res and k < len(res[side]):
                        e = errors(res[side][k].to(torch.float64), ref[k], dtype)
                        cells.append("%.3g / %.1f" % e)
                    else:
                        cells.append("-")
                emit("| %s | %d (%s) | %s |" % (name, k, dtype, " | ".join(cells)))
            del ref, res, typed
            torch.cuda.empty_cache()

    # ---- the pointwise chain against the copy bandwidth -------------------
    if "pointwise_bf16" in want:
        n = 16384 * 8192
        src = torch.empty(2 * n, dtype=torch.bfloat16, device="cuda")
        dst = torch.empty_like(src)
        copy_ms = cuda_time(lambda: dst.copy_(src), args.reps)
        copy_tbps = 2 * src.numel() * 2 / (copy_ms * 1e-3) / 1e12
        del src, dst
        floor_bytes = 3 * n * 2
        floor_ms = floor_bytes / (copy_tbps * 1e12) * 1e3
        emit("")
        emit("copy bandwidth (this run): %.2f TB/s; the chain moves %.0f MB: floor %.3f ms" %
             (copy_tbps, floor_bytes / 1e6, floor_ms))
        emit("")
        emit("| pointwise chain, bf16[16384, 8192] | ms | of the copy bandwidth |")
        emit("|---|---|---|")
        times = []
        for mode in ("fast", "eager"):
            times.append(("fusec --numerics=%s (pointwise_bf16.ir)" % mode,
                          fusec_time(args.fusec, os.path.join(ROOT, "bench/pointwise_bf16.ir"), mode, args.reps)))
        times.append(("fusec, explicit casts (pointwise.ir)",
                      fusec_time(args.fusec, os.path.join(ROOT, "bench/pointwise.ir"), "fast", args.reps)))
        graph = parse_ir(sh([args.fusec, os.path.join(ROOT, "bench/pointwise_bf16.ir"), "--emit=ir"]))
        gen = np.random.default_rng(args.seed)
        xs = [torch.from_numpy(make_input(p[0], p[1], p[2], gen)).cuda().to(TORCH_DTYPE[p[1]]) for p in graph[0]]
        with torch.no_grad():
            times.append(("PyTorch eager", cuda_time(lambda: run_graph(graph, xs, False), args.reps)))
            if not args.no_compile:
                fn = torch.compile(lambda *a: run_graph(graph, list(a), False))
                times.append(("torch.compile", cuda_time(lambda: fn(*xs), args.reps)))
        for label, ms in times:
            emit("| %s | %.4f | %.0f%% |" % (label, ms, 100 * floor_ms / ms))
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
