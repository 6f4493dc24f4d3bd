#!/usr/bin/env python3
# test_gemv_host.py - the tensor-core GEMV kernel (codegen/cuda/gemv.c, a
# few rows against [N, K] weights), as fusec generates it, run on the host
# with tests/test_decode_host.h's emulation of the CUDA subset it uses (a
# block's threads as std::threads, mma.m16n8k16 by the PTX ISA's fragment
# layouts) and checked against a GEMM in double: sibling weights with their
# biases, a residual, a scale and an activation, N not a multiple of the
# 16 columns a block computes, a K of 3 steps a warp, every M from 3 to 8
# in some case, bf16 and f16. A check of the kernel's fragment and index
# logic where no GPU is; test_skinny runs the same shapes on one. Usage:
# python3 tests/test_gemv_host.py [BUILD/fusec]
import os, re, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_kernel
HERE = os.path.dirname(os.path.abspath(__file__))
FUSEC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', 'build', 'fusec'))
FAILS = 0

def kernel(ir, want='on tensor cores'):
    """The GEMV launch of graph text ir: its name, grid, block and source
    (the GEMV helpers and the kernel)."""
    open('g.ir', 'w').write(ir)
    plan = subprocess.run([FUSEC, 'g.ir', '--emit=plan'], capture_output=True, text=True).stdout
    m = re.search(r'kernel (fc_gemv_\w+) grid=\((\d+),1,1\) block=\((\d+),1,1\) ops: (.*)', plan)
    if not m or want not in m.group(4) or (want.endswith('halves') and 'total: 1 kernels' not in plan):
        print(f'no GEMV "{want}" as the one kernel of the plan:\n' + plan)
        sys.exit(2)
    global SUMMARY
    SUMMARY = m.group(4)
    name = m.group(1)
    src = subprocess.run([FUSEC, 'g.ir', '--emit=cuda'], capture_output=True, text=True).stdout
    start = src.index('#ifndef FC_GV_HELPERS')
    head = src.index(f'{name}(', start)
    end = src.index('\n}\n', head) + 3
    return name, int(m.group(2)), int(m.group(3)), src[start:end]

def case(M, K, ns, dt, bias, residual, act, scale, Kp=None):
    """y [M, N] = act(scale x W^T + bias + residual), W the weights [n_i, K]
    of ns concatenated by column. Kp: the padding pass's K (K odd), x's rows
    staged with their zeros by the kernel and the weights passed padded, as
    the load-time pad makes them."""
    global FAILS
    T = {'bf16': '__nv_bfloat16', 'f16': '__half'}[dt]
    conv = {'bf16': '__float2bfloat16_rn', 'f16': '__float2half_rn'}[dt]
    N = sum(ns)
    params = [f'%x: {dt}[{M}, {K}]'] + [f'%w{i}: {dt}[{n}, {K}]' for i, n in enumerate(ns)]
    args = ['%x'] + [f'%w{i}' for i in range(len(ns))]
    if bias:
        params += [f'%b{i}: {dt}[{n}]' for i, n in enumerate(ns)]
        args += [f'%b{i}' for i in range(len(ns))]
    if residual:
        params.append(f'%r: {dt}[{M}, {N}]')
        args.append('%r')
    spec = f'[0, 1, {len(ns)}, {int(bias)}, {int(residual)}, {act}]'
    ir = (f'graph t({", ".join(params)}) {{\n  %y = gemm({", ".join(args)}, to={dt}, spec={spec}, scale={scale})\n'
          f'  return %y\n}}\n')
    name, gx, th, body = kernel(ir)
    arrays = ['x'] + [f'w{i}' for i in range(len(ns))] + ([f'b{i}' for i in range(len(ns))] if bias else []) + (['r'] if residual else [])
    KW = Kp or K  # the weights' rows as the kernel reads them
    sizes = {'x': M * K, 'r': M * N}
    for i, n in enumerate(ns):
        sizes[f'w{i}'] = n * KW
        sizes[f'b{i}'] = n
    decl = '\n'.join(f'  std::vector<T> {a}({sizes[a]}); for (auto &v : {a}) v = {conv}(U(rng));' for a in arrays)
    if Kp:  # the pad's zeros: columns K .. Kp of every weight row
        decl += '\n' + '\n'.join(f'  for (size_t i = 0; i < w{i}.size(); i++) if (i % {Kp} >= {K}) w{i}[i] = {conv}(0.f);'
                                  for i in range(len(ns)))
    ref_w = '\n'.join(f'    if (n >= c && n < c + {n}) {{ const T *w = &w{i}[(size_t)(n - c) * {KW}]; for (int k = 0; k < K; k++) s += '
                      f'(double)fc_ld(x[(size_t)m * K + k]) * fc_ld(w[k]); s *= {scale};'
                      + (f' s += fc_ld(b{i}[n - c]);' if bias else '') + f' }} c += {n};'
                      for i, n in enumerate(ns))
    main = f'''
#include <random>
typedef {T} T;
int main() {{
  const int M = {M}, K = {K}, N = {N};
  std::mt19937 rng(7); std::uniform_real_distribution<float> U(-1.f, 1.f);
{decl}
  std::vector<T> y((size_t)M * N);
  launch({gx}, 1, {th}, 1, [&] {{ {name}({", ".join(a + ".data()" for a in arrays)}, y.data()); }});
  double worst = 0;
  for (int m = 0; m < M; m++) for (int n = 0; n < N; n++) {{
    double s = 0; int c = 0;
{ref_w}
    {"s += fc_ld(r[(size_t)m * N + n]);" if residual else ""}
    {"s = s > 0 ? s : 0;" if act == 1 else "s = 0.5 * s * (1 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));" if act == 2 else ""}
    worst = std::max(worst, std::fabs(fc_ld(y[(size_t)m * N + n]) - s) / (1 + std::fabs(s)));
  }}
  printf("M %d N %d ({'+'.join(map(str, ns))}) K %d {dt}: grid %d of %d threads, worst error %.3g\\n", M, N, K, {gx}, {th}, worst);
  return worst < {0.01 if dt == 'bf16' else 0.002} ? 0 : 1;
}}
'''
    FAILS += not host_kernel.run(body + main)

