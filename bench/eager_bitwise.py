#!/usr/bin/env python3
"""eager_bitwise.py - fusec --numerics=eager against eager PyTorch, bit for bit.

docs/NUMERICS.md ("Eager mode: what still differs") says that eager
numerics reproduce eager PyTorch's bits on the GPU for pointwise graphs
built of the ops it lists as exact, and for the transcendental ops where
NVRTC and nvcc contract multiply-adds alike. This script checks that on
each op alone and on a few pointwise chains, in bf16 (and f16): fusec with
--numerics=eager on the GPU and eager PyTorch (bench/numerics_bench.py's
interpreter of the .ir text, so both run the same graph) on the same
inputs, and reports for every output how many elements differ in their
bits, the largest difference in ulps and the first few differing elements
with their inputs. It exits 1 when an op documented as exact differs.

  python3 bench/eager_bitwise.py [--fusec build/fusec] [--rows 1024] [--cols 4096]

Needs torch with CUDA and build/fusec built with CUDA (bench/numerics_gpu.sh runs it).
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numerics_bench import ROOT, TORCH_DTYPE, fusec_outputs, parse_ir, run_graph, sh  # noqa: E402

# Ops whose eager results the doc promises bit for bit: the same f32
# operations and roundings as PyTorch's kernels.
EXACT = {"neg", "abs", "relu", "add", "sub", "mul", "max", "min", "where", "cast", "eq", "ne", "lt", "le",
         "gt", "ge", "div"}
# Equal where NVRTC and nvcc contract multiply-adds alike (a few elements
# in a few hundred may differ in their last bit): reported, not failed.
TRANSCENDENTAL = ["exp", "sigmoid", "silu", "gelu", "gelu_tanh", "tanh", "erf", "log", "sqrt", "rsqrt", "sin",
                  "cos", "recip", "hardswish"]


def single_op(op, dt, shape):
    s = ", ".join(str(d) for d in shape)
    pos = op in ("log", "sqrt", "rsqrt")
    if pos:  # a positive argument, as the op wants: |x| + 0.5
        body = "  %%a = abs(%%x)\n  %%p = add(%%a, 0.5)\n  %%y = %s(%%p)\n" % op
    else:
        body = "  %%y = %s(%%x)\n" % op
    return "graph %s_%s(%%x: %s[%s]) {\n%s  return %%y\n}\n" % (op, dt, dt, s, body)


def chains(dt, shape):
    s = ", ".join(str(d) for d in shape)
    sig = "(%%x: %s[%s], %%r: %s[%s])" % (dt, s, dt, s)
    return [
        # the chain of bench/pointwise_bf16.ir
        ("gelu_sigmoid_chain", sig, ["%a = mul(%x, 1.702)", "%b = add(%a, %r)", "%c = gelu(%b)",
                                     "%d = sigmoid(%r)", "%e = mul(%c, %d)", "%y = add(%e, %x)"], EXACT | {"gelu", "sigmoid"}),
        # only ops documented as exact, weak scalars included
        ("exact_ops_chain", sig, ["%a = mul(%x, 0.7071)", "%b = sub(%a, %r)", "%c = relu(%b)", "%d = neg(%r)",
                                  "%e = max(%c, %d)", "%f = div(%e, 3.0)", "%g = abs(%f)", "%m = gt(%x, 0.1)",
                                  "%h = where(%m, %g, %x)", "%y = add(%h, 1.5)"], EXACT),
        # the transcendental functions one after another
        ("transcendental_chain", sig, ["%a = tanh(%x)", "%b = exp(%a)", "%c = mul(%b, %r)", "%d = silu(%c)",
                                       "%e = erf(%d)", "%f = gelu_tanh(%e)", "%g = abs(%f)", "%h = add(%g, 1.0)",
                                       "%i = log(%h)", "%y = sqrt(%i)"], None),
        # a bf16/f16 round trip through f32 in the middle: the cast rounds
        ("cast_chain", sig, ["%a = cast(%x, to=f32)", "%b = mul(%a, 1.702)", "%c = cast(%b, to=" + dt + ")",
                             "%d = add(%c, %r)", "%y = mul(%d, %d)"], EXACT),
    ]


def graph_text(name, sig, stmts):
    return "graph %s%s {\n%s\n  return %%y\n}\n" % (name, sig, "\n".join("  " + s for s in stmts))


def bits(t):
    return t.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF


def ulp_diff(a, b, dt):
    """|a - b| in ulps of dt around b (both of dtype dt)."""
    mant = 7 if dt == "bf16" else 10
    tiny = 2.0 ** (-126 if dt == "bf16" else -14)
    r = b.double()
    ulp = torch.exp2(torch.floor(torch.log2(r.abs().clamp_min(tiny))) - mant)
    d = (a.double() - r).abs() / ulp
    d[torch.isnan(a.double()) & torch.isnan(r)] = 0
    return d


def check(fusec, name, text, exact_ops, gen, tmp, report):
    path = os.path.join(tmp, name + ".ir")
    with open(path, "w") as f:
        f.write(text)
    graph = parse_ir(sh([fusec, path, "--emit=ir"]))
    params, stmts, rets = graph
    arrays = []
    for p in params:
        x = gen.standard_normal(p[2]) * 2.0
        arrays.append(torch.tensor(x, dtype=torch.float32).to(TORCH_DTYPE[p[1]]).float().numpy())
    files = []
    for i, x in enumerate(arrays):
        f = os.path.join(tmp, "%s_in%d.npy" % (name, i))
        np.save(f, x)
        files.append(f)
    got = fusec_outputs(fusec, path, None, files, os.path.join(tmp, name + "_out"), "eager")
    typed = [torch.from_numpy(x).cuda().to(TORCH_DTYPE[p[1]]) for x, p in zip(arrays, params)]
    with torch.no_grad():
        want = run_graph(graph, typed, False)
    ops = {s[1] for s in stmts}
    promised = exact_ops is not None and ops <= exact_ops
    bad = False
    for k, (g, w) in enumerate(zip(got, want)):
        dt = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(w.dtype)
        if dt is None:
            report.append("| %s | %d | %s | - | - | not a 16-bit output |" % (name, k, w.dtype))
            continue
        g = g.to(w.dtype)
        differ = bits(g) != bits(w)
        differ &= ~(torch.isnan(g) & torch.isnan(w))
        n = int(differ.sum().item())
        worst = float(ulp_diff(g, w, dt)[differ].max().item()) if n else 0.0
        verdict = "equal" if n == 0 else ("DIFFERS (documented exact)" if promised else "differs")
        report.append("| %s | %d | %s | %d of %d | %.3g | %s |" % (name, k, dt, n, w.numel(), worst, verdict))
        if n:
            idx = differ.flatten().nonzero().flatten()[:4].tolist()
            for i in idx:
                xs = ", ".join("%.9g" % t.flatten()[i].float().item() for t in typed if t.numel() == w.numel())
                report.append("|   | [%d] | inputs %s | fusec %.9g | torch %.9g | |" %
                              (i, xs, g.flatten()[i].float().item(), w.flatten()[i].float().item()))
            bad = bad or promised
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fusec", default=os.path.join(ROOT, "build", "fusec"))
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    shape = [args.rows, args.cols]
    gen = np.random.default_rng(args.seed)
    report = ["| graph | output | dtype | elements whose bits differ | max ulp | |", "|---|---|---|---|---|---|"]
    bad = False
    with tempfile.TemporaryDirectory(prefix="fusec-bitwise-") as tmp:
        for dt in args.dtypes.split(","):
            for op in sorted(EXACT - {"where", "cast", "eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul",
                                      "max", "min", "div"}) + TRANSCENDENTAL:
                bad |= check(args.fusec, "%s_%s" % (op, dt), single_op(op, dt, shape),
                             EXACT if op in EXACT else None, gen, tmp, report)
            for name, sig, stmts, exact_ops in chains(dt, shape):
                bad |= check(args.fusec, "%s_%s" % (name, dt), graph_text(name, sig, stmts), exact_ops, gen, tmp,
                             report)
    print("\n".join(report))
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(report) + "\n")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
