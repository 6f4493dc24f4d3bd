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
 * cache_attention (flash-decoding) has three kernels. Where the key and
 * value rows are bf16 or f16 of whole 16-byte chunks, up to 128 elements,
 * the tensor-core kernel (mma_kernel): a block per (batch, key/value head,
 * up to 8 of its query rows) and part of the keys, each warp 16 keys at a
 * time, the scores and the weighted values MMAs whose operands are the
 * rows' 16-byte loads as they come (a step is bound by its instructions
 * and its loads' latency, not by arithmetic: the CUDA-core kernel below
 * issued an instruction for every 1.3 bytes it read). Other whole 16-byte
 * chunks (f32, or up to 32 chunks), the vector kernel (vector_kernel): the
 * same blocks, lanes reading a key row in 16-byte loads, several keys a
 * warp and several loads a lane in flight. Both read a key once for every
 * query head of its group (grouped-query attention) and every query.
 * Otherwise the kernel of one lane per element: a grid of (batch x query
 * head x query) rows by parts of the keys; in a block of DEC_WARPS warps
 * the warps share the part's keys, each with an online softmax (max, sum,
 * and the weighted values: Dv / 32 per lane). Each chooses its parts so
 * that the grid fills the GPU about twice over, and each block merges its
 * warps in shared memory. In the vector and the tensor-core kernels on sm
 * 90, the parts of a row group are one thread-block cluster of at most 8
 * blocks (parts_of: more parts become fewer blocks of more warps): each
 * block keeps its partial result (max, sum, weighted values) in its shared
 * memory, and after a cluster barrier each block merges a share of the
 * (row, element)s from every block's through distributed shared memory.
 * Otherwise (before sm 90, a long cache of few heads, the kernel of one
 * lane per element) each block writes its partial result to a
 * module-scope buffer, and the rows' last block (a counter, the
 * threadFenceReduction pattern) merges the parts and writes the result.
 * Query head h reads key/value head h / (Hq / Hkv).
 *
 * An update_slice whose result only a cache_attention reads runs inside
 * that kernel (fused_update): the kernel reads the new rows from the
 * update's source wherever the update writes them and the cache elsewhere,
 * and one block of each key/value head writes them into the cache. No
 * block reads the rows being written, so the write needs no ordering
 * within the kernel; the kernels after it wait for it to end.
 */
#include "decode.h"
#include "emit.h"
#include "passes/attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEC_WARPS 8

bool fc_cuda_is_decode_group(const fc_group *gr) {
    return gr->kind == FC_GROUP_LIBRARY && gr->nnodes == 1 &&
           (gr->nodes[0]->op == FC_OP_UPDATE_SLICE || gr->nodes[0]->op == FC_OP_CACHE_ATTENTION);
}

static int arg_of(const fc_group *gr, const fc_value *v) {
    const int i = fc_cuda_group_input(gr, v);
    if (i < 0) FC_UNREACHABLE("a decode operand that is not a group input");
    return i;
}

static const char *index_type(fc_dtype dt) { return dt == FC_I64 ? "long long" : "int"; }

static bool is_group_input(const fc_value *v, void *arg) { return fc_cuda_group_input(arg, v) >= 0; }

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

/* The kernel's parameters: what it reads (reads[0 .. nreads), each a const
 * pointer), then the one output, then the caches that a fused update
 * writes (wk, wv: see fused_update); `cluster`: its __cluster_dims__, or
 * "". */
static void signature(fc_strbuf *s, const fc_value *const *reads, int nreads, const char *name, const char *cluster,
                      unsigned threads, unsigned min_blocks, const fc_value *out, const fc_value *wk, const fc_value *wv) {
    fc_strbuf_printf(s, "extern \"C\" __global__ void %s__launch_bounds__(%u, %u) %s(", cluster, threads, min_blocks, name);
    for (int i = 0; i < nreads; i++)
        fc_strbuf_printf(s, "const %s *__restrict__ a%d, ", fc_cuda_storage_type(reads[i]->dtype), i);
    fc_strbuf_printf(s, "%s *out", fc_cuda_storage_type(out->dtype));
    if (wk) fc_strbuf_printf(s, ", %s *wk", fc_cuda_storage_type(wk->dtype));
    if (wv) fc_strbuf_printf(s, ", %s *wv", fc_cuda_storage_type(wv->dtype));
    fc_strbuf_printf(s, ") {\n");
}

/* A programmatic dependent (fc_launch.pdl): every thread waits for the
 * kernel before, which wrote what this one reads (the new rows, the
 * queries), before it reads anything that kernel writes (only the cache
 * loads of prewait_of come before); a thread that left without waiting
 * could let the grid end before that kernel has. Then the kernel after
 * may launch and fetch its weights while this one runs. */
