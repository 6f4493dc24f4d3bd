#!/usr/bin/env python3
"""torch_bench.py - the PyTorch side of fusec's benchmarks (bench/*.ir).

Four modes, one per stage of bench/run-gpu.sh:

  torch_bench.py [--workloads a,b] [--reps 50] [--warmup 10] [--no-compile] [--json F]
      Times each workload in PyTorch eager and torch.compile (default mode,
      static shapes), bf16 tensors on cuda, and measures device-to-device copy
      bandwidth. Writes {"workloads": {wl: {eager_ms, compile_ms, bytes_moved,
      ...}}, "copy_tbps": ..., "meta": {...}} to F (rewritten after every
      workload, so a run cut short keeps what it measured).

  torch_bench.py --make-inputs DIR [--seed N]
      Writes DIR/<wl>/in<i>.npy: random inputs for each workload as float32
      arrays whose values are all exactly representable in the parameter's
      dtype (bf16), so fusec (which rounds a float32 file to bf16, nearest-even)
      and the reference see identical inputs.

  torch_bench.py --check DIR [--json F]
      Compares fusec's outputs DIR/<wl>/out/out<i>.npy (from fusec --inputs ...
      --save-outputs DIR/<wl>/out) with a float64 reference computed on the
      same inputs (PyTorch on cuda when available, else NumPy on the CPU).
      Reports max abs / max rel / norm-relative error per output. Exit 1 if an
      output fails its tolerance.

  torch_bench.py --summary WORK --md F.md --out-json F.json
      Reads what bench/run-gpu.sh left in WORK (fusec logs and exit codes,
      torch.json, check.json) and writes the final table and results JSON.

Shapes and dtypes come from the .ir files themselves (bench/<wl>.ir, or
--ir-dir), so the two sides cannot drift; the semantics of each workload are
written out twice below, once for PyTorch (timed) and once in float64 (the
reference), both mirroring the .ir text exactly.

Timing: each repetition is bracketed by its own pair of CUDA events; the
result is the median over --reps repetitions after --warmup untimed ones. No
cache flush between repetitions: every workload touches at least 512 MiB, far
more than the H200's 60 MB L2, so the cache cannot hold a repetition's data.

torch is imported only in the modes that time (and, optionally, in --check),
so --make-inputs, --check (NumPy reference) and --summary run without it.
"""

import argparse
import json
import math
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ORDER = ["pointwise", "softmax", "add_layernorm", "rmsnorm"]
DTYPE_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1, "bool": 1}

# How each parameter's random data is drawn (same distribution for the timed
# runs and the checked runs; never zeros).
#   normal: N(0, 1)   weight: 1 + 0.1 N(0, 1)   bias: 0.1 N(0, 1)
INPUT_KINDS = {
    "pointwise": ["normal", "normal"],
    "softmax": ["normal"],
    "add_layernorm": ["normal", "normal", "weight", "bias"],
    "rmsnorm": ["normal", "weight"],
}
LN_EPS = 1e-5
RMS_EPS = 1e-6

# Tolerance of the float64 check, for bf16 outputs. The output's own rounding
# is at most 2^-8 relative (half an ulp of an 8-bit significand); f32
# arithmetic inside adds far less.
#   element passes: |out - ref| <= atol + rtol |ref|, rtol = 2^-7,
#                   atol = 2^-8 * rms(ref)  (values that cancel to ~0)
#   output passes:  every element passes, no NaN/Inf, and
#                   ||out - ref|| / ||ref|| <= 1e-2
RTOL = 2.0 ** -7
ATOL_RMS = 2.0 ** -8
NORM_RTOL = 1e-2


# --------------------------------------------------------------------------
# The .ir files: shapes, dtypes, outputs.
# --------------------------------------------------------------------------

def _dims(text, where):
    dims = []
    for d in text.split(","):
        d = d.strip()
        if not d:
            continue
        if not re.fullmatch(r"\d+", d):
            raise ValueError(f"{where}: dimension '{d}' is not static")
        dims.append(int(d))
    return tuple(dims)