def gate_case(M, K, F, dt, tc):
    """y [M, F] = silu(x W0^T) * (x W1^T), a SwiGLU MLP's gate and up: one
    GEMV of the two weights whose epilogue evaluates the gate (the kernel
    on tensor cores where tc, else on CUDA cores), against the same in
    double (the gate's values in f32 inside the kernel: no rounding of the
    two products to the type)."""
    global FAILS
    T = {'bf16': '__nv_bfloat16', 'f16': '__half'}[dt]
    conv = {'bf16': '__float2bfloat16_rn', 'f16': '__float2half_rn'}[dt]
    ir = (f'graph t(%x: {dt}[{M}, {K}], %w0: {dt}[{F}, {K}], %w1: {dt}[{F}, {K}]) {{\n'
          f'  %w0t = permute(%w0, perm=[1, 0])\n  %g = matmul(%x, %w0t)\n'
          f'  %w1t = permute(%w1, perm=[1, 0])\n  %u = matmul(%x, %w1t)\n'
          f'  %s = silu(%g)\n  %y = mul(%s, %u)\n  return %y\n}}\n')
    name, gx, th, body = kernel(ir, ', then slice,slice,cast,sigmoid,mul,cast,mul of its halves')
    if ('on tensor cores' in SUMMARY) != tc:
        print('the gate case wants the kernel ' + ('on' if tc else 'off') + ' tensor cores: ' + SUMMARY)
        sys.exit(2)
    main = f'''
#include <random>
typedef {T} T;
int main() {{
  const int M = {M}, K = {K}, F = {F};
  std::mt19937 rng(11); std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<T> x(M * K), w0(F * K), w1(F * K);
  for (auto *a : {{&x, &w0, &w1}}) for (auto &v : *a) v = {conv}(U(rng));
  std::vector<T> y((size_t)M * F);
  launch({gx}, 1, {th}, 1, [&] {{ {name}(x.data(), w0.data(), w1.data(), y.data()); }});
  double worst = 0;
  for (int m = 0; m < M; m++) for (int p = 0; p < F; p++) {{
    double g = 0, u = 0;
    for (int k = 0; k < K; k++) {{
      g += (double)fc_ld(x[m * K + k]) * fc_ld(w0[(size_t)p * K + k]);
      u += (double)fc_ld(x[m * K + k]) * fc_ld(w1[(size_t)p * K + k]);
    }}
    const double s = g / (1 + std::exp(-g)) * u;
    worst = std::max(worst, std::fabs(fc_ld(y[(size_t)m * F + p]) - s) / (1 + std::fabs(s)));
  }}
  printf("gate M %d F %d K %d {dt}: grid %d of %d threads, worst error %.3g\\n", M, F, K, {gx}, {th}, worst);
  return worst < {0.01 if dt == 'bf16' else 0.002} ? 0 : 1;
}}
'''
    FAILS += not host_kernel.run(body + main)

os.chdir(tempfile.mkdtemp(prefix='fc_gemv_host_'))
case(3, 512, [24, 17], 'bf16', True, True, 1, 0.5)   # siblings, biases, residual, relu, N 41
case(8, 2048, [32], 'f16', True, False, 2, 1.0)      # gelu_tanh, 16 warps of 2 steps
case(5, 768, [20], 'bf16', False, False, 0, 1.0)     # 3 steps a warp, N 20
case(8, 256, [16, 16, 9], 'bf16', False, True, 0, 1.0)  # three siblings, one step a warp
case(7, 2304, [16], 'bf16', True, True, 0, 1.0)      # 8 warps of 9 steps: loads in three rounds
case(7, 8192, [16], 'bf16', True, True, 0, 1.0)      # 16 warps of 16 steps: loads in two rounds
case(4, 512, [33], 'f16', False, False, 1, 2.0)
case(6, 512, [16], 'bf16', False, False, 0, 1.0)
case(5, 767, [4096], 'bf16', False, False, 0, 1.0, Kp=768)  # odd K: x's rows padded inside (x unaligned rows)
gate_case(8, 512, 40, 'bf16', True)    # a SwiGLU gate in the epilogue: 8 pairs a block, F not a multiple of 8
gate_case(3, 1024, 16, 'f16', True)
gate_case(1, 512, 37, 'bf16', False)   # CUDA cores: a pair a warp group
gate_case(2, 768, 24, 'f16', False)
print('test_gemv_host:', 'FAIL' if FAILS else 'ok')
sys.exit(1 if FAILS else 0)