static void wait_for_kernel_before(fc_strbuf *s) {
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
    signature(s, (const fc_value *const *)gr->inputs, gr->ninputs, name, "", threads, 1, gr->outputs[0], NULL, NULL);
    wait_for_kernel_before(s);
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
#define DEC_FUSED_ROWS 8 /* the most new rows an update fused into the attention writes */

/* The update_slice group whose result is operand v (the keys or the
 * values) of cache_attention group plan->groups[a] and which runs inside
 * that kernel, or -1. It does when it is one update along axis 2 of a [B,
 * H, S, D] cache whose result group a alone reads (no other reader of the
 * new cache: the kernel reads the new rows from the update's source, never
 * from the cache it writes them into), with inputs that nothing overwrites
 * before a (the kernel reads them there, later than the memory plan saw
 * them read), and the keys and values two caches. */
static int fused_update(const fc_plan *plan, int a, const fc_value *v) {
    const fc_node *att = plan->groups[a]->nodes[0];
    if (plan->dynamic || att->in[1] == att->in[2]) return -1;
    for (int j = 0; j < a; j++) {
        const fc_group *gj = plan->groups[j];
        if (gj->batch > 0 || !fc_cuda_is_decode_group(gj) || gj->nodes[0]->op != FC_OP_UPDATE_SLICE || gj->outputs[0] != v)
            continue;
        const fc_node *n = gj->nodes[0];
        const int ax = (int)(n->a.axis < 0 ? n->a.axis + n->in[0]->rank : n->a.axis);
        if (n->in[0]->rank != 4 || ax != 2 || gj->noutputs != 1) return -1;
        /* A step's few new rows only: every query row of every block reads
         * the new rows through the source's view, so a prefill's hundreds
         * cost far more than the update's own copy (GPT-2's prefill of 512
         * tokens on an H200: 8.2 ms fused, 2.1 ms with the copy). */
        if (n->in[1]->dims[2] > DEC_FUSED_ROWS) return -1;
        return fc_cuda_sole_reader(plan, v) == a && fc_cuda_inputs_survive(plan, j, a) ? j : -1;
    }
    return -1;
}

bool fc_cuda_update_in_attention(const fc_plan *plan, int gi) {
    const fc_group *gr = plan->groups[gi];
    if (gr->batch > 0 || !fc_cuda_is_decode_group(gr) || gr->nodes[0]->op != FC_OP_UPDATE_SLICE || gr->noutputs != 1) return false;
    const int a = fc_cuda_sole_reader(plan, gr->outputs[0]);
    if (a <= gi) return false;
    const fc_group *ga = plan->groups[a];
    if (ga->batch > 0 || !fc_cuda_is_decode_group(ga) || ga->nodes[0]->op != FC_OP_CACHE_ATTENTION) return false;
    const fc_node *n = ga->nodes[0];
    return (n->in[1] == gr->outputs[0] && fused_update(plan, a, n->in[1]) == gi) ||
           (n->in[2] == gr->outputs[0] && fused_update(plan, a, n->in[2]) == gi);
}

/* A cache update inside the attention kernel: the keys' (c = 'k') or the
 * values' ('v'). */
typedef struct fused {
    const fc_group *gr; /* the update_slice group; NULL: none */
    int src, off;       /* the new rows' buffer and the offset among the kernel's reads */
    int64_t rows;       /* the new rows (the source's dim 2) */
    bool rows_contiguous; /* the source's innermost stride is 1 */
    char c;
} fused;

/* Whether cache_attention loads its first cache rows before its
 * griddepcontrol.wait, so that their latency overlaps the kernel before
 * (a decode step's attention is a chain of dependent loads, not a stream).
 * It may when both updates run inside it and both caches are parameters:
 * then only this kernel writes the caches (the new rows, which it reads
 * from the updates' sources after the wait), and every kernel before the
 * one just before it has ended (a programmatic dependent lets its own
 * dependents launch only after its own wait; the others launch when the
 * kernel before ends), so the rows it loads early are the ones it would
 * load late. The keys are then split into parts by the cache's length, not
 * the step's, since the step's is not known before the wait: a part past
 * the step's keys has nothing to do, which costs a latency-bound kernel
 * nothing. */
static bool prewait_of(const fused *fk, const fused *fv) {
    return fk->gr && fv->gr && fk->gr->nodes[0]->in[0]->param_index >= 0 && fv->gr->nodes[0]->in[0]->param_index >= 0;
}

/* Into s, inside the kernel: the fused update's offset, whether it is in
 * range (an update out of range writes nothing, as update_slice's kernel),
 * and the new rows written into the cache by one block of each key/value
 * head (the first query head of its group, its first query, the first part
 * of the keys). */
static void fused_prologue(fc_strbuf *s, const fused *f, const char *name, int64_t S, int64_t D, const char *writer) {
    const fc_value *off = f->gr->nodes[0]->in[2];
    fc_strbuf_printf(s,
                     "  const long long off%c = (long long)*(const %s *)a%d;\n"
                     "  const bool in%c = off%c >= 0 && off%c <= %lldLL;\n"
                     "  if (in%c && %s)\n"
                     "    for (long long t = threadIdx.x; t < %lldLL; t += blockDim.x)\n"
                     "      w%c[(kvh * S + off%c) * %lldLL + t] = a%d[%s_%cs(kvh * %lldLL + t)];\n",
                     f->c, index_type(off->dtype), f->off, f->c, f->c, f->c, (long long)(S - f->rows), f->c, writer,
                     (long long)(f->rows * D), f->c, f->c, (long long)D, f->src, name, f->c, (long long)(f->rows * D));
}

/* The expression of the key (or value) element d of cache row j: from the
 * fused update's source where the update writes row j, else the cache (p,
 * the head's rows in argument a<cache>). */
static void element(char *buf, size_t n, const fused *f, const char *name, const char *p, int64_t D) {
    if (!f->gr) {
        snprintf(buf, n, "%s[j * %lldLL + d]", p, (long long)D);
        return;
    }
    snprintf(buf, n, "(in%c && j >= off%c && j < off%c + %lldLL ? a%d[%s_%cs((kvh * %lldLL + j - off%c) * %lldLL + d)] : %s[j * %lldLL + d])",
             f->c, f->c, f->c, (long long)f->rows, f->src, name, f->c, (long long)f->rows, f->c, (long long)D, p, (long long)D);
}

/* The vector kernel's loads: 16 bytes of a key or value row, and element
 * e of them in f32; once a unit (the guard), in every kernel's source. */
static const char vec_helpers[] =
    "#ifndef FC_DEC_HELPERS\n"
    "#define FC_DEC_HELPERS\n"
    "/* 16 bytes from p: one vector load where p is 16-byte aligned (al), element\n"
    " * by element otherwise (a caller's odd buffer); zeros where !use. */\n"
    "template <typename T> static __device__ __forceinline__ uint4 fc_dec_load(const T *p, bool use, bool al) {\n"
    "  uint4 r = make_uint4(0u, 0u, 0u, 0u);\n"
    "  if (use && al) r = *reinterpret_cast<const uint4 *>(p);\n"
    "  else if (use && sizeof(T) == 2)\n"
    "    for (int e = 0; e < 8; e++) reinterpret_cast<unsigned short *>(&r)[e] = reinterpret_cast<const unsigned short *>(p)[e];\n"
    "  else if (use)\n"
    "    for (int e = 0; e < 4; e++) reinterpret_cast<unsigned *>(&r)[e] = reinterpret_cast<const unsigned *>(p)[e];\n"
    "  return r;\n"
    "}\n"
    "static __device__ __forceinline__ float fc_dec_lane(const uint4 &r, int e, const __nv_bfloat16 *) {\n"
    "  const unsigned w = reinterpret_cast<const unsigned *>(&r)[e >> 1];\n"
    "  return __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));\n"
    "}\n"
    "static __device__ __forceinline__ float fc_dec_lane(const uint4 &r, int e, const __half *) {\n"
    "  const unsigned w = reinterpret_cast<const unsigned *>(&r)[e >> 1];\n"
    "  return __half2float(__ushort_as_half((unsigned short)((e & 1) ? w >> 16 : w & 0xffffu)));\n"
    "}\n"
    "static __device__ __forceinline__ float fc_dec_lane(const uint4 &r, int e, const float *) {\n"
    "  return __uint_as_float(reinterpret_cast<const unsigned *>(&r)[e]);\n"
    "}\n"
    "#endif\n";

/* Elements of dt in one 16-byte load, where the vector kernel reads a row
 * of D and one of Dv elements as whole 16-byte chunks, at most 32 of them
 * (lanes of one warp), and indexes keys in int; else 0 (the kernel of one lane per element). */
static int vector_width(fc_dtype dt, int64_t S, int64_t D, int64_t Dv) {
    const int ve = dt == FC_BF16 || dt == FC_F16 ? 8 : dt == FC_F32 ? 4 : 0;
    if (!ve || D < 1 || Dv < 1 || D % ve || Dv % ve || D / ve > 32 || Dv / ve > 32 || S >= INT32_MAX / 2) return 0;
    return ve;
}

#define DEC_UNROLL 4 /* key loads each lane issues before it uses the first */

/* Where a fused update writes key (value) row j: the kernel reads it from
 * the update's source, not from the cache. */
static void fresh_expr(char *buf, size_t n, const fused *f) {
    if (f->gr) snprintf(buf, n, "(in%c && j >= off%c && j < off%c + %lldLL)", f->c, f->c, f->c, (long long)f->rows);
    else snprintf(buf, n, "false");
}

/* Into s, in the vector kernel's loop: elements c * VE .. of row j of the
 * fused update's source into x (f32), where the update writes row j. */
static void fresh_row(fc_strbuf *s, const fused *f, const char *name, int64_t D, const char *x, const char *fresh,
                      const char *cols) {
    if (!f->gr) return;
    fc_strbuf_printf(s,
                     "      if (ok && %s && c < %s)\n"
                     "        for (int e = 0; e < VE; e++) %s[e] = fc_ld(a%d[%s_%cs((kvh * %lldLL + j - off%c) * %lldLL + c * VE + e)]);\n",
                     fresh, cols, x, f->src, name, f->c, (long long)f->rows, f->c, (long long)D);
}

/* cache_attention's launch: `blocks` x `split` blocks of `threads`. */
static void launch_grid(fc_launch *l, int64_t blocks, int64_t split, unsigned threads) {
    l->grid[0] = (unsigned)(blocks < 1 ? 1 : blocks);
    l->grid[1] = (unsigned)split;
    l->grid[2] = 1;
    l->block[0] = threads;
    l->block[1] = l->block[2] = 1;
}

/* The portable cluster size: the launches set no cluster attribute, the
 * kernels' __cluster_dims__ say it. */
#define DEC_CLUSTER 8

/* How the vector and the tensor-core kernels split a row group's keys:
 * SPLIT parts (grid.y), warps a block, blocks resident an SM, and whether
 * the parts merge in a thread-block cluster. */
typedef struct dec_parts {
    int64_t split;
    int warps, resident;
    bool cluster;
} dec_parts;

/* Warps whose shared memory, `fixed` bytes a block and `per` a warp, fits
 * in the 48 KB of a kernel's static shared memory. */
static int warps_in_smem(int64_t fixed, int64_t per) { return (int)((48 * 1024 - fixed) / per); }

/* From `split`, the parts that fill the GPU with blocks of `warps` warps
 * (`resident` an SM), each warp `round` keys of the S a round of loads.
 *
 * The parts merge in a cluster (sm 90): each block keeps its partial
 * result in its shared memory, and after one cluster barrier the blocks
 * read each other's through distributed shared memory; no global buffer,
 * fence, counter, nor the last block's two dependent rounds of loads from
 * L2, several of the few microseconds that a decode step's attention takes
 * (a chain of latencies: its 3 or 4 MB are ~1 us of bandwidth). A cluster
 * is at most DEC_CLUSTER blocks, so more parts become DEC_CLUSTER blocks
 * of up to `resident` times the warps: the same threads an SM, and so the
 * same loads in flight, in fewer blocks (the fewest warps that take the
 * fewest rounds, at most most_warps: the static shared memory's 48 KB).
 * That fold is taken only where each block then has at most one more
 * round of loads (a latency of ~1 us under load) than before, less than
 * the tail it saves. GPT-2 (12 rows of a 1024-key cache: 22 parts of one
 * round, now 8 of 8 warps) and Llama-1B (8 row groups of 2048 keys: 32
 * parts of a tile a warp, now 8 of 16 warps) both keep one round. A long
 * cache of few heads (8192 keys, 1 head: 64 parts of one round, 4 rounds
 * as 8 parts) keeps its parts and the merge through global memory; so
 * does a GPU without clusters. */
static dec_parts parts_of(int sm, int64_t split, int warps, int resident, int64_t S, int64_t round, int most_warps) {
    dec_parts p = {split, warps, resident, sm >= 90 && split > 1 && split <= DEC_CLUSTER};
    if (sm < 90 || split <= DEC_CLUSTER) return p;
    const int64_t per = warps * round, now = ((S + split - 1) / split + per - 1) / per;
    const int64_t keys = (S + DEC_CLUSTER - 1) / DEC_CLUSTER;
    int f = 1; /* the fewest warps a block of the fewest rounds */
    for (int g = 2; g <= resident && warps * g <= most_warps && (g - 1) * DEC_CLUSTER < split; g++)
        if ((keys + per * g - 1) / (per * g) < (keys + per * f - 1) / (per * f)) f = g;
    if ((keys + per * f - 1) / (per * f) > now + 1) return p;
    return (dec_parts){DEC_CLUSTER, warps * f, resident / f, true};
}

/* __cluster_dims__ of a kernel whose parts merge in a cluster: its SPLIT
 * blocks of a row group (grid.y), the cluster's rank the part. */
static const char *cluster_dims(const dec_parts *p, char *buf, size_t n) {
    if (p->cluster) snprintf(buf, n, "__cluster_dims__(1, %lld, 1) ", (long long)p->split);
    else buf[0] = 0;
    return buf;
}

/* The module-scope buffers of the merge through global memory (p: not in
 * a cluster, more than one part): the parts' partial results (`floats`)
 * and a counter a row group, for `groups` row groups. Launches of one
 * program run in stream order, so every launch of this kernel may use
 * them; the row group's last block resets its counter. */
static void part_buffers(fc_strbuf *s, const char *name, const dec_parts *p, int64_t floats, int64_t groups) {
    if (p->split > 1 && !p->cluster)
        fc_strbuf_printf(s, "__device__ float %s_part[%lld];\n__device__ unsigned %s_count[%lld];\n", name,
                         (long long)(floats > 0 ? floats : 1), name, (long long)(groups > 0 ? groups : 1));
}

/* Into s, the end of the vector and the tensor-core kernels: the block's
 * warps merged from shared memory (sm_m, sm_l, sm_acc of W warps x RB
 * rows), one (row, element) a thread, then the result where the keys are
 * one part; else the part's partial result and the parts merged (p): in a
 * cluster, each block its share of the (row, element)s from every block's
 * shared memory; or through global memory, in the row group's last block.
 * ex is the exponential of the kernel's maxima (expf, exp2f). Then the
 * launch's grid. */
static void merge(fc_strbuf *s, fc_launch *l, const char *name, const char *OT, const char *ex, int64_t blocks,
                  const dec_parts *p) {
    fc_strbuf_printf(s, "  __syncthreads();\n");
    if (p->cluster) fc_strbuf_printf(s, "  __shared__ float sm_pt[RB][PW]; /* this part's: M, L, the weighted values */\n");
    fc_strbuf_printf(s,
                     "  /* this block's keys: the warps merged, one (row, element) a thread */\n"
                     "  for (int t = threadIdx.x; t < RB * DV; t += blockDim.x) {\n"
                     "    const int r = t / DV, d = t %% DV;\n"
                     "    float M = -INFINITY, L = 0.f, o = 0.f;\n"
                     "    for (int w = 0; w < W; w++) M = fmaxf(M, sm_m[w][r]);\n"
                     "    for (int w = 0; w < W; w++) {\n"
                     "      const float cw = sm_m[w][r] == -INFINITY ? 0.f : %s(sm_m[w][r] - M);\n"
                     "      L += sm_l[w][r] * cw;\n"
                     "      o += sm_acc[w][r][d] * cw;\n"
                     "    }\n",
                     ex);
    if (p->split == 1)
        fc_strbuf_printf(s,
                         "    const long long g = rg * RB + r;\n"
                         "    if (g < GQS) out[(kvh * GQS + g) * DV + d] = fc_to<%s>(o / L);\n",
                         OT);
    else if (p->cluster)
        fc_strbuf_printf(s, "    sm_pt[r][2 + d] = o;\n    if (d == 0) sm_pt[r][0] = M, sm_pt[r][1] = L;\n");
    else
        fc_strbuf_printf(s,
                         "    float *mine = %s_part + ((blk * RB + r) * SPLIT + part) * PW;\n"
                         "    mine[2 + d] = o;\n"
                         "    if (d == 0) mine[0] = M, mine[1] = L;\n",
                         name);
    fc_strbuf_printf(s, "  }\n");
    if (p->split == 1) {
        fc_strbuf_printf(s, "}\n");
    } else if (p->cluster) {
        fc_strbuf_printf(s,
                         "  /* the parts merged (flash-decoding): the cluster's blocks (rank: the part) hold\n"
                         "   * their partials; block q merges (row, element)s q, q + SPLIT, .., reading every\n"
                         "   * block's through distributed shared memory, all its loads before their use */\n"
                         "  fc_cluster_sync();\n"
                         "  for (int t = part + SPLIT * threadIdx.x; t < RB * DV; t += SPLIT * blockDim.x) {\n"
                         "    const int r = t / DV, d = t %% DV;\n"
                         "    const long long g = rg * RB + r;\n"
                         "    float mp[SPLIT], lp[SPLIT], op[SPLIT], M = -INFINITY, L = 0.f, o = 0.f;\n"
                         "#pragma unroll\n"
                         "    for (int q = 0; q < SPLIT; q++)\n"
                         "      mp[q] = fc_cluster_ld(&sm_pt[r][0], q), lp[q] = fc_cluster_ld(&sm_pt[r][1], q), op[q] = fc_cluster_ld(&sm_pt[r][2 + d], q);\n"
                         "#pragma unroll\n"
                         "    for (int q = 0; q < SPLIT; q++) M = fmaxf(M, mp[q]);\n"
                         "#pragma unroll\n"
                         "    for (int q = 0; q < SPLIT; q++) {\n"
                         "      const float wq = mp[q] == -INFINITY ? 0.f : %s(mp[q] - M);\n"
                         "      L = fmaf(lp[q], wq, L), o = fmaf(op[q], wq, o);\n"
                         "    }\n"
                         "    if (g < GQS) out[(kvh * GQS + g) * DV + d] = fc_to<%s>(o / L);\n"
                         "  }\n"
                         "  fc_cluster_sync(); /* no block leaves while another reads its shared memory */\n"
                         "}\n",
                         ex, OT);
    } else {
        fc_strbuf_printf(s,
                         "  __shared__ bool last;\n"
                         "  __threadfence();\n"
                         "  __syncthreads();\n"
                         "  if (threadIdx.x == 0) last = atomicAdd(&%s_count[blk], 1u) == SPLIT - 1;\n"
                         "  __syncthreads();\n"
                         "  if (!last) return;\n"
                         "  /* the rows' last block: merge the splits (flash-decoding). The parts'\n"
                         "   * maxima and sums first (one load each, all at once), a warp a row\n"
                         "   * turns them into the parts' weights, then each (row, element) sums\n"
                         "   * its parts' values with loads that depend on nothing before them:\n"
                         "   * the loops unrolled so that a thread's loads are in flight together\n"
                         "   * (the merge is the launch's tail, a few blocks on an idle GPU). */\n"
                         "  __shared__ float sm_pw[SPLIT][RB], sm_pl[SPLIT][RB], sm_L[RB];\n"
                         "  __threadfence();\n"
                         "#pragma unroll 4\n"
                         "  for (int t = threadIdx.x; t < SPLIT * RB; t += blockDim.x) {\n"
                         "    const float *pt = %s_part + ((blk * RB + t %% RB) * SPLIT + t / RB) * PW;\n"
                         "    sm_pw[t / RB][t %% RB] = __ldcg(pt), sm_pl[t / RB][t %% RB] = __ldcg(pt + 1);\n"
                         "  }\n"
                         "  __syncthreads();\n"
                         "  for (int r = warp; r < RB; r += W) { /* a warp a row */\n"
                         "    float M = -INFINITY, L = 0.f;\n"
                         "    for (int p = lane; p < SPLIT; p += 32) M = fmaxf(M, sm_pw[p][r]);\n"
                         "#pragma unroll\n"
                         "    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));\n"
                         "    __syncwarp();\n"
                         "    for (int p = lane; p < SPLIT; p += 32) {\n"
                         "      const float mp = sm_pw[p][r], wp = mp == -INFINITY ? 0.f : %s(mp - M);\n"
                         "      sm_pw[p][r] = wp;\n"
                         "      L += sm_pl[p][r] * wp;\n"
                         "    }\n"
                         "#pragma unroll\n"
                         "    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);\n"
                         "    if (lane == 0) sm_L[r] = L;\n"
                         "  }\n"
                         "  __syncthreads();\n"
                         "  for (int t = threadIdx.x; t < RB * DV; t += blockDim.x) {\n"
                         "    const int r = t / DV, d = t %% DV;\n"
                         "    const long long g = rg * RB + r;\n"
                         "    const float *all = %s_part + (blk * RB + r) * SPLIT * PW + 2 + d;\n"
                         "    float o = 0.f;\n"
                         "#pragma unroll\n"
                         "    for (int p = 0; p < SPLIT; p++) o = fmaf(sm_pw[p][r], __ldcg(all + p * PW), o);\n"
                         "    if (g < GQS) out[(kvh * GQS + g) * DV + d] = fc_to<%s>(o / sm_L[r]);\n"
                         "  }\n"
                         "  if (threadIdx.x == 0) %s_count[blk] = 0u;\n"
                         "}\n",
                         name, name, ex, name, OT, name);
    }
    launch_grid(l, blocks, p->split, 32u * (unsigned)p->warps);
}

/* cache_attention where the rows are whole 16-byte chunks (vector_width):
 * one block per (batch, key/value head, RB of its GQ * Sq query rows) and
 * part of the keys, so a key read serves every query head of its group.
 * A warp holds KPW keys per load (C lanes a row, C the chunks of a row
 * rounded up to a power of two), and each lane issues DEC_UNROLL key and
 * value loads before it uses one: the memory sees W * DEC_UNROLL * KPW
 * rows of a block at once instead of one a warp (a step's keys are a few
 * MB over the whole GPU, so the time is the loads' latency unless nearly
 * all of them are in flight together). Each lane group keeps an online
 * softmax per query row over its keys; the warp merges its groups with
 * shuffles, the block its warps in shared memory, and the parts merge in
 * a cluster or through global memory (merge). */
static void vector_kernel(int sm, const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l, const fc_value *const *reads,
                          int nreads, const fused *fk, const fused *fv, const int idx[4], const char *sc, int ve) {
    const fc_node *n = gr->nodes[0];
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const int64_t B = q->dims[0], Hq = q->dims[1], Sq = q->dims[2], D = q->dims[3];
    const int64_t Hkv = k->dims[1], S = k->dims[2], Dv = v->dims[3], GQ = Hq / Hkv, GQS = GQ * Sq;
    const int ck = (int)(D / ve), cv = (int)(Dv / ve);
    int c = 1;
    while (c < ck || c < cv) c *= 2;
    const int kpw = 32 / c;
    /* query rows a block: their queries and accumulators in registers
     * (RB * VE floats each) */
    int64_t rb = 32 / ve;
    if (rb > GQS) rb = GQS;
    if (rb < 1) rb = 1;
    const int64_t ng = (GQS + rb - 1) / rb, blocks = B * Hkv * ng;
    int64_t split = (DEC_TARGET_BLOCKS + blocks - 1) / (blocks > 0 ? blocks : 1);
    const int64_t most = S / (DEC_WARPS * kpw);
    if (split > most) split = most;
    if (split < 1) split = 1;
    if (split > 64) split = 64;
    /* Two blocks an SM (at most 128 registers a thread): the grid is about
     * two blocks an SM, which then all run at once. */
    const dec_parts pp = parts_of(sm, split, DEC_WARPS, 2, S, DEC_UNROLL * kpw,
                                  warps_in_smem(4 * (rb * D + rb * (Dv + 2)), 4 * rb * (Dv + 2)));
    const unsigned threads = 32u * (unsigned)pp.warps;
    const char *T = fc_cuda_storage_type(k->dtype), *OT = fc_cuda_storage_type(n->out[0]->dtype);
    char cd[48];
    fc_strbuf_printf(s, "%s", vec_helpers);
    part_buffers(s, name, &pp, blocks * rb * pp.split * (Dv + 2), blocks);
    signature(s, reads, nreads, name, cluster_dims(&pp, cd, sizeof cd), threads, (unsigned)pp.resident, gr->outputs[0],
              fk->gr ? k : NULL, fv->gr ? v : NULL);
    fc_strbuf_printf(s,
                     "  enum { D = %lld, DV = %lld, S = %lld, SQ = %lld, GQ = %lld, GQS = GQ * SQ, W = %d, VE = %d };\n"
                     "  enum { C = %d, KPW = 32 / C, CK = D / VE, CV = DV / VE, RB = %lld, NG = %lld, SPLIT = %lld, U = %d, PW = DV + 2 };\n"
                     "  typedef %s T;\n"
                     "  __shared__ float sm_q[RB][D], sm_m[W][RB], sm_l[W][RB], sm_acc[W][RB][DV];\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane %% C, kq = lane / C;\n"
                     "  /* the block's rows: query rows rg * RB .. of key/value head kvh (b * Hkv + head), whose\n"
                     "   * GQ heads' rows are the result's rows kvh * GQS .. (h = head * GQ + g / SQ, i = g %% SQ) */\n"
                     "  const long long blk = blockIdx.x, kvh = blk / NG;\n"
                     "  const int rg = (int)(blk %% NG), part = blockIdx.y;\n"
                     "  const T *kp = a%d + kvh * S * D, *vp = a%d + kvh * S * DV;\n"
                     "  const bool al = (((unsigned long long)kp | (unsigned long long)vp) & 15u) == 0;\n",
                     (long long)D, (long long)Dv, (long long)S, (long long)Sq, (long long)GQ, pp.warps, ve, c,
                     (long long)rb, (long long)ng, (long long)pp.split, DEC_UNROLL, T, idx[1], idx[2]);
    const bool prewait = prewait_of(fk, fv);
    /* key indices in int: S < 2^31 (vector_width) */
    if (prewait)
        fc_strbuf_printf(s, "  /* parts by the cache's length; this warp's first round of the cache before the wait */\n"
                            "  const int chunk = (int)((S + SPLIT - 1) / SPLIT), j0 = part * chunk;\n"
                            "  const int jS = j0 + chunk < S ? j0 + chunk : (int)S;\n"
                            "  uint4 pk[U], pv[U];\n"
                            "#pragma unroll\n"
                            "  for (int u = 0; u < U; u++) {\n"
                            "    const int j = j0 + (u * W + warp) * KPW + kq;\n"
                            "    pk[u] = fc_dec_load(kp + (long long)j * D + c * VE, j < jS && c < CK, al);\n"
                            "    pv[u] = fc_dec_load(vp + (long long)j * DV + c * VE, j < jS && c < CV, al);\n"
                            "  }\n");
    wait_for_kernel_before(s);
    if (fk->gr) fused_prologue(s, fk, name, S, D, "part == 0 && rg == 0");
    if (fv->gr) fused_prologue(s, fv, name, S, Dv, "part == 0 && rg == 0");
    char frk[96], frv[96];
    fresh_expr(frk, sizeof frk, fk);
    fresh_expr(frv, sizeof frv, fv);
    fc_strbuf_printf(s,
                     "  long long len = (long long)*(const %s *)a%d;\n"
                     "  len = len < 0 ? 0 : len > S ? S : len; /* never past the cache */\n"
                     "%s"
                     "  const int j1 = j0 + chunk < len ? j0 + chunk : (int)len;\n"
                     "  for (int t = threadIdx.x; t < RB * D; t += blockDim.x) {\n"
                     "    const long long g = rg * RB + t / D;\n"
                     "    sm_q[t / D][t %% D] = g < GQS ? fc_ld(a%d[%s_q((kvh * GQS + g) * D + t %% D)]) * (float)%s : 0.f;\n"
                     "  }\n"
                     "  int nk[RB]; /* keys row r sees */\n"
                     "#pragma unroll\n"
                     "  for (int r = 0; r < RB; r++) {\n"
                     "    const long long g = rg * RB + r, i = g %% SQ, e = %s;\n"
                     "    nk[r] = (int)(g >= GQS || e < 0 ? 0 : e > len ? len : e);\n"
                     "  }\n"
                     "  __syncthreads();\n"
                     "  float qr[RB][VE], acc[RB][VE], m[RB], l[RB];\n"
                     "#pragma unroll\n"
                     "  for (int r = 0; r < RB; r++) {\n"
                     "    m[r] = -INFINITY, l[r] = 0.f;\n"
                     "#pragma unroll\n"
                     "    for (int e = 0; e < VE; e++) qr[r][e] = c < CK ? sm_q[r][c * VE + e] : 0.f, acc[r][e] = 0.f;\n"
                     "  }\n"
                     "  for (int base = j0; base < j1; base += W * U * KPW) {\n"
                     "    uint4 kr[U], vr[U];\n"
                     "%s"
                     "#pragma unroll\n"
                     "    for (int u = 0; u < U; u++) {\n"
                     "      const int j = base + (u * W + warp) * KPW + kq;\n"
                     "      const bool ok = j < j1;\n"
                     "      kr[u] = fc_dec_load(kp + (long long)j * D + c * VE, ok && c < CK && !%s, al);\n"
                     "      vr[u] = fc_dec_load(vp + (long long)j * DV + c * VE, ok && c < CV && !%s, al);\n"
                     "    }\n"
                     "%s"
                     "#pragma unroll\n"
                     "    for (int u = 0; u < U; u++) {\n"
                     "      if (base + u * W * KPW >= j1) break; /* the block's keys end (the same in every warp) */\n"
                     "      const int j = base + (u * W + warp) * KPW + kq;\n"
                     "      const bool ok = j < j1;\n"
                     "      float kf[VE], vf[VE];\n"
                     "#pragma unroll\n"
                     "      for (int e = 0; e < VE; e++) kf[e] = fc_dec_lane(kr[u], e, (const T *)0), vf[e] = fc_dec_lane(vr[u], e, (const T *)0);\n",
                     index_type(n->in[3]->dtype), idx[3],
                     prewait ? "" : "  const int chunk = (int)((len + SPLIT - 1) / SPLIT), j0 = part * chunk;\n", idx[0], name, sc,
                     n->a.causal ? "len - SQ + i + 1" : "len",
                     /* the first round is the one loaded before the wait (the new rows
                      * replace theirs below, the keys past the part's are not used) */
                     prewait ? "    if (base == j0) {\n"
                               "#pragma unroll\n"
                               "      for (int u = 0; u < U; u++) kr[u] = pk[u], vr[u] = pv[u];\n"
                               "    } else {\n"
                             : "",
                     frk, frv, prewait ? "    }\n" : "");
    fresh_row(s, fk, name, D, "kf", frk, "CK");
    fresh_row(s, fv, name, Dv, "vf", frv, "CV");
    fc_strbuf_printf(s,
                     "#pragma unroll\n"
                     "      for (int r = 0; r < RB; r++) {\n"
                     "        float sd = 0.f;\n"
                     "#pragma unroll\n"
                     "        for (int e = 0; e < VE; e++) sd = fmaf(qr[r][e], kf[e], sd);\n"
                     "#pragma unroll\n"
                     "        for (int o = C / 2; o > 0; o >>= 1) sd += __shfl_xor_sync(0xffffffffu, sd, o);\n"
                     "        if (ok && j < nk[r]) {\n"
                     "          const float mn = fmaxf(m[r], sd), cf = expf(m[r] - mn), p = expf(sd - mn);\n"
                     "          l[r] = l[r] * cf + p;\n"
                     "#pragma unroll\n"
                     "          for (int e = 0; e < VE; e++) acc[r][e] = fmaf(acc[r][e], cf, p * vf[e]);\n"
                     "          m[r] = mn;\n"
                     "        }\n"
                     "      }\n"
                     "    }\n"
                     "  }\n"
                     "  /* the warp's KPW lane groups merged (xor over the group index) */\n"
                     "#pragma unroll\n"
                     "  for (int o = C; o < 32; o <<= 1)\n"
                     "#pragma unroll\n"
                     "    for (int r = 0; r < RB; r++) {\n"
                     "      const float m2 = __shfl_xor_sync(0xffffffffu, m[r], o), l2 = __shfl_xor_sync(0xffffffffu, l[r], o);\n"
                     "      const float mx = fmaxf(m[r], m2);\n"
                     "      const float c1 = m[r] == -INFINITY ? 0.f : expf(m[r] - mx), c2 = m2 == -INFINITY ? 0.f : expf(m2 - mx);\n"
                     "      l[r] = l[r] * c1 + l2 * c2;\n"
                     "#pragma unroll\n"
                     "      for (int e = 0; e < VE; e++) acc[r][e] = acc[r][e] * c1 + __shfl_xor_sync(0xffffffffu, acc[r][e], o) * c2;\n"
                     "      m[r] = mx;\n"
                     "    }\n"
                     "  if (kq == 0) {\n"
                     "#pragma unroll\n"
                     "    for (int r = 0; r < RB; r++) {\n"
                     "      if (c == 0) sm_m[warp][r] = m[r], sm_l[warp][r] = l[r];\n"
                     "#pragma unroll\n"
                     "      for (int e = 0; e < VE; e++) if (c < CV) sm_acc[warp][r][c * VE + e] = acc[r][e];\n"
                     "    }\n"
                     "  }\n");
    merge(s, l, name, OT, "expf", blocks, &pp);
}

/* The tensor-core kernel's helpers: the attention kernels' MMA, pack and
 * exp2 (attention_helpers.cuh.inc, as the build embeds it), an element's
 * bits and a word of a 16-byte load; once a unit (the guards). */
static const char attn_helpers[] =
#include "attention_helpers.cuh.inc.str"
    ;
static const char mma_helpers[] =
    "#ifndef FC_DEC_MMA_HELPERS\n"
    "#define FC_DEC_MMA_HELPERS\n"
    "static __device__ __forceinline__ unsigned fc_dec_bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }\n"
    "static __device__ __forceinline__ unsigned fc_dec_bits(__half x) { return __half_as_ushort(x); }\n"
    "static __device__ __forceinline__ unsigned fc_dec_word(const uint4 &r, int e) {\n"
    "  return e == 0 ? r.x : e == 1 ? r.y : e == 2 ? r.z : r.w;\n"
    "}\n"
    "#endif\n";

/* Into s, before the kernel: the 16 bytes (8 elements, packed) at chunk c
 * of new row `row` of the fused update's source (f: the keys' or the
 * values'), rows of n elements. Where the source's rows are contiguous
 * (its innermost stride 1; n is a whole number of chunks) a chunk is 8
 * neighbours: one 16-byte load where they are aligned, else fc_dec_load's
 * 8 from one address. Otherwise 8 loads through the view, each with its
 * own index: that form's registers, live across the tile that holds the
 * new rows, made the kernel spill (220 bytes at Llama's B = 8, 828 at B = 1
 * under its 128 registers a thread, measured by ptxas). */
static void fresh_chunk(fc_strbuf *s, const fused *f, const char *name, const char *T, int64_t n) {
    if (!f->gr) return;
    fc_strbuf_printf(s, "static __device__ __forceinline__ uint4 %s_%cf(const %s *src, long long row, int c) {\n", name, f->c, T);
    if (f->rows_contiguous) {
        fc_strbuf_printf(s,
                         "  const %s *p = src + %s_%cs(row * %lldLL + c * 8);\n"
                         "  return fc_dec_load(p, true, ((unsigned long long)p & 15u) == 0);\n}\n",
                         T, name, f->c, (long long)n);
        return;
    }
    fc_strbuf_printf(s, "  const long long o = row * %lldLL + c * 8;\n  uint4 r;\n", (long long)n);
    for (int w = 0; w < 4; w++)
        fc_strbuf_printf(s, "  r.%c = fc_dec_bits(src[%s_%cs(o + %d)]) | fc_dec_bits(src[%s_%cs(o + %d)]) << 16;\n", "xyzw"[w],
                         name, f->c, 2 * w, name, f->c, 2 * w + 1);
    fc_strbuf_printf(s, "  return r;\n}\n");
}

/* Into s, the tensor-core kernel's loads of a tile (keys base ..
 * base + 15): lane (g, q4) loads chunks q4, q4 + 4, .. of keys g and g + 8
 * (kr) and chunk g, g + 8, .. of keys 2 q4, 2 q4 + 1, 2 q4 + 8, 2 q4 + 9
 * (vr), zeros past the part's keys. With `fresh` (a tile that holds rows
 * a fused update writes), those rows from the update's source instead of
 * the cache, which another block is writing them into. */
static void tile_loads(fc_strbuf *s, const fused *fk, const fused *fv, const char *name, const char *frk,
                       const char *frv, bool fresh, const char *kr, const char *vr, const char *j1) {
    const char *in = fresh ? "      " : "    ";
    char nk[112] = "", nv[112] = "";
    if (fresh && fk->gr) snprintf(nk, sizeof nk, " && !%s", frk);
    if (fresh && fv->gr) snprintf(nv, sizeof nv, " && !%s", frv);
    fc_strbuf_printf(s,
                     "#pragma unroll\n"
                     "%sfor (int t = 0; t < 2; t++)\n"
                     "#pragma unroll\n"
                     "%s  for (int i = 0; i < NI; i++) {\n"
                     "%s    const int j = base + 8 * t + g, c = q4 + 4 * i;\n"
                     "%s    %s[t][i] = fc_dec_load(kp + (long long)j * D + c * 8, j < %s && c < CK%s, al);\n",
                     in, in, in, in, kr, j1, nk);
    if (fresh && fk->gr)
        fc_strbuf_printf(s, "%s    if (%s && j < j1 && c < CK) kr[t][i] = %s_kf(a%d, kvh * %lldLL + j - offk, c);\n", in, frk,
                         name, fk->src, (long long)fk->rows);
    fc_strbuf_printf(s,
                     "%s  }\n"
                     "#pragma unroll\n"
                     "%sfor (int x = 0; x < 4; x++)\n"
                     "#pragma unroll\n"
                     "%s  for (int w = 0; w < NW; w++) {\n"
                     "%s    const int j = base + 8 * (x >> 1) + 2 * q4 + (x & 1), c = g + 8 * w;\n"
                     "%s    %s[x][w] = fc_dec_load(vp + (long long)j * DV + c * 8, j < %s && c < CV%s, al);\n",
                     in, in, in, in, in, vr, j1, nv);
    if (fresh && fv->gr)
        fc_strbuf_printf(s, "%s    if (%s && j < j1 && c < CV) vr[x][w] = %s_vf(a%d, kvh * %lldLL + j - offv, c);\n", in, frv,
                         name, fv->src, (long long)fv->rows);
    fc_strbuf_printf(s, "%s  }\n", in);
}

/* Into s, in the tensor-core kernel's loop, for a tile loaded before the
 * wait (prewait_of): the new rows of the tile, which the kernel before
 * wrote, from the updates' sources over what the cache held. */
static void fresh_overrides(fc_strbuf *s, const fused *fk, const fused *fv, const char *name, const char *frk, const char *frv) {
    if (fk->gr)
        fc_strbuf_printf(s,
                         "#pragma unroll\n"
                         "        for (int t = 0; t < 2; t++)\n"
                         "#pragma unroll\n"
                         "          for (int i = 0; i < NI; i++) {\n"
                         "            const int j = base + 8 * t + g, c = q4 + 4 * i;\n"
                         "            if (%s && j < j1 && c < CK) kr[t][i] = %s_kf(a%d, kvh * %lldLL + j - offk, c);\n"
                         "          }\n",
                         frk, name, fk->src, (long long)fk->rows);
    if (fv->gr)
        fc_strbuf_printf(s,
                         "#pragma unroll\n"
                         "        for (int x = 0; x < 4; x++)\n"
                         "#pragma unroll\n"
                         "          for (int w = 0; w < NW; w++) {\n"
                         "            const int j = base + 8 * (x >> 1) + 2 * q4 + (x & 1), c = g + 8 * w;\n"
                         "            if (%s && j < j1 && c < CV) vr[x][w] = %s_vf(a%d, kvh * %lldLL + j - offv, c);\n"
                         "          }\n",
                         frv, name, fv->src, (long long)fv->rows);
}

/* The most elements of a key or a value row the tensor-core kernel takes
 * (its registers: 128 a thread). */
#define DEC_MMA_MAX_D 128
#define DEC_MMA_WARPS 4
#define DEC_MMA_MIN_ROWS 4

/* cache_attention in bf16 or f16 on tensor cores (mma_kernel's condition
 * in cache_attention): a block per (batch, key/value head, up to 8 of its
 * query rows) and part of the keys, DEC_MMA_WARPS warps (or a multiple:
 * parts_of), each 16 keys at a time. The decode step's cost is its instructions and its loads'
 * latency, not arithmetic, so the scores and the weighted values are
 * MMAs (m16n8k16, f32 accumulators) whose operands are the 16-byte row
 * loads as they come: a lane (group g = lane / 4, q = lane % 4) loads
 * whole 16-byte chunks of rows and the MMAs' index orders are chosen to
 * fit them (a dot product and a sum over keys are the same in any order).
 *
 * Scores, S = Q K^T (M: the query rows, rows 8..15 zero; N: 8 keys; K:
 * 16 of the head dim): lane (g, q) loads chunks q, q + 4, .. of key g of
 * each 8, and k index 2q + b of k-step 2i + h is element 8(q + 4i) + 4h +
 * b, k index 2q + 8 + b element 8(q + 4i) + 4h + 2 + b: a chunk's words
 * are the B operand's registers as they are, and the queries' A operand
 * is read from shared memory in the same order.
 *
 * Values, O^T = V^T P^T (M: 16 value elements, N: the 8 query rows, K: the
 * 16 keys): S's accumulators (row g, keys 2q, 2q + 1) are P^T's B operand
 * as they are, and V^T's A operand (element m, keys 2q, 2q + 1) is lane
 * (g, q)'s loads of keys 2q, 2q + 1, 2q + 8, 2q + 9 at chunk g (g + 8, ..
 * where Dv > 64): m-tile e's row g is element 8g + 2e, row g + 8 element
 * 8g + 2e + 1, the two halves of word e, paired across two keys by one
 * byte permute each.
 *
 * The softmax is online per 16 keys, in base 2 (the scale times log2 e),
 * each row's maximum and sum in its lane group; the accumulators' columns
 * are rows 2q and 2q + 1, whose rescale factors come from their groups by
 * a shuffle. The warps and the parts merge as in the vector kernel. */
static void mma_kernel(const fc_plan *plan, const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l,
                       const fc_value *const *reads, int nreads, const fused *fk, const fused *fv, const int idx[4],
                       double scale) {
    const fc_node *n = gr->nodes[0];
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
    const int64_t B = q->dims[0], Hq = q->dims[1], Sq = q->dims[2], D = q->dims[3];
    const int64_t Hkv = k->dims[1], S = k->dims[2], Dv = v->dims[3], GQ = Hq / Hkv, GQS = GQ * Sq;
    int64_t rb = GQS < 8 ? GQS : 8;
    if (rb < 1) rb = 1;
    const int64_t ng = (GQS + rb - 1) / rb, blocks = B * Hkv * ng;
    /* Four blocks an SM (128 registers a thread) where the rows are 64
     * elements or fewer; wider rows' loads and accumulators need more (D =
     * 128 spills 80 bytes at 128). */
    const int resident = D > 64 || Dv > 64 ? 2 : 4;
    /* Parts: as many blocks as are resident at once, each at least a round
     * of its warps' 16 keys over a full cache, so that nearly every key's
     * load is in flight in the first round (a step of one sequence: GPT-2's
     * and Llama's are capped by the cache); at most 64 (the merge's shared
     * memory); then a cluster's (parts_of). */
    const int64_t per = 16 * DEC_MMA_WARPS;
    int64_t split = (resident * fc_cuda_plan_sms(plan) + blocks - 1) / (blocks > 0 ? blocks : 1);
    if (split > S / per) split = S / per;
    if (split < 1) split = 1;
    if (split > 64) split = 64;
    /* Where a cluster's parts still fill 7/8 of the GPU's blocks, they are
     * taken as they are, more rounds a warp, rather than folded into
     * blocks of twice the warps in two waves (parts_of): Llama-1B at B = 8
     * (64 row groups, 9 parts) as 8 parts of 4 warps, one wave of 512
     * blocks, took 22.7 us (Nsight Compute) against 24.8 as 8 parts of 8
     * warps, and the decode step 1.390 ms against 1.431 on the H200. */
    if (split > DEC_CLUSTER && blocks * DEC_CLUSTER * 8 >= 7 * (int64_t)resident * fc_cuda_plan_sms(plan)) split = DEC_CLUSTER;
    const dec_parts pp = parts_of(plan->sm, split, DEC_MMA_WARPS, resident, S, 16,
                                  warps_in_smem(16 * D + 4 * rb * (Dv + 2), 4 * rb * (Dv + 2)));
    const unsigned threads = 32u * (unsigned)pp.warps;
    const char *T = fc_cuda_storage_type(k->dtype), *OT = fc_cuda_storage_type(n->out[0]->dtype);
    char cd[48];
    fc_strbuf_printf(s, "%s%s%s", vec_helpers, attn_helpers, mma_helpers);
    part_buffers(s, name, &pp, blocks * rb * pp.split * (Dv + 2), blocks);
    fresh_chunk(s, fk, name, T, D);
    fresh_chunk(s, fv, name, T, Dv);
    signature(s, reads, nreads, name, cluster_dims(&pp, cd, sizeof cd), threads, (unsigned)pp.resident, gr->outputs[0],
              fk->gr ? k : NULL, fv->gr ? v : NULL);
    fc_strbuf_printf(s,
                     "  enum { D = %lld, DV = %lld, S = %lld, SQ = %lld, GQ = %lld, GQS = GQ * SQ, W = %d };\n"
                     "  /* chunks a row; k-steps of 2 chunks a lane (NI) and value chunks a lane (NW) */\n"
                     "  enum { CK = D / 8, CV = DV / 8, NI = (CK + 3) / 4, NW = (CV + 7) / 8 };\n"
                     "  enum { RB = %lld, NG = %lld, SPLIT = %lld, PW = DV + 2 };\n"
                     "  typedef %s T;\n"
                     "  __shared__ __align__(16) unsigned short sm_q[8][D];\n"
                     "  __shared__ float sm_m[W][RB], sm_l[W][RB], sm_acc[W][RB][DV];\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q4 = lane & 3;\n"
                     "  /* the block's rows: query rows rg * RB .. of key/value head kvh (b * Hkv + head), whose\n"
                     "   * GQ heads' rows are the result's rows kvh * GQS .. (h = head * GQ + row / SQ, i = row %% SQ) */\n"
                     "  const long long blk = blockIdx.x, kvh = blk / NG;\n"
                     "  const int rg = (int)(blk %% NG), part = blockIdx.y;\n"
                     "  const T *kp = a%d + kvh * S * D, *vp = a%d + kvh * S * DV;\n"
                     "  const bool al = (((unsigned long long)kp | (unsigned long long)vp) & 15u) == 0;\n",
                     (long long)D, (long long)Dv, (long long)S, (long long)Sq, (long long)GQ, pp.warps, (long long)rb,
                     (long long)ng, (long long)pp.split, T, idx[1], idx[2]);
    const bool prewait = prewait_of(fk, fv);
    /* key indices in int: S < 2^31 (vector_width); parts of whole 16-key tiles */
    if (prewait) {
        fc_strbuf_printf(s,
                         "  /* parts by the cache's length; this warp's first tile of the cache before the wait */\n"
                         "  const int chunk = (int)(((S + SPLIT - 1) / SPLIT + 15) / 16 * 16), j0 = part * chunk;\n"
                         "  const int jS = j0 + chunk < S ? j0 + chunk : (int)S;\n"
                         "  uint4 pk[2][NI], pv[4][NW];\n"
                         "  {\n"
                         "    const int base = j0 + warp * 16;\n");
        tile_loads(s, fk, fv, name, "false", "false", false, "pk", "pv", "jS");
        fc_strbuf_printf(s, "  }\n");
    }
    wait_for_kernel_before(s);
    if (fk->gr) fused_prologue(s, fk, name, S, D, "part == 0 && rg == 0");
    if (fv->gr) fused_prologue(s, fv, name, S, Dv, "part == 0 && rg == 0");
    char frk[96], frv[96], tk[96] = "false", tv[96] = "false";
    fresh_expr(frk, sizeof frk, fk);
    fresh_expr(frv, sizeof frv, fv);
    if (fk->gr) snprintf(tk, sizeof tk, "ink && base < offk + %lldLL && base + 16 > offk", (long long)fk->rows);
    if (fv->gr) snprintf(tv, sizeof tv, "inv && base < offv + %lldLL && base + 16 > offv", (long long)fv->rows);
    fc_strbuf_printf(s,
                     "  long long len = (long long)*(const %s *)a%d;\n"
                     "  len = len < 0 ? 0 : len > S ? S : len; /* never past the cache */\n"
                     "%s"
                     "  const int j1 = j0 + chunk < len ? j0 + chunk : (int)len;\n"
                     "  for (int t = threadIdx.x; t < 8 * D; t += blockDim.x) {\n"
                     "    const int r = t / D;\n"
                     "    const long long row = (long long)rg * RB + r;\n"
                     "    sm_q[r][t %% D] = r < RB && row < GQS ? (unsigned short)fc_dec_bits(a%d[%s_q((kvh * GQS + row) * D + t %% D)]) : (unsigned short)0;\n"
                     "  }\n"
                     "  int lim; /* the keys of this part that row g sees end here */\n"
                     "  {\n"
                     "    const long long row = (long long)rg * RB + g, i = row %% SQ, e = %s;\n"
                     "    const long long nk = g >= RB || row >= GQS || e < 0 ? 0 : e > len ? len : e;\n"
                     "    lim = (int)(nk < j1 ? nk : j1);\n"
                     "  }\n"
                     "  __syncthreads();\n"
                     "  unsigned qa[2 * NI][2]; /* the queries' A operand: row g (rows g + 8 are zero) */\n"
                     "#pragma unroll\n"
                     "  for (int i = 0; i < NI; i++)\n"
                     "#pragma unroll\n"
                     "    for (int h = 0; h < 2; h++) {\n"
                     "      const int c = q4 + 4 * i;\n"
                     "      qa[2 * i + h][0] = c < CK ? *reinterpret_cast<const unsigned *>(&sm_q[g][8 * c + 4 * h]) : 0u;\n"
                     "      qa[2 * i + h][1] = c < CK ? *reinterpret_cast<const unsigned *>(&sm_q[g][8 * c + 4 * h + 2]) : 0u;\n"
                     "    }\n"
                     "  float acc[NW * 4][4]; /* O^T: m-tile (w, e) element 8 (g + 8 w) + 2 e (+1), rows 2 q4 and 2 q4 + 1 */\n"
                     "#pragma unroll\n"
                     "  for (int t = 0; t < NW * 4; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;\n"
                     "  float m = -INFINITY, l = 0.f; /* row g's, base 2; l this lane's keys' share */\n"
                     "  const float sl = %.9g; /* the scale times log2 e */\n"
                     "  for (int base = j0 + warp * 16; base < j1; base += W * 16) {\n"
                     "    uint4 kr[2][NI], vr[4][NW];\n",
                     index_type(n->in[3]->dtype), idx[3],
                     prewait ? "" : "  const int chunk = (int)(((len + SPLIT - 1) / SPLIT + 15) / 16 * 16), j0 = part * chunk;\n",
                     idx[0], name, n->a.causal ? "len - SQ + i + 1" : "len", scale * 1.4426950408889634);
    if (prewait) {
        /* The first tile is the one loaded before the wait: zeros past the
         * part's keys (the step's length is known now), and the new rows
         * from the updates' sources. */
        fc_strbuf_printf(s,
                         "    if (base == j0 + warp * 16) {\n"
                         "#pragma unroll\n"
                         "      for (int t = 0; t < 2; t++)\n"
                         "#pragma unroll\n"
                         "        for (int i = 0; i < NI; i++) kr[t][i] = base + 8 * t + g < j1 ? pk[t][i] : make_uint4(0u, 0u, 0u, 0u);\n"
                         "#pragma unroll\n"
                         "      for (int x = 0; x < 4; x++)\n"
                         "#pragma unroll\n"
                         "        for (int w = 0; w < NW; w++)\n"
                         "          vr[x][w] = base + 8 * (x >> 1) + 2 * q4 + (x & 1) < j1 ? pv[x][w] : make_uint4(0u, 0u, 0u, 0u);\n"
                         "      if (%s || %s) {\n",
                         tk, tv);
        fresh_overrides(s, fk, fv, name, frk, frv);
        fc_strbuf_printf(s, "      }\n    } else {\n");
    }
    /* A tile without new rows (all but one or two) loads the cache alone,
     * with no test of each row. */
    if (fk->gr || fv->gr)
        fc_strbuf_printf(s,
                         "    /* whether the tile holds rows a fused update writes (the same in the whole warp) */\n"
                         "    const bool tk = %s, tv = %s;\n"
                         "    if (!(tk || tv)) {\n",
                         tk, tv);
    tile_loads(s, fk, fv, name, frk, frv, false, "kr", "vr", "j1");
    if (fk->gr || fv->gr) {
        fc_strbuf_printf(s, "    } else {\n");
        tile_loads(s, fk, fv, name, frk, frv, true, "kr", "vr", "j1");
        fc_strbuf_printf(s, "    }\n");
    }
    if (prewait) fc_strbuf_printf(s, "    }\n");
    fc_strbuf_printf(s,
                     "    __syncwarp(); /* the MMAs need the whole warp */\n"
                     "    float sc[2][4];\n"
                     "#pragma unroll\n"
                     "    for (int t = 0; t < 2; t++) {\n"
                     "      sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.f;\n"
                     "#pragma unroll\n"
                     "      for (int i = 0; i < NI; i++)\n"
                     "#pragma unroll\n"
                     "        for (int h = 0; h < 2; h++) {\n"
                     "          const unsigned a[4] = {qa[2 * i + h][0], 0u, qa[2 * i + h][1], 0u};\n"
                     "          fc_attn_mma(sc[t], a, fc_dec_word(kr[t][i], 2 * h), fc_dec_word(kr[t][i], 2 * h + 1), T());\n"
                     "        }\n"
                     "    }\n"
                     "    /* row g's scores of keys 2 q4, 2 q4 + 1 of each 8 (sc[t][0..1]; [2..3] are the zero rows') */\n"
                     "    float p[4], mx = -INFINITY;\n"
                     "#pragma unroll\n"
                     "    for (int x = 0; x < 4; x++) {\n"
                     "      const int j = base + 8 * (x >> 1) + 2 * q4 + (x & 1);\n"
                     "      p[x] = j < lim ? sc[x >> 1][x & 1] * sl : -INFINITY;\n"
                     "      mx = fmaxf(mx, p[x]);\n"
                     "    }\n"
                     "    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));\n"
                     "    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));\n"
                     "    const float mn = fmaxf(m, mx), ms = mn == -INFINITY ? 0.f : mn, cf = fc_attn_exp2(m - ms);\n"
                     "#pragma unroll\n"
                     "    for (int x = 0; x < 4; x++) p[x] = fc_attn_exp2(p[x] - ms);\n"
                     "    l = l * cf + ((p[0] + p[1]) + (p[2] + p[3]));\n"
                     "    m = mn;\n"
                     "    /* the accumulators' rows 2 q4 and 2 q4 + 1 rescale by their groups' factors */\n"
                     "    const float c0 = __shfl_sync(0xffffffffu, cf, 8 * q4), c1 = __shfl_sync(0xffffffffu, cf, 8 * q4 + 4);\n"
                     "    const unsigned pb0 = fc_attn_pack(p[0], p[1], T()), pb1 = fc_attn_pack(p[2], p[3], T());\n"
                     "#pragma unroll\n"
                     "    for (int w = 0; w < NW; w++)\n"
                     "#pragma unroll\n"
                     "      for (int e = 0; e < 4; e++) {\n"
                     "        float *a = acc[w * 4 + e];\n"
                     "        a[0] *= c0, a[1] *= c1, a[2] *= c0, a[3] *= c1;\n"
                     "        const unsigned v0 = fc_dec_word(vr[0][w], e), v1 = fc_dec_word(vr[1][w], e);\n"
                     "        const unsigned v2 = fc_dec_word(vr[2][w], e), v3 = fc_dec_word(vr[3][w], e);\n"
                     "        const unsigned va[4] = {__byte_perm(v0, v1, 0x5410), __byte_perm(v0, v1, 0x7632), __byte_perm(v2, v3, 0x5410),\n"
                     "                                __byte_perm(v2, v3, 0x7632)};\n"
                     "        fc_attn_mma(a, va, pb0, pb1, T());\n"
                     "      }\n"
                     "  }\n"
                     "  l += __shfl_xor_sync(0xffffffffu, l, 1);\n"
                     "  l += __shfl_xor_sync(0xffffffffu, l, 2);\n"
                     "  if (q4 == 0 && g < RB) sm_m[warp][g] = m, sm_l[warp][g] = l;\n"
                     "#pragma unroll\n"
                     "  for (int w = 0; w < NW; w++)\n"
                     "#pragma unroll\n"
                     "    for (int e = 0; e < 4; e++) {\n"
                     "      const int c = g + 8 * w, d = 8 * c + 2 * e, r = 2 * q4;\n"
                     "      const float *a = acc[w * 4 + e];\n"
                     "      if (c < CV && r < RB) sm_acc[warp][r][d] = a[0], sm_acc[warp][r][d + 1] = a[2];\n"
                     "      if (c < CV && r + 1 < RB) sm_acc[warp][r + 1][d] = a[1], sm_acc[warp][r + 1][d + 1] = a[3];\n"
                     "    }\n");
    merge(s, l, name, OT, "exp2f", blocks, &pp);
}

static fc_status cache_attention(const fc_plan *plan, const fc_group *gr, const char *name, fc_strbuf *s, fc_launch *l) {
    const fc_node *n = gr->nodes[0];
    const fc_value *q = n->in[0], *k = n->in[1], *v = n->in[2];
    int64_t B = q->dims[0], Hq = q->dims[1], Sq = q->dims[2], D = q->dims[3];
    int64_t Hkv = k->dims[1], S = k->dims[2], Dv = v->dims[3];
    if (Hkv < 1 || Hq % Hkv) return FC_ERR_INPUT;
    double scale = n->a.scale == FC_ATTENTION_DEFAULT_SCALE ? (D > 0 ? 1.0 / sqrt((double)D) : 1.0) : n->a.scale;
    int ND = (int)((D + 31) / 32), NV = (int)((Dv + 31) / 32);
    fc_strided_view qv = operand_view(gr, q);
    int iq = arg_of(gr, qv.root), ik = arg_of(gr, k), iv = arg_of(gr, v), il = arg_of(gr, n->in[3]);

    /* The launch's reads: the group's inputs, then each fused update's
     * source and offset; its writes: the result, then the caches the
     * updates write. */
    int a = 0;
    while (plan->groups[a] != gr) a++;
    fused fk = {.c = 'k'}, fv = {.c = 'v'};
    const int uk = fused_update(plan, a, k), uv = fused_update(plan, a, v);
    fk.gr = uk >= 0 ? plan->groups[uk] : NULL;
    fv.gr = uv >= 0 ? plan->groups[uv] : NULL;
    int *args = calloc((size_t)gr->ninputs + 8, sizeof(int));
    const fc_value **reads = calloc((size_t)gr->ninputs + 8, sizeof *reads);
    if (!args || !reads) {
        free(args);
        free(reads);
        return FC_ERR_NOMEM;
    }
    int nr = 0;
    for (int i = 0; i < gr->ninputs; i++) reads[fc_cuda_launch_arg(args, &nr, gr->inputs[i])] = gr->inputs[i];
    fc_strided_view view[2];
    fused *fs[2] = {&fk, &fv};
    for (int e = 0; e < 2; e++) {
        fused *f = fs[e];
        if (!f->gr) continue;
        const fc_node *u = f->gr->nodes[0];
        view[e] = operand_view(f->gr, u->in[1]);
        f->rows = u->in[1]->dims[2];
        f->rows_contiguous = view[e].stride[u->in[1]->rank - 1] == 1;
        f->src = fc_cuda_launch_arg(args, &nr, view[e].root);
        reads[f->src] = view[e].root;
        f->off = fc_cuda_launch_arg(args, &nr, u->in[2]);
        reads[f->off] = u->in[2];
    }
    const int nreads = nr;
    args[nr++] = gr->outputs[0]->id;
    if (fk.gr) args[nr++] = k->id;
    if (fv.gr) args[nr++] = v->id;
    free(l->args);
    l->args = args;
    l->nargs = nr;
    l->nreads = nreads;
    if (fk.gr || fv.gr)
        snprintf(l->summary, sizeof l->summary, "library: cache_attention with the %s%s%s update%s", fk.gr ? "keys'" : "",
                 fk.gr && fv.gr ? " and " : "", fv.gr ? "values'" : "", fk.gr && fv.gr ? "s" : "");

    /* Where the query element at row-major index i is (its view), and the
     * fused updates' new rows. */
    fc_strbuf_printf(s, "static __device__ __forceinline__ long long %s_q(long long i) { return ", name);
    strided_index(s, q, &qv, "i");
    fc_strbuf_printf(s, "; }\n");
    for (int e = 0; e < 2; e++) {
        if (!fs[e]->gr) continue;
        const fc_value *src = fs[e]->gr->nodes[0]->in[1];
        fc_strbuf_printf(s, "static __device__ __forceinline__ long long %s_%cs(long long i) { return ", name, fs[e]->c);
        strided_index(s, src, &view[e], "i");
        fc_strbuf_printf(s, "; }\n");
    }
    char sc[40];
    snprintf(sc, sizeof sc, "%.17g", scale);
    const int ve = vector_width(k->dtype, S, D, Dv);
    const int idx[4] = {iq, ik, iv, il};
    /* bf16 and f16 rows of up to 128 elements on tensor cores (sm 80),
     * where a key/value head serves at least DEC_MMA_MIN_ROWS query rows
     * (a GQA group, or several new tokens): an MMA's 16 rows are then not
     * mostly empty. Measured on the H200 at one new token: Llama's group of
     * 4 took 10.7 us here against 12.0 on the vector kernel, GPT-2's one
     * query row a head 11.0 us against 9.2. */
    if (ve == 8 && D <= DEC_MMA_MAX_D && Dv <= DEC_MMA_MAX_D && plan->sm >= 80 && (Hq / Hkv) * Sq >= DEC_MMA_MIN_ROWS) {
        mma_kernel(plan, gr, name, s, l, reads, nreads, &fk, &fv, idx, scale);
        free(reads);
        return FC_OK;
    }
    if (ve) {
        vector_kernel(plan->sm, gr, name, s, l, reads, nreads, &fk, &fv, idx, sc, ve);
        free(reads);
        return FC_OK;
    }
    int64_t rows = B * Hq * Sq;
    int64_t split = (DEC_TARGET_BLOCKS + rows - 1) / (rows > 0 ? rows : 1);
    int64_t most = S / DEC_MIN_KEYS;
    if (split > most) split = most;
    if (split < 1) split = 1;
    if (split > 64) split = 64;
    const unsigned threads = 32 * DEC_WARPS;
    /* The splits' partial results and one counter per row live in the
     * module (static shapes: their sizes are known here). Launches of one
     * program run in stream order, so every launch of this kernel may use
     * them; the last block of a row resets its counter. */
    fc_strbuf_printf(s, "__device__ float %s_part[%lld];\n__device__ unsigned %s_count[%lld];\n", name,
                     (long long)(rows * split * (NV * 32 + 2)), name, (long long)(rows > 0 ? rows : 1));
    signature(s, reads, nreads, name, "", threads, 1, gr->outputs[0], fk.gr ? k : NULL, fv.gr ? v : NULL);
    wait_for_kernel_before(s);
    free(reads);
    fc_strbuf_printf(s,
                     "  enum { D = %lld, DV = %lld, S = %lld, SQ = %lld, ND = %d, NV = %d, W = %d, SPLIT = %lld, PW = NV * 32 + 2 };\n"
                     "  enum { GQ = %lld }; /* query heads a key/value head */\n"
                     "  __shared__ float sm_m[W], sm_l[W], sm_acc[W][NV * 32];\n"
                     "  __shared__ bool last;\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
                     "  const long long row = blockIdx.x; /* (b * Hq + h) * SQ + i */\n"
                     "  const int part = blockIdx.y;\n"
                     "  const long long i = row %% SQ, bh = row / SQ, b = bh / %lld, h = bh %% %lld;\n"
                     "  const long long kvh = b * %lld + h / GQ;\n",
                     (long long)D, (long long)Dv, (long long)S, (long long)Sq, ND, NV, DEC_WARPS, (long long)split,
                     (long long)(Hq / Hkv), (long long)Hq, (long long)Hq, (long long)Hkv);
    if (fk.gr) fused_prologue(s, &fk, name, S, D, "part == 0 && i == 0 && h % GQ == 0");
    if (fv.gr) fused_prologue(s, &fv, name, S, Dv, "part == 0 && i == 0 && h % GQ == 0");
    char kel[320], vel[320];
    element(kel, sizeof kel, &fk, name, "kp", D);
    element(vel, sizeof vel, &fv, name, "vp", Dv);
    fc_strbuf_printf(s,
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
                     "    for (int e = 0; e < ND; e++) { int d = lane + 32 * e; if (d < D) sdot += qr[e] * fc_ld(%s); }\n"
                     "    for (int o = 16; o > 0; o >>= 1) sdot += __shfl_xor_sync(0xffffffffu, sdot, o);\n"
                     "    const float mn = fmaxf(m, sdot), c = expf(m - mn), p = expf(sdot - mn);\n"
                     "    l = l * c + p;\n"
                     "    for (int e = 0; e < NV; e++) { int d = lane + 32 * e; acc[e] = acc[e] * c + (d < DV ? p * fc_ld(%s) : 0.f); }\n"
                     "    m = mn;\n"
                     "  }\n",
                     index_type(n->in[3]->dtype), il, n->a.causal ? "len - SQ + i + 1" : "len", iq, name, sc, ik, iv, kel, vel);
    fc_strbuf_printf(s,
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
                     name, fc_cuda_storage_type(n->out[0]->dtype), name, name, fc_cuda_storage_type(n->out[0]->dtype), name);
    launch_grid(l, rows, split, threads);
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
    fc_status st = gr->nodes[0]->op == FC_OP_UPDATE_SLICE ? update_slice(gr, name, s, l) : cache_attention(plan, gr, name, s, l);
    if (st == FC_ERR_NOMEM) return fc_set_error(g->ctx, st, "out of memory (codegen)");
    if (st == FC_ERR_INPUT)
        return fc_set_error(g->ctx, st, "codegen: group %d (%s): query heads not a multiple of key/value heads", gr->id,
                            l->summary);
    return s->oom ? fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)") : st;
}