def parse_ir(path):
    """Return {"name", "params": [(name, dtype, shape)], "outputs": [(name, dtype, shape)]}.

    Only as much of the .ir format as the bench files use: the first graph,
    its parameters, the declared types of its statements and its return.
    """
    with open(path) as f:
        text = re.sub(r"#[^\n]*", "", f.read())
    m = re.search(r"graph\s+([A-Za-z_]\w*)\s*\((.*?)\)\s*\{", text, re.S)
    if not m:
        raise ValueError(f"{path}: no graph found")
    params = [(n, dt, _dims(sh, f"{path}: %{n}"))
              for n, dt, sh in re.findall(r"%([\w.]+)\s*:\s*(\w+)\s*\[([^\]]*)\]", m.group(2))]
    body = text[m.end():]
    types = {n: (dt, sh) for n, dt, sh in params}
    for line in body.splitlines():
        d = re.match(r"\s*%([\w.]+)\s*=\s*[A-Za-z_]\w*\s*\(.*\)\s*:\s*(\w+)\s*\[([^\]]*)\]\s*$", line)
        if d:
            types[d.group(1)] = (d.group(2), _dims(d.group(3), f"{path}: %{d.group(1)}"))
    r = re.search(r"\breturn\s+([^\n}]+)", body)
    if not r:
        raise ValueError(f"{path}: no return")
    outputs = []
    for v in r.group(1).split(","):
        v = v.strip().lstrip("%")
        if v not in types:
            raise ValueError(f"{path}: output %{v} has no declared type (write ': dtype[..]' after it)")
        outputs.append((v, types[v][0], types[v][1]))
    return {"name": m.group(1), "params": params, "outputs": outputs}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def bytes_moved(ir):
    """The floor: every input read once plus every output written once."""
    return (sum(numel(s) * DTYPE_BYTES[dt] for _, dt, s in ir["params"]) +
            sum(numel(s) * DTYPE_BYTES[dt] for _, dt, s in ir["outputs"]))


def load_irs(ir_dir, workloads):
    irs = {}
    for wl in workloads:
        ir = parse_ir(os.path.join(ir_dir, wl + ".ir"))
        if len(ir["params"]) != len(INPUT_KINDS[wl]):
            raise ValueError(f"{wl}.ir has {len(ir['params'])} parameters; torch_bench.py expects "
                             f"{len(INPUT_KINDS[wl])}: update INPUT_KINDS and the functions below")
        irs[wl] = ir
    return irs


# --------------------------------------------------------------------------
# The workloads in PyTorch (timed). bf16 in and out, f32 inside, as the .ir.
# --------------------------------------------------------------------------

def torch_fns(torch):
    F = torch.nn.functional
    bf16 = torch.bfloat16

    def pointwise(x, r):
        xf, rf = x.float(), r.float()
        return (F.gelu(xf * 1.702 + rf) * torch.sigmoid(rf) + xf).to(bf16)

    def softmax(x):
        # torch.softmax on bf16 accumulates in f32 and rounds once at the end:
        # the same values as cast -> softmax in f32 -> cast, in one kernel.
        return torch.softmax(x, dim=-1)

    def add_layernorm(x, r, w, b):
        s = x + r  # bf16 add: computed in f32, rounded to bf16, as cast(add(f32, f32), bf16)
        # F.layer_norm on bf16 with bf16 w, b computes in f32, rounds once.
        y = F.layer_norm(s, (s.shape[-1],), w, b, eps=LN_EPS)
        return s, y

    def rmsnorm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w.float()).to(bf16)

    def rmsnorm_native(x, w):
        # Not timed for the table: F.rms_norm rounds to bf16 before the weight
        # multiply in its composite form, so it is not the .ir's semantics.
        return F.rms_norm(x, (x.shape[-1],), w, eps=RMS_EPS)

    return {"pointwise": pointwise, "softmax": softmax, "add_layernorm": add_layernorm,
            "rmsnorm": rmsnorm}, {"rmsnorm": rmsnorm_native}


# --------------------------------------------------------------------------
# The workloads in float64 (the reference for --check).
# --------------------------------------------------------------------------

