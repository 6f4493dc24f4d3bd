/*
 * decode.c - CUDA kernels for the ops of decoding with a key/value cache
 * (docs/DECODE.md): update_slice and cache_attention, in static plans.
 *
 * Both read their run-time integer (the offset, the key/value length) from
 * device memory inside the kernel, so a replayed CUDA Graph serves every
 * step with the same node parameters: the caller changes the position in
 * its buffer, not the launch. The host never sees that value, so a bad
 * one cannot be an error of the call here; the kernels keep every access
 * inside the buffers instead: update_slice writes nothing for an offset
 * out of range, cache_attention clamps the length to the cache.
 *
 * update_slice writes only the new rows: its result is its destination's
 * buffer (passes/memplan.c), the inout parameter.
 *
 * cache_attention (flash-decoding): a grid of (batch x query head x
 * query) rows by SPLIT parts of the keys, SPLIT chosen so that the grid
 * fills the GPU about twice over. In a block of DEC_WARPS warps the warps
 * share the part's keys, each with an online softmax (max, sum, and the
 * weighted values: Dv / 32 per lane); the block merges its warps in shared
 * memory, writes its partial result to a module-scope buffer, and the
 * row's last block (a counter per row, the threadFenceReduction pattern)
 * merges the parts and writes the result. Lanes hold the head dimension,
 * so a key is one coalesced row read and a warp-shuffle sum. Query head h
 * reads key/value head h / (Hq / Hkv) (grouped-query attention).
 */
#include "decode.h"
#include "emit.h"
#include "passes/attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DEC_WARPS 8

bool fc_cuda_is_decode_group(const fc_group *gr) {
    return gr->kind == FC_GROUP_LIBRARY && gr->nnodes == 1 &&
           (gr->nodes[0]->op == FC_OP_UPDATE_SLICE || gr->nodes[0]->op == FC_OP_CACHE_ATTENTION);
}

static int arg_of(const fc_group *gr, const fc_value *v) {
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return i;
    FC_UNREACHABLE("a decode operand that is not a group input");
}

static const char *index_type(fc_dtype dt) { return dt == FC_I64 ? "long long" : "int"; }

static bool is_group_input(const fc_value *v, void *arg) {
    const fc_group *gr = arg;
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i] == v) return true;
    return false;
}

/* Operand v as the kernel reads it: a group input, or a view of one that
 * fusion left unstored (passes/fuse.c: the new keys and values and the
 * queries straight from the QKV projection's buffer), as strides into it. */
static fc_strided_view operand_view(const fc_group *gr, const fc_value *v) {
    fc_strided_view view;
    if (!fc_attention_view(v, is_group_input, (void *)gr, &view))
        FC_UNREACHABLE("a decode operand that is not a strided view of a group input");
    return view;
}

/* The C expression of the element offset of v's element at row-major
 * linear index `lin` (a name in the kernel) through view vw. */
static void strided_index(fc_strbuf *s, const fc_value *v, const fc_strided_view *vw, const char *lin) {
    fc_strbuf_printf(s, "(%lldLL", (long long)vw->offset);
    int64_t inner = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->dims[d] != 1 && vw->stride[d] != 0)
            fc_strbuf_printf(s, " + ((%s / %lldLL) %% %lldLL) * %lldLL", lin, (long long)inner, (long long)v->dims[d],
                             (long long)vw->stride[d]);
        inner *= v->dims[d];
    }
    fc_strbuf_printf(s, ")");
}

/* The kernel's parameters: every group input as a const pointer, then the
 * one output. */
