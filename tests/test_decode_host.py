#!/usr/bin/env python3
# test_decode_host.py - cache_attention's CUDA kernels, as fusec generates
# them, run on the host: test_decode_host.h emulates the CUDA subset they
# use (a block's threads are std::threads, the warps' shuffles and MMAs
# rendezvous through barriers, mma.m16n8k16 by the PTX ISA's fragment
# layouts, a cluster's blocks run at once with a copy of each __shared__
# array a block, which fc_cluster_ld reads across), g++ compiles each
# kernel with it, and each result is checked against a softmax attention
# in double (the shapes of test_decode's attention cases, the vector
# kernel's and the one of a lane per element too, the parts merged in a
# cluster and through global memory, and the fused cache updates, whose
# cache writes must equal the update's). A check of the kernels' index
# logic where no GPU is (test_decode runs them on one); a few minutes on
# two cores; not a ctest. Usage: python3 tests/test_decode_host.py [BUILD/fusec]
import os, re, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_kernel
HERE = os.path.dirname(os.path.abspath(__file__))
FUSEC = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', 'build', 'fusec'))
FAILS = 0
F_IR = """graph t(%q: bf16[1, 32, 4, 64], %kc: inout bf16[1, 8, 512, 64], %vc: inout bf16[1, 8, 512, 64],
        %kn: bf16[1, 8, 4, 64], %vn: bf16[1, 8, 4, 64], %off: i32[], %len: i32[]) {
  %uk = update_slice(%kc, %kn, %off, axis=2)
  %uv = update_slice(%vc, %vn, %off, axis=2)
  %o = cache_attention(%q, %uk, %uv, %len)
  return %o
}
"""
SHARED = re.compile(r'__shared__ ((?:__align__\(\d+\) )?[A-Za-z_][\w ]*?) (\w+(?:\[[^\]]+\])*(?:, \w+(?:\[[^\]]+\])*)*);')
def per_rank(m):
    """A __shared__ declaration as test_decode_host.h runs it: each array a
    static of one copy a cluster rank, registered, and a reference to the
    block's own."""
    out = []
    for d in m.group(2).split(', '):
        n = re.match(r'\w+', d).group(0)
        dims = d[len(n):]
        out.append(f'static {m.group(1)} {n}_c[FC_MAX_CLUSTER]{dims}; static fc_shared_reg {n}_r({n}_c, sizeof {n}_c[0]); '
                   f'auto &{n} = {n}_c[fc_rank_];')
    return ' '.join(out)

def kernel(ir):
    """The cache_attention launch of graph text ir: its name, grid, block,
    blocks a cluster and its source (from its query index helper to the end
    of the unit, its __shared__ declarations per cluster rank)."""
    open('g.ir', 'w').write(ir)
    plan = subprocess.run([FUSEC, 'g.ir', '--emit=plan'], capture_output=True, text=True).stdout
    m = re.search(r'kernel (fc_cache_attention_\w+) grid=\((\d+),(\d+),1\) block=\((\d+),1,1\)', plan)
    name = m.group(1)
    src = subprocess.run([FUSEC, 'g.ir', '--emit=cuda'], capture_output=True, text=True).stdout
    body = src[src.index(f'static __device__ __forceinline__ long long {name}_q'):]
    c = re.search(r'__cluster_dims__\(1, (\d+), 1\) __launch_bounds__\(\d+, \d+\) ' + name + r'\(', body)
    return name, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(c.group(1)) if c else 1, SHARED.sub(per_rank, body)

def run(text):
    """Compiles a kernel and its check with the emulation and runs it."""
    global FAILS
    FAILS += not host_kernel.run(text)