def ref_pointwise(o, x, r):
    a = x * 1.702 + r
    g = 0.5 * a * (1.0 + o.erf(a / math.sqrt(2.0)))
    return [g * (1.0 / (1.0 + o.exp(-r))) + x]


def ref_softmax(o, x):
    e = o.exp(x - o.max_last(x))
    return [e / o.sum_last(e)]


def ref_add_layernorm(o, x, r, w, b):
    s = x + r
    sr = o.round_bf16(s)  # %s is bf16 in the .ir; layernorm reads the rounded value
    c = sr - o.mean_last(sr)
    y = c / o.sqrt(o.mean_last(c * c) + LN_EPS) * w + b
    return [s, y]


def ref_rmsnorm(o, x, w):
    return [x / o.sqrt(o.mean_last(x * x) + RMS_EPS) * w]


REFS = {"pointwise": ref_pointwise, "softmax": ref_softmax,
        "add_layernorm": ref_add_layernorm, "rmsnorm": ref_rmsnorm}


def np_round_bf16(a):
    """Round a float32 array to the nearest bf16 value (ties to even), kept as float32."""
    import numpy as np
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32)
    u = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    out = u.view(np.float32)
    return np.where(np.isnan(a), a, out)


class NumpyOps:
    """float64 on the CPU (for machines without torch, and the tests here)."""

    name = "numpy float64 (cpu)"

    def __init__(self):
        import numpy as np
        self.np = np
        try:
            from scipy.special import erf
            self._erf = erf
        except ImportError:
            self._erf = np.vectorize(math.erf, otypes=[np.float64])

    def load(self, a):
        return self.np.asarray(a, dtype=self.np.float64)

    def erf(self, x):
        return self._erf(x)

    def exp(self, x):
        return self.np.exp(x)

    def sqrt(self, x):
        return self.np.sqrt(x)

    def max_last(self, x):
        return x.max(axis=-1, keepdims=True)

    def sum_last(self, x):
        return x.sum(axis=-1, keepdims=True)

    def mean_last(self, x):
        return x.mean(axis=-1, keepdims=True)

    def round_bf16(self, x):
        return np_round_bf16(x.astype(self.np.float32)).astype(self.np.float64)

    def metrics(self, out, ref):
        np = self.np
        o = self.load(out)
        d = np.abs(o - ref)
        aref = np.abs(ref)
        rms = float(np.sqrt(np.mean(ref * ref)))
        atol = ATOL_RMS * rms
        return _metrics_common(
            nonfinite=int(np.count_nonzero(~np.isfinite(o))),
            max_abs=float(np.max(d)),
            max_rel=float(np.max(d / (aref + atol))) if atol > 0 else float(np.max(d / np.maximum(aref, 1e-30))),
            norm_rel=float(np.sqrt(np.sum(d * d)) / max(np.sqrt(np.sum(ref * ref)), 1e-300)),
            bad=int(np.count_nonzero(~(d <= atol + RTOL * aref))),
            rms=rms, atol=atol, n=int(d.size))


class TorchOps:
    """float64 on the GPU through PyTorch."""

    def __init__(self, torch, device):
        self.t = torch
        self.dev = device
        self.name = f"torch float64 ({device})"

    def load(self, a):
        return self.t.from_numpy(a).to(self.dev).double()

    def erf(self, x):
        return self.t.erf(x)

    def exp(self, x):
        return self.t.exp(x)

    def sqrt(self, x):
        return self.t.sqrt(x)

    def max_last(self, x):
        return x.amax(dim=-1, keepdim=True)

    def sum_last(self, x):
        return x.sum(dim=-1, keepdim=True)

    def mean_last(self, x):
        return x.mean(dim=-1, keepdim=True)

    def round_bf16(self, x):
        return x.float().to(self.t.bfloat16).double()

    def metrics(self, out, ref):
        t = self.t
        o = self.load(out)
        d = (o - ref).abs()
        aref = ref.abs()
        rms = float(ref.square().mean().sqrt())
        atol = ATOL_RMS * rms
        return _metrics_common(
            nonfinite=int((~t.isfinite(o)).sum()),
            max_abs=float(d.max()),
            max_rel=float((d / (aref + atol)).max()) if atol > 0 else float((d / aref.clamp_min(1e-30)).max()),
            norm_rel=float(d.square().sum().sqrt() / ref.square().sum().sqrt().clamp_min(1e-300)),
            bad=int((~(d <= atol + RTOL * aref)).sum()),
            rms=rms, atol=atol, n=int(d.numel()))