static void signature(fc_strbuf *s, const fc_group *gr, const char *name, unsigned threads) {
    fc_strbuf_printf(s, "extern \"C\" __global__ void __launch_bounds__(%u) %s(", threads, name);
    for (int i = 0; i < gr->ninputs; i++)
        fc_strbuf_printf(s, "const %s *__restrict__ a%d, ", fc_cuda_storage_type(gr->inputs[i]->dtype), i);
    fc_strbuf_printf(s, "%s *out) {\n", fc_cuda_storage_type(gr->outputs[0]->dtype));
    /* A programmatic dependent (fc_launch.pdl): every thread waits for the
     * kernel before, which wrote what this one reads (the new rows, the
     * queries), before anything else; a thread that left without waiting
     * could let the grid end before that kernel has. Then the kernel
     * after may launch and fetch its weights while this one runs. */
    fc_strbuf_printf(s, "#if __CUDA_ARCH__ >= 900\n  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n#endif\n"
                        "  fc_dependents_may_launch();\n");
}

static int64_t prod(const fc_value *v, int from, int to) {
    int64_t n = 1;
    for (int d = from; d < to; d++) n *= v->dims[d];
    return n;
}

static fc_status update_slice(const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l) {
    const fc_node *n = gr->nodes[0];
    const fc_value *dst = n->in[0], *src = n->in[1];
    int ax = (int)(n->a.axis < 0 ? n->a.axis + dst->rank : n->a.axis);
    int64_t inner = prod(dst, ax + 1, dst->rank), len = dst->dims[ax], slen = src->dims[ax];
    int64_t total = prod(src, 0, src->rank), room = len - slen;
    fc_strided_view sv = operand_view(gr, src);
    int is = arg_of(gr, sv.root), io = arg_of(gr, n->in[2]);
    const unsigned threads = 256;
    signature(s, gr, name, threads);
    fc_strbuf_printf(s,
                     "  const long long off = (long long)*(const %s *)a%d;\n"
                     "  if (off < 0 || off > %lldLL) return; /* out of range: nothing is written */\n"
                     "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < %lldLL;\n"
                     "       i += (long long)gridDim.x * blockDim.x) {\n"
                     "    const long long o = i / %lldLL, r = i %% %lldLL;\n"
                     "    out[(o * %lldLL + off) * %lldLL + r] = a%d[",
                     index_type(n->in[2]->dtype), io, (long long)room, (long long)total, (long long)(slen * inner),
                     (long long)(slen * inner), (long long)len, (long long)inner, is);
    strided_index(s, src, &sv, "i");
    fc_strbuf_printf(s, "];\n  }\n}\n");
    int64_t blocks = (total + threads - 1) / threads;
    l->grid[0] = (unsigned)(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks);
    l->grid[1] = l->grid[2] = 1;
    l->block[0] = threads;
    l->block[1] = l->block[2] = 1;
    return FC_OK;
}

/* Blocks per query row: enough rows x splits to fill the H200's 132 SMs
 * about twice, each split at least MIN_KEYS keys of the cache. */
#define DEC_TARGET_BLOCKS 264
#define DEC_MIN_KEYS 32