def case(B, hq, hkv, sq, S, D, Dv, dt, causal, lens):
    ir = f'''graph t(%q: {dt}[{B}, {hq}, {sq}, {D}], %k: {dt}[{B}, {hkv}, {S}, {D}], %v: {dt}[{B}, {hkv}, {S}, {Dv}], %len: i32[]) {{
  %o = cache_attention(%q, %k, %v, %len{'' if causal else ', causal=false'})
  return %o
}}
'''
    name, gx, gy, th, cy, body = kernel(ir)
    T = {'bf16': '__nv_bfloat16', 'f16': '__half', 'f32': 'float'}[dt]
    conv = {'bf16': '__float2bfloat16_rn', 'f16': '__float2half_rn', 'f32': '(float)'}[dt]
    main = f'''
#include <random>
int main() {{
  const int B = {B}, HQ = {hq}, HKV = {hkv}, SQ = {sq}, S = {S}, D = {D}, DV = {Dv}; const bool causal = {str(causal).lower()};
  std::mt19937 rng(5); std::uniform_real_distribution<float> U(-2.f, 2.f);
  std::vector<{T}> q((size_t)B*HQ*SQ*D), k((size_t)B*HKV*S*D), v((size_t)B*HKV*S*DV), out((size_t)B*HQ*SQ*DV);
  for (auto &x : q) x = {conv}(U(rng)); for (auto &x : k) x = {conv}(U(rng)); for (auto &x : v) x = {conv}(U(rng) / 2);
  double worst = 0;
  for (int len : {{{', '.join(map(str, lens))}}}) {{
    launch({gx}, {gy}, {th}, {cy}, [&] {{ {name}(q.data(), k.data(), v.data(), &len, out.data()); }});
    for (int b = 0; b < B; b++) for (int h = 0; h < HQ; h++) for (int i = 0; i < SQ; i++) {{
      const int kv = b * HKV + h / (HQ / HKV), nk = causal ? len - SQ + i + 1 : len;
      const {T} *qr = &q[(((size_t)b * HQ + h) * SQ + i) * D];
      std::vector<double> s(nk); double mx = -1e300;
      for (int j = 0; j < nk; j++) {{ double d = 0; for (int e = 0; e < D; e++) d += (double)fc_ld(qr[e]) * fc_ld(k[((size_t)kv * S + j) * D + e]); s[j] = d / std::sqrt((double)D); mx = std::max(mx, s[j]); }}
      double L = 0; for (int j = 0; j < nk; j++) {{ s[j] = std::exp(s[j] - mx); L += s[j]; }}
      for (int e = 0; e < DV; e++) {{ double o = 0; for (int j = 0; j < nk; j++) o += s[j] * fc_ld(v[((size_t)kv * S + j) * DV + e]);
        double got = fc_ld(out[(((size_t)b * HQ + h) * SQ + i) * DV + e]); worst = std::max(worst, std::fabs(got - o / L)); }}
    }}
  }}
  printf("%s grid %dx%d of %d threads, clusters of %d: worst abs error %.3g\\n", "{B},{hq},{hkv},{sq},{S},{D},{Dv},{dt},{causal}", {gx}, {gy}, {th}, {cy}, worst);
  return worst < 0.02 ? 0 : 1;
}}
'''
    run(body + main)