def _metrics_common(nonfinite, max_abs, max_rel, norm_rel, bad, rms, atol, n):
    ok = nonfinite == 0 and bad == 0 and norm_rel <= NORM_RTOL and not math.isnan(max_abs)
    return {"ok": ok, "max_abs_err": max_abs, "max_rel_err": max_rel, "norm_rel_err": norm_rel,
            "bad_elements": bad, "nonfinite": nonfinite, "elements": n,
            "ref_rms": rms, "atol": atol, "rtol": RTOL, "norm_rtol": NORM_RTOL}


# --------------------------------------------------------------------------
# --make-inputs
# --------------------------------------------------------------------------

def draw(rng, kind, shape):
    import numpy as np
    a = rng.standard_normal(size=shape, dtype=np.float32)
    if kind == "weight":
        a = 1.0 + np.float32(0.1) * a
    elif kind == "bias":
        a = np.float32(0.1) * a
    elif kind != "normal":
        raise ValueError(kind)
    return a.astype(np.float32, copy=False)


def make_inputs(args, workloads, irs):
    import numpy as np
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"make-inputs: seed {seed} into {args.make_inputs}")
    for k, wl in enumerate(workloads):
        rng = np.random.default_rng([seed, k])
        d = os.path.join(args.make_inputs, wl)
        os.makedirs(d, exist_ok=True)
        paths = []
        for i, ((pname, dt, shape), kind) in enumerate(zip(irs[wl]["params"], INPUT_KINDS[wl])):
            a = draw(rng, kind, shape)
            if dt == "bf16":
                a = np_round_bf16(a)
            elif dt == "f16":
                a = a.astype(np.float16).astype(np.float32)
            elif dt != "f32":
                raise ValueError(f"{wl}: parameter %{pname} has dtype {dt}; only f32/f16/bf16 are drawn")
            p = os.path.join(d, f"in{i}.npy")
            np.save(p, a)
            paths.append(p)
        print(f"inputs {wl}: {','.join(paths)}")
    with open(os.path.join(args.make_inputs, "seed.txt"), "w") as f:
        f.write(f"{seed}\n")
    return 0


# --------------------------------------------------------------------------
# --check
# --------------------------------------------------------------------------

def pick_ref_backend(want):
    if want in ("auto", "torch"):
        try:
            import torch
            if torch.cuda.is_available():
                return TorchOps(torch, "cuda")
            if want == "torch":
                return TorchOps(torch, "cpu")
        except ImportError:
            if want == "torch":
                raise
    return NumpyOps()