static fc_status cache_attention(const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l) {
    const fc_node *n = gr->nodes[0];
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
    int64_t B = q->dims[0], Hq = q->dims[1], Sq = q->dims[2], D = q->dims[3];
    int64_t Hkv = k->dims[1], S = k->dims[2], Dv = v->dims[3];
    if (Hkv < 1 || Hq % Hkv) return FC_ERR_INPUT;
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    int ND = (int)((D + 31) / 32), NV = (int)((Dv + 31) / 32);
    fc_strided_view qv = operand_view(gr, q);
    int iq = arg_of(gr, qv.root), ik = arg_of(gr, k), iv = arg_of(gr, v), il = arg_of(gr, n->in[3]);
    int64_t rows = B * Hq * Sq;
    int64_t split = (DEC_TARGET_BLOCKS + rows - 1) / (rows > 0 ? rows : 1);
    int64_t most = S / DEC_MIN_KEYS;
    if (split > most) split = most;
    if (split < 1) split = 1;
    if (split > 64) split = 64;
    const unsigned threads = 32 * DEC_WARPS;
    char sc[40];
    snprintf(sc, sizeof sc, "%.17g", scale);
    /* The splits' partial results and one counter per row live in the
     * module (static shapes: their sizes are known here). Launches of one
     * program run in stream order, so every launch of this kernel may use
     * them; the last block of a row resets its counter. */
    fc_strbuf_printf(s, "__device__ float %s_part[%lld];\n__device__ unsigned %s_count[%lld];\n", name,
                     (long long)(rows * split * (NV * 32 + 2)), name, (long long)(rows > 0 ? rows : 1));
    /* Where the query element at row-major index i is (its view). */
    fc_strbuf_printf(s, "static __device__ __forceinline__ long long %s_q(long long i) { return ", name);
    strided_index(s, q, &qv, "i");
    fc_strbuf_printf(s, "; }\n");
    signature(s, gr, name, threads);
    fc_strbuf_printf(s,
                     "  enum { D = %lld, DV = %lld, S = %lld, SQ = %lld, ND = %d, NV = %d, W = %d, SPLIT = %lld, PW = NV * 32 + 2 };\n"
                     "  __shared__ float sm_m[W], sm_l[W], sm_acc[W][NV * 32];\n"
                     "  __shared__ bool last;\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
                     "  const long long row = blockIdx.x; /* (b * Hq + h) * SQ + i */\n"
                     "  const int part = blockIdx.y;\n"
                     "  const long long i = row %% SQ, bh = row / SQ, b = bh / %lld, h = bh %% %lld;\n"
                     "  const long long kvh = b * %lld + h / %lld;\n"
                     "  long long len = (long long)*(const %s *)a%d;\n"
                     "  len = len < 0 ? 0 : len > S ? S : len; /* never past the cache */\n"
                     "  long long nk = %s;\n"
                     "  nk = nk < 0 ? 0 : nk > len ? len : nk;\n"
                     "  const long long chunk = (nk + SPLIT - 1) / SPLIT, j0 = part * chunk;\n"
                     "  const long long j1 = j0 + chunk < nk ? j0 + chunk : nk;\n"
                     "  float qr[ND], acc[NV];\n"
                     "  for (int e = 0; e < ND; e++) { int d = lane + 32 * e; qr[e] = d < D ? fc_ld(a%d[%s_q(row * D + d)]) * (float)%s : 0.f; }\n"
                     "  for (int e = 0; e < NV; e++) acc[e] = 0.f;\n"
                     "  float m = -INFINITY, l = 0.f;\n"
                     "  const auto *kp = a%d + kvh * S * D;\n"
                     "  const auto *vp = a%d + kvh * S * DV;\n"
                     "  for (long long j = j0 + warp; j < j1; j += W) {\n"
                     "    float sdot = 0.f;\n"
                     "    for (int e = 0; e < ND; e++) { int d = lane + 32 * e; if (d < D) sdot += qr[e] * fc_ld(kp[j * D + d]); }\n"
                     "    for (int o = 16; o > 0; o >>= 1) sdot += __shfl_xor_sync(0xffffffffu, sdot, o);\n"
                     "    const float mn = fmaxf(m, sdot), c = expf(m - mn), p = expf(sdot - mn);\n"
                     "    l = l * c + p;\n"
                     "    for (int e = 0; e < NV; e++) { int d = lane + 32 * e; acc[e] = acc[e] * c + (d < DV ? p * fc_ld(vp[j * DV + d]) : 0.f); }\n"
                     "    m = mn;\n"
                     "  }\n"
                     "  if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }\n"
                     "  for (int e = 0; e < NV; e++) sm_acc[warp][lane + 32 * e] = acc[e];\n"
                     "  __syncthreads();\n"
                     "  /* this block's keys: the warps merged into one partial result */\n"
                     "  float *mine = %s_part + (row * SPLIT + part) * PW;\n"
                     "  if (warp == 0) {\n"
                     "    float M = -INFINITY;\n"
                     "    for (int w = 0; w < W; w++) M = fmaxf(M, sm_m[w]);\n"
                     "    float L = 0.f, o[NV];\n"
                     "    for (int e = 0; e < NV; e++) o[e] = 0.f;\n"
                     "    for (int w = 0; w < W; w++) {\n"
                     "      const float c = sm_m[w] == -INFINITY ? 0.f : expf(sm_m[w] - M);\n"
                     "      L += sm_l[w] * c;\n"
                     "      for (int e = 0; e < NV; e++) o[e] += sm_acc[w][lane + 32 * e] * c;\n"
                     "    }\n"
                     "    if (SPLIT == 1) {\n"
                     "      for (int e = 0; e < NV; e++) { int d = lane + 32 * e; if (d < DV) out[row * DV + d] = fc_to<%s>(o[e] / L); }\n"
                     "    } else {\n"
                     "      for (int e = 0; e < NV; e++) mine[2 + lane + 32 * e] = o[e];\n"
                     "      if (lane == 0) { mine[0] = M; mine[1] = L; }\n"
                     "      __threadfence();\n"
                     "      if (lane == 0) last = atomicAdd(&%s_count[row], 1u) == SPLIT - 1;\n"
                     "      __syncwarp();\n"
                     "    }\n"
                     "  }\n"
                     "  __syncthreads();\n"
                     "  if (SPLIT == 1 || !last || warp != 0) return;\n"
                     "  /* the row's last block: merge the splits (flash-decoding) */\n"
                     "  __threadfence();\n"
                     "  const volatile float *all = %s_part + row * SPLIT * PW;\n"
                     "  float M = -INFINITY;\n"
                     "  for (int t = 0; t < SPLIT; t++) M = fmaxf(M, all[t * PW]);\n"
                     "  float L = 0.f, o[NV];\n"
                     "  for (int e = 0; e < NV; e++) o[e] = 0.f;\n"
                     "  for (int t = 0; t < SPLIT; t++) {\n"
                     "    const float mt = all[t * PW], c = mt == -INFINITY ? 0.f : expf(mt - M);\n"
                     "    L += all[t * PW + 1] * c;\n"
                     "    for (int e = 0; e < NV; e++) o[e] += all[t * PW + 2 + lane + 32 * e] * c;\n"
                     "  }\n"
                     "  for (int e = 0; e < NV; e++) { int d = lane + 32 * e; if (d < DV) out[row * DV + d] = fc_to<%s>(o[e] / L); }\n"
                     "  if (lane == 0) %s_count[row] = 0u;\n"
                     "}\n",
                     (long long)D, (long long)Dv, (long long)S, (long long)Sq, ND, NV, DEC_WARPS, (long long)split,
                     (long long)Hq, (long long)Hq, (long long)Hkv, (long long)(Hq / Hkv), index_type(n->in[3]->dtype), il,
                     n->a.causal ? "len - SQ + i + 1" : "len", iq, name, sc, ik, iv, name,
                     fc_cuda_storage_type(n->out[0]->dtype), name, name, fc_cuda_storage_type(n->out[0]->dtype), name);
    l->grid[0] = (unsigned)(rows < 1 ? 1 : rows);
    l->grid[1] = (unsigned)split;
    l->grid[2] = 1;
    l->block[0] = threads;
    l->block[1] = l->block[2] = 1;
    return FC_OK;
}

fc_status fc_cuda_emit_decode(const fc_plan *plan, const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l) {
    fc_graph *g = plan->g;
    if (plan->dynamic)
        return fc_set_error(g->ctx, FC_ERR_UNSUPPORTED,
                            "codegen: group %d (%s): %s has no dynamic kernel (bind the symbols; docs/DECODE.md)", gr->id,
                            l->summary, fc_op_table[gr->nodes[0]->op].name);
    l->kind = FC_LAUNCH_KERNEL;
    l->pdl = true;
    fc_status st = gr->nodes[0]->op == FC_OP_UPDATE_SLICE ? update_slice(gr, name, s, l) : cache_attention(gr, name, s, l);
    if (st == FC_ERR_INPUT)
        return fc_set_error(g->ctx, st, "codegen: group %d (%s): query heads not a multiple of key/value heads", gr->id,
                            l->summary);
    return s->oom ? fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)") : st;
}