def fused(sq, hq=32, hkv=8, S=512):
    """The fused updates of a cache of S (parameters: the kernel loads its
    first rows before its wait) at offsets 0, 137 and the end: hq = 32, hkv =
    8 runs the tensor-core kernel, hq = hkv the vector kernel."""
    ir = F_IR.replace('1, 32, 4, 64', f'1, {hq}, {sq}, 64').replace('1, 8, 4, 64', f'1, {hkv}, {sq}, 64')
    ir = ir.replace('1, 8, 512, 64', f'1, {hkv}, {S}, 64')
    name, gx, gy, th, cy, body = kernel(ir)
    main = f'''
#include <random>
int main() {{
  const int HQ = {hq}, HKV = {hkv}, SQ = {sq}, S = {S}, D = 64;
  std::mt19937 rng(9); std::uniform_real_distribution<float> U(-2.f, 2.f);
  typedef __nv_bfloat16 T;
  std::vector<T> q(HQ*SQ*D), kc(HKV*S*D), vc(HKV*S*D), kn(HKV*SQ*D), vn(HKV*SQ*D), out(HQ*SQ*D);
  for (auto *a : {{&q, &kc, &vc, &kn, &vn}}) for (auto &x : *a) x = __float2bfloat16_rn(U(rng));
  double worst = 0; int bad = 0;
  for (int off : {{0, 137, S - SQ}}) {{
    std::vector<T> k2 = kc, v2 = vc; int len = off + SQ;
    launch({gx}, {gy}, {th}, {cy}, [&] {{ {name}(q.data(), k2.data(), v2.data(), &len, kn.data(), &off, vn.data(), out.data(), k2.data(), v2.data()); }});
    std::vector<T> kr = kc, vr = vc;
    for (int h = 0; h < HKV; h++) for (int i = 0; i < SQ; i++) for (int e = 0; e < D; e++)
      kr[(h * S + off + i) * D + e] = kn[(h * SQ + i) * D + e], vr[(h * S + off + i) * D + e] = vn[(h * SQ + i) * D + e];
    for (size_t t = 0; t < kr.size(); t++) bad += kr[t].b != k2[t].b || vr[t].b != v2[t].b;
    for (int h = 0; h < HQ; h++) for (int i = 0; i < SQ; i++) {{
      const int kv = h / (HQ / HKV), nk = len - SQ + i + 1;
      std::vector<double> s(nk); double mx = -1e300;
      for (int j = 0; j < nk; j++) {{ double d = 0; for (int e = 0; e < D; e++) d += (double)fc_ld(q[(h * SQ + i) * D + e]) * fc_ld(kr[(kv * S + j) * D + e]); s[j] = d / 8.0; mx = std::max(mx, s[j]); }}
      double L = 0; for (int j = 0; j < nk; j++) {{ s[j] = std::exp(s[j] - mx); L += s[j]; }}
      for (int e = 0; e < D; e++) {{ double o = 0; for (int j = 0; j < nk; j++) o += s[j] * fc_ld(vr[(kv * S + j) * D + e]);
        worst = std::max(worst, std::fabs(fc_ld(out[(h * SQ + i) * D + e]) - o / L)); }}
    }}
  }}
  printf("fused Hq=%d Hkv=%d Sq=%d S=%d grid %dx%d of %d threads, clusters of %d: worst abs error %.3g, cache elements wrong %d\\n", HQ, HKV, SQ, S, {gx}, {gy}, {th}, {cy}, worst, bad);
  return worst < 0.05 && !bad ? 0 : 1;
}}
'''
    run(body + main)

cases = [
    (1, 8, 2, 1, 512, 64, 64, 'bf16', True, [1, 171, 512]),
    (1, 8, 2, 3, 512, 64, 64, 'bf16', True, [3, 259, 511]),
    (1, 32, 8, 1, 2048, 64, 64, 'bf16', True, [683, 2048]),
    (1, 32, 8, 4, 512, 64, 64, 'bf16', True, [4, 259]),
    (1, 12, 12, 4, 300, 64, 64, 'bf16', True, [101, 300]),
    (2, 8, 2, 1, 512, 128, 128, 'bf16', True, [1, 257]),
    (1, 8, 2, 3, 256, 128, 128, 'bf16', False, [1, 131, 256]),
    (1, 4, 1, 1, 300, 80, 80, 'bf16', True, [101, 153]),
    (1, 4, 2, 2, 200, 64, 32, 'f16', True, [2, 103]),
    (1, 16, 4, 1, 1000, 32, 32, 'bf16', True, [334, 999]),
    (1, 6, 2, 2, 333, 96, 128, 'f16', True, [112, 333]),
    (1, 2, 2, 8, 160, 64, 64, 'bf16', True, [8, 83, 160]),
    (1, 12, 12, 20, 64, 64, 64, 'bf16', True, [20, 35, 64]),
    (3, 4, 4, 1, 96, 64, 64, 'bf16', True, [1, 49, 96]),
    (1, 2, 1, 1, 8192, 64, 64, 'bf16', True, [2731, 8192]),
    (1, 4, 1, 1, 512, 256, 256, 'bf16', True, [300]),  # the vector kernel
    (1, 8, 8, 1, 256, 64, 64, 'f32', True, [1, 200]),
    (1, 2, 1, 2, 64, 33, 33, 'f32', True, [2, 40]),  # one lane per element
]

os.chdir(tempfile.mkdtemp(prefix='decode_host_'))
for c in cases:
    case(*c)
for sq in (1, 4):
    fused(sq)
fused(1, 8, 8)
fused(1, 32, 8, 2048)  # Llama 1B's step: a cluster of 8 blocks of 16 warps
fused(1, 12, 12, 1024)  # GPT-2's step
print('test_decode_host: %d failed' % FAILS)
sys.exit(1 if FAILS else 0)