def check(args, workloads, irs):
    import numpy as np
    ops = pick_ref_backend(args.ref)
    res = {"reference": ops.name, "workloads": {}}
    seed_file = os.path.join(args.check, "seed.txt")
    if os.path.exists(seed_file):
        res["seed"] = open(seed_file).read().strip()
    any_fail = False
    for wl in workloads:
        ir = irs[wl]
        d = os.path.join(args.check, wl)
        entry = {"status": "n/a", "outputs": []}
        res["workloads"][wl] = entry
        try:
            ins = [os.path.join(d, f"in{i}.npy") for i in range(len(ir["params"]))]
            outs = [os.path.join(d, "out", f"out{i}.npy") for i in range(len(ir["outputs"]))]
            missing = [p for p in ins + outs if not os.path.exists(p)]
            if missing:
                entry["status"] = "n/a"
                entry["error"] = "missing " + ", ".join(os.path.relpath(p, args.check) for p in missing)
                print(f"check {wl}: n/a ({entry['error']})")
                continue
            t0 = time.time()
            x = [ops.load(np.load(p)) for p in ins]
            refs = REFS[wl](ops, *x)
            del x
            ok = True
            for i, ((oname, dt, shape), ref, p) in enumerate(zip(ir["outputs"], refs, outs)):
                out = np.load(p)
                if tuple(out.shape) != tuple(shape):
                    m = {"ok": False, "error": f"shape {list(out.shape)}, expected {list(shape)}"}
                else:
                    m = ops.metrics(out, ref)
                m["name"] = oname
                entry["outputs"].append(m)
                ok = ok and m["ok"]
                if "error" in m:
                    print(f"check {wl} out{i} %{oname}: FAIL ({m['error']})")
                else:
                    print(f"check {wl} out{i} %{oname}: max_abs_err={m['max_abs_err']:.3e} "
                          f"max_rel_err={m['max_rel_err']:.3e} norm_rel_err={m['norm_rel_err']:.3e} "
                          f"bad={m['bad_elements']} nonfinite={m['nonfinite']} {'ok' if m['ok'] else 'FAIL'}")
            del refs
            entry["status"] = "ok" if ok else "FAIL"
            entry["seconds"] = round(time.time() - t0, 2)
            any_fail = any_fail or not ok
        except Exception as e:  # one workload's failure must not stop the others
            entry["status"] = "error"
            entry["error"] = f"{type(e).__name__}: {e}"
            print(f"check {wl}: error: {entry['error']}")
            any_fail = True
        write_json(args.json, res)
    write_json(args.json, res)
    return 1 if any_fail else 0


# --------------------------------------------------------------------------
# Timing (default mode)
# --------------------------------------------------------------------------

def time_cuda(torch, fn, args, reps, warmup):
    """Median milliseconds of fn(*args) over reps, each bracketed by CUDA events."""
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn(*args)
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(times), min(times), max(times)


def torch_inputs(torch, wl, ir):
    dev = "cuda"
    xs = []
    for (pname, dt, shape), kind in zip(ir["params"], INPUT_KINDS[wl]):
        a = torch.randn(shape, device=dev, dtype=torch.float32)
        if kind == "weight":
            a = 1.0 + 0.1 * a
        elif kind == "bias":
            a = 0.1 * a
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dt]
        xs.append(a.to(dtype))
    return xs


def copy_bandwidth(torch, reps, warmup, nbytes):
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    src.random_(0, 256)  # not zeros
    dst = torch.empty_like(src)
    med, lo, hi = time_cuda(torch, lambda: dst.copy_(src), (), reps, warmup)
    src = dst = None  # free them before the workloads
    torch.cuda.empty_cache()
    return {"copy_bytes_each_way": nbytes, "copy_ms": med, "copy_tbps": 2 * nbytes / (med * 1e-3) / 1e12}


def bench(args, workloads, irs):
    import torch
    if not torch.cuda.is_available():
        print("torch_bench: no CUDA device", file=sys.stderr)
        return 3
    fns, extra = torch_fns(torch)
    res = {"meta": {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                    "reps": args.reps, "warmup": args.warmup,
                    "compile_mode": "default (torch.compile(fn, dynamic=False))",
                    "timing": "median of per-repetition CUDA event pairs; no cache flush"},
           "workloads": {}}
    try:
        c = copy_bandwidth(torch, args.reps, args.warmup, args.copy_mib << 20)
        res.update(c)
        print(f"copy: {c['copy_bytes_each_way'] >> 20} MiB each way in {c['copy_ms']:.4f} ms: "
              f"{c['copy_tbps']:.3f} TB/s (read + write)")
    except Exception as e:
        res["copy_error"] = f"{type(e).__name__}: {e}"
        print(f"copy: error: {res['copy_error']}")
    write_json(args.json, res)

    for wl in workloads:
        ir = irs[wl]
        entry = {"bytes_moved": bytes_moved(ir)}
        res["workloads"][wl] = entry
        xs = None
        try:
            xs = torch_inputs(torch, wl, ir)
            med, lo, hi = time_cuda(torch, fns[wl], xs, args.reps, args.warmup)
            entry.update(eager_ms=med, eager_min_ms=lo, eager_max_ms=hi)
            print(f"{wl}: eager {med:.4f} ms (min {lo:.4f}, max {hi:.4f})")
        except Exception as e:
            entry["eager_error"] = f"{type(e).__name__}: {e}"
            print(f"{wl}: eager error: {entry['eager_error']}")
        if wl in extra and xs is not None:
            try:
                med, lo, hi = time_cuda(torch, extra[wl], xs, args.reps, args.warmup)
                entry.update(eager_native_ms=med)
                print(f"{wl}: eager, native op (not the .ir's rounding; not in the table) {med:.4f} ms")
            except Exception as e:
                entry["eager_native_error"] = f"{type(e).__name__}: {e}"
        write_json(args.json, res)
        if not args.no_compile and xs is not None:
            try:
                cfn = torch.compile(fns[wl], dynamic=False)
                t0 = time.time()
                cfn(*xs)
                torch.cuda.synchronize()
                entry["compile_s"] = round(time.time() - t0, 2)
                med, lo, hi = time_cuda(torch, cfn, xs, args.reps, args.warmup)
                entry.update(compile_ms=med, compile_min_ms=lo, compile_max_ms=hi)
                print(f"{wl}: torch.compile {med:.4f} ms (min {lo:.4f}, max {hi:.4f}; "
                      f"compiled in {entry['compile_s']} s)")
            except Exception as e:
                entry["compile_error"] = f"{type(e).__name__}: {e}"[:2000]
                print(f"{wl}: torch.compile error: {entry['compile_error']}")
        del xs
        torch.cuda.empty_cache()
        write_json(args.json, res)
    return 0


# --------------------------------------------------------------------------
# --summary: the final table from what run-gpu.sh left in WORK.
# --------------------------------------------------------------------------

NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)"
TIME_RE = re.compile(r"time:\s*(" + NUM + r")\s*ms\s+median\s+of\s+(\d+)", re.I)
ABS_RE = re.compile(r"max_abs_err\s*[=:]?\s*(" + NUM + r")", re.I)
REL_RE = re.compile(r"max_rel_err\s*[=:]?\s*(" + NUM + r")", re.I)


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _rc(work, step):
    s = _read(os.path.join(work, step + ".rc"))
    if s is None:
        return None
    s = s.strip()
    return int(s) if re.fullmatch(r"-?\d+", s) else s


def _unsupported(log):
    return log is not None and re.search(r"unknown option|unrecognized option", log, re.I) is not None


def _status(rc, log):
    if rc is None:
        return "n/a (not run)"
    if isinstance(rc, str):
        return rc  # "skipped", "no-binary"
    if rc in (124, 137):
        return "timeout"
    if _unsupported(log):
        return "n/a"
    return "ok" if rc == 0 else f"error {rc}"


def parse_fusec_bench(work, wl):
    step = f"fusec_{wl}_bench"
    rc, log = _rc(work, step), _read(os.path.join(work, step + ".log"))
    m = TIME_RE.findall(log or "")
    r = {"rc": rc, "status": _status(rc, log), "ms": None, "n": None}
    if m and rc == 0:
        r["ms"], r["n"] = float(m[-1][0]), int(m[-1][1])
    elif rc == 0:
        r["status"] = "n/a (no 'time:' line)"
    return r


def parse_fusec_check(work, wl):
    step = f"fusec_{wl}_check"
    rc, log = _rc(work, step), _read(os.path.join(work, step + ".log"))
    r = {"rc": rc, "status": _status(rc, log)}
    if rc == 4:
        r["status"] = "FAIL"
    abs_ = [float(x) for x in ABS_RE.findall(log or "")]
    rel = [float(x) for x in REL_RE.findall(log or "")]
    if abs_:  # the worst over all outputs; NaN wins
        r["max_abs_err"] = float("nan") if any(math.isnan(v) for v in abs_) else max(abs_)
    if rel:
        r["max_rel_err"] = float("nan") if any(math.isnan(v) for v in rel) else max(rel)
    if rc == 0 and not abs_ and not rel and r["status"] == "ok":
        r["status"] = "ok (no errors printed)"
    return r


def _load_json(path):
    s = _read(path)
    if s is None:
        return None
    try:
        return json.loads(s)
    except ValueError:
        return None


def _fmt(v, spec):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _short(status):
    s = str(status)
    return {"n/a (not run)": "n/a", "ok (no errors printed)": "ok"}.get(s, s.split(" (")[0])


def summary(args, workloads, irs):
    work = args.summary
    tj = _load_json(os.path.join(work, "torch.json")) or {}
    cj = _load_json(os.path.join(work, "check.json")) or {}
    copy_tbps = tj.get("copy_tbps")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "gpu": (_read(os.path.join(work, "gpu.txt")) or "unknown").strip(),
            "commit": (_read(os.path.join(work, "commit.txt")) or "unknown").strip(),
            "torch": tj.get("meta", {}).get("torch"),
            "reps": tj.get("meta", {}).get("reps"),
            "copy_tbps": copy_tbps,
            "check_reference": cj.get("reference"),
            "check_seed": cj.get("seed")}
    steps = {}
    for s in ("build", "ctest", "torch_bench", "make_inputs", "torch_check"):
        rc = _rc(work, s)
        steps[s] = _status(rc, _read(os.path.join(work, s + ".log")))
    if _rc(work, "torch_check") == 1:
        steps["torch_check"] = "ran; some output failed (see the check column)"
    ct = _read(os.path.join(work, "ctest.log")) or ""
    m = re.findall(r"\d+% tests passed, \d+ tests? failed out of \d+", ct)
    if m:
        steps["ctest"] += f" ({m[-1]})"

    results = {"meta": meta, "steps": steps, "workloads": {}}
    rows = []
    for wl in workloads:
        ir = irs.get(wl)
        bm = bytes_moved(ir) if ir else None
        tw = tj.get("workloads", {}).get(wl, {})
        fb = parse_fusec_bench(work, wl)
        fc = parse_fusec_check(work, wl)
        save = f"fusec_{wl}_save"
        fsave = _status(_rc(work, save), _read(os.path.join(work, save + ".log")))
        tc = cj.get("workloads", {}).get(wl)
        fms, ems, cms = fb["ms"], tw.get("eager_ms"), tw.get("compile_ms")
        tbps = bm / (fms * 1e-3) / 1e12 if bm and fms else None
        pct = 100.0 * tbps / copy_tbps if tbps and copy_tbps else None
        floor_ms = bm / (copy_tbps * 1e12) * 1e3 if bm and copy_tbps else None
        e = {"bytes_moved": bm, "floor_ms": floor_ms,
             "fusec_ms": fms, "fusec_reps": fb["n"], "fusec_bench": fb["status"],
             "eager_ms": ems, "compile_ms": cms, "compile_s": tw.get("compile_s"),
             "eager_native_ms": tw.get("eager_native_ms"),
             "fusec_tbps": tbps, "pct_copy_bw": pct,
             "eager_tbps": bm / (ems * 1e-3) / 1e12 if bm and ems else None,
             "compile_tbps": bm / (cms * 1e-3) / 1e12 if bm and cms else None,
             "speedup_vs_compile": cms / fms if cms and fms else None,
             "speedup_vs_eager": ems / fms if ems and fms else None,
             "fusec_check": fc, "fusec_save_outputs": fsave,
             "torch_check": tc if tc is not None else {"status": "n/a"}}
        for k in ("eager_error", "compile_error"):
            if k in tw:
                e[k] = tw[k]
        results["workloads"][wl] = e
        fstat = fb["status"] if fms is None else None
        rows.append([wl,
                     _fmt(fms, ".4f") if fms is not None else _short(fstat),
                     _fmt(ems, ".4f"), _fmt(cms, ".4f"),
                     _fmt(tbps, ".2f"), _fmt(pct, ".1f"),
                     _fmt(e["speedup_vs_compile"], ".2f") + ("x" if e["speedup_vs_compile"] else ""),
                     f"{_short(fc['status'])} / {_short(e['torch_check'].get('status', 'n/a'))}"])

    head = ["workload", "fusec ms", "eager ms", "compile ms", "TB/s (fusec)", "% of copy BW",
            "speedup vs compile", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    md = [f"# fusec bench, {meta['date']}", "",
          f"GPU: {meta['gpu']}; commit: {meta['commit']}; torch {meta['torch']}; "
          f"median of {meta['reps']} reps (CUDA events, no cache flush); torch.compile default mode.",
          f"Copy bandwidth (device-to-device, read + write): {_fmt(copy_tbps, '.3f')} TB/s.",
          ""] + lines + ["",
          "check = fusec --check / float64 PyTorch check of fusec's outputs (ok, FAIL, n/a, timeout, error N).",
          "TB/s (fusec) = bytes moved (inputs read once + outputs written once) / fusec time; "
          "% of copy BW = that over the copy bandwidth.", ""]
    md.append("| workload | bytes moved | floor ms (at copy BW) | eager TB/s | compile TB/s | compile s |")
    md.append("|---|---|---|---|---|---|")
    for wl in workloads:
        e = results["workloads"][wl]
        md.append(f"| {wl} | {e['bytes_moved']} | {_fmt(e['floor_ms'], '.4f')} | "
                  f"{_fmt(e['eager_tbps'], '.2f')} | {_fmt(e['compile_tbps'], '.2f')} | "
                  f"{_fmt(e['compile_s'], '.1f')} |")
    md += ["", "Steps: " + "; ".join(f"{k}: {v}" for k, v in steps.items()), "",
           "Rows for docs/PERF.md (% of floor = floor time at copy bandwidth / fusec time):", "",
           "| date | GPU | commit | workload | fusec ms | eager ms | compile ms | vs eager | vs compile "
           "| % of floor | check |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    day = meta["date"].split()[0]
    gpu = meta["gpu"].split(",")[0].strip()
    commit = meta["commit"].split("+")[0][:12] + ("+dirty" if meta["commit"].endswith("+dirty") else "")
    for wl, r in zip(workloads, rows):
        e = results["workloads"][wl]
        md.append(f"| {day} | {gpu} | {commit} | {wl} | {r[1]} | {r[2]} | {r[3]} | "
                  f"{_fmt(e['speedup_vs_eager'], '.2f')}{'x' if e['speedup_vs_eager'] else ''} | {r[6]} "
                  f"| {r[5]} | {r[7]} |")
    text = "\n".join(md) + "\n"
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    write_json(args.out_json, results)
    print(text)
    return 0


# --------------------------------------------------------------------------

def _jsonable(v):
    """Strict JSON: NaN and infinities become the strings "nan", "inf", "-inf"."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def write_json(path, obj):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_jsonable(obj), f, indent=2, allow_nan=False, default=str)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--make-inputs", metavar="DIR", help="write bf16-representable .npy inputs")
    mode.add_argument("--check", metavar="DIR", help="check fusec's outputs against float64")
    mode.add_argument("--summary", metavar="WORK", help="write the final table from run-gpu.sh's WORK")
    ap.add_argument("--workloads", default=",".join(ORDER), help="comma list (default: all)")
    ap.add_argument("--ir-dir", default=HERE, help="where <workload>.ir live (default: bench/)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--copy-mib", type=int, default=2048, help="copy buffer size (each way)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--seed", type=int, default=None, help="--make-inputs seed (default: fresh)")
    ap.add_argument("--ref", choices=["auto", "torch", "numpy"], default="auto",
                    help="--check reference backend")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--md", help="--summary: markdown table here")
    ap.add_argument("--out-json", help="--summary: results JSON here")
    args = ap.parse_args(argv)

    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in INPUT_KINDS]
    if unknown:
        ap.error(f"unknown workload(s): {', '.join(unknown)} (known: {', '.join(ORDER)})")
    if args.summary:
        irs = {}
        for wl in workloads:  # a broken .ir must not cost the summary
            try:
                irs.update(load_irs(args.ir_dir, [wl]))
            except Exception as e:
                print(f"summary: {wl}: {e}", file=sys.stderr)
        return summary(args, workloads, irs)
    irs = load_irs(args.ir_dir, workloads)
    if args.make_inputs:
        return make_inputs(args, workloads, irs)
    if args.check:
        return check(args, workloads, irs)
    return bench(args, workloads, irs)


if __name__ == "__main__":
    sys.exit(main())
