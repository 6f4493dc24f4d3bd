/* gemv.c - GEMMs of a few rows against [N, K] weights, or of one row
 * against [K, N] weights, as CUDA-core kernels (gemv.h): the rule that
 * picks them, their K splits and their source. */
#include "gemv.h"
#include "gemm_choice.h"
#include "kernel.h"
#include "ir/switches.h"
#include "passes/epilogue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Must match the kernels below. [N, K]: 8 warps a block, 2 columns a warp
 * group, 8 elements (16 bytes) a lane a step of K. [K, N]: 256 threads a
 * block, 4 lanes of 8 columns (32 columns a block) by 64 rows of K at a
 * time, at most 8 rows a thread, at most 8 blocks a cluster. */
enum { GV_WARPS = 8, GV_COLS = 2, GV_VEC = 8, GV_STEP = 32 * GV_VEC };
enum { KN_THREADS = 256, KN_COLS = 32, KN_ROWS = 64, KN_MAX_R = 8, KN_MAX_SPLITS = 8 };
/* [K, N]: fewer 32-column blocks than this many a SM and the cluster
 * doubles (a block's 256 threads keep 4 KiB to 32 KiB of weights in
 * flight, so two a SM stream GPT-2's 1.2 to 4.7 MB at once). */
enum { KN_MIN_BLOCKS_PER_SM = 2 };
/* [N, K] on tensor cores (M from TC_MIN_M): a block's 8 (or 16) warps
 * compute 16 columns (mma's 16 rows of W) over K in as many slices, 32
 * elements a step (4 lanes of 8), at most TC_MAX_U steps' loads in flight
 * a warp. */
enum { TC_MIN_M = 3, TC_COLS = 16, TC_WARPS = 8, TC_STEP = 32, TC_MAX_U = 8 };

/* [N, K] on tensor cores: the warps of a block, each a slice of K. 16
 * where 8-warp blocks would be fewer than two a SM and every warp keeps at
 * least two steps: the grid is then one block on most SMs, and twice the
 * warps keep twice the weights in flight there. Llama-1B's projections at
 * 8 rows (128 to 192 blocks of 8 warps on the H200's 132 SMs) streamed
 * their weights at 1.2-1.9 TB/s (Nsight Compute: the down projection, 2048
 * x 8192, 17.9 us; the out projection 6.8 us), its gate and up (1024
 * blocks) at 2.3-2.9. With 16 warps the down projection took 14.3 us a
 * launch in the step's profile, against 19.0 (its weights loaded before
 * the programmatic wait; 16.4-17.1 alone in ncu). */
static int tc_warps(int64_t N, int64_t K, int64_t sms) {
    const int64_t blocks = (N + TC_COLS - 1) / TC_COLS, w = 2 * TC_WARPS;
    return blocks < 2 * sms && K % (w * TC_STEP) == 0 && K / (w * TC_STEP) >= 2 ? w : TC_WARPS;
}

/* [N, K]: the ways a block's warps split K: the most (2, 4, 8) that leave
 * every warp a whole number of at least two 256-element steps. Measured on
 * the H200 (bench/micro/gemv_bench.cu, weights not in L2, docs/PERF.md):
 * two steps a warp streamed Llama-1B's gate and up (16384 x 2048) at 90% of
 * the copy bandwidth against 81% unsplit, its out projection (2048 x 2048)
 * at 56% against 25%, its down projection (2048 x 8192, 8 ways, four
 * steps a warp) at 77% against 29%, and its LM head at 4.4 TB/s; a rule of
 * "enough blocks a SM" had left gate and up unsplit. */
static int nk_splits(int64_t K) {
    const int64_t steps = K / GV_STEP;
    int s = 1;
    while (s < GV_WARPS && steps % (2 * s) == 0 && steps / (2 * s) >= 2) s *= 2;
    return s;
}

/* [K, N]: the depth of a block's K slice, rows a thread (ceil(slice / 64)). */
static int64_t kn_slice(int64_t K, int s) { return (K + s - 1) / s; }
static int64_t kn_rows(int64_t K, int s) { return (kn_slice(K, s) + KN_ROWS - 1) / KN_ROWS; }

/* [K, N]: the blocks of a cluster splitting K: doubled while the grid has
 * fewer than KN_MIN_BLOCKS_PER_SM blocks a SM or a thread would hold more
 * than KN_MAX_R rows, while a slice keeps at least 64 rows (one a thread).
 * 0: none fits (more than KN_MAX_R rows a thread at the most blocks). */
static int kn_splits(int64_t N, int64_t K, int64_t sms, int max) {
    const int64_t tiles = (N + KN_COLS - 1) / KN_COLS;
    int s = 1;
    while (s < max && kn_slice(K, 2 * s) >= KN_ROWS && (tiles * s < KN_MIN_BLOCKS_PER_SM * sms || kn_rows(K, s) > KN_MAX_R))
        s *= 2;
    return kn_rows(K, s) <= KN_MAX_R ? s : 0;
}

static int64_t elements(const fc_value *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->dims[d];
    return n;
}

/* The group of plan that writes v, or -1 (a parameter); gr's index. */
static int writer(const fc_plan *plan, const fc_value *v) {
    for (int i = 0; i < plan->ngroups; i++)
        for (int o = 0; o < plan->groups[i]->noutputs; o++)
            if (plan->groups[i]->outputs[o] == v) return i;
    return -1;
}

static int index_of(const fc_plan *plan, const fc_group *gr) {
    for (int i = 0; i < plan->ngroups; i++)
        if (plan->groups[i] == gr) return i;
    return -1;
}

/* Whether v is computed at load (passes/loadtime.c): no run writes it. */
static bool at_load(const fc_plan *plan, const fc_value *v) {
    const int w = writer(plan, v);
    return w >= 0 && plan->groups[w]->loadtime;
}

/* The most bytes of A a block stages in shared memory (a_pad). */
enum { GV_STAGE_BYTES = 32 * 1024 };

/* A's pad, read around: a group of its own (no batch, not at load) whose
 * one result is A = concat(x, full(0)) along the last axis, A read by the
 * GEMV alone, x still where the group read it at the GEMV's place. */
static void absorb_a_pad(const fc_plan *plan, int gi, fc_gemv *k) {
    const fc_group *gr = plan->groups[gi];
    const fc_value *a = gr->inputs[k->a];
    const int p = writer(plan, a);
    if (p < 0 || p >= gi || fc_cuda_sole_reader(plan, a) != gi || k->M * k->K * 2 > GV_STAGE_BYTES) return;
    const fc_group *gp = plan->groups[p];
    if (gp->batch > 0 || gp->loadtime || gp->nnodes != 2 || gp->noutputs != 1 || gp->outputs[0] != a) return;
    const fc_node *cat = gp->nodes[0]->op == FC_OP_CONCAT ? gp->nodes[0] : gp->nodes[1];
    const fc_node *z = cat == gp->nodes[0] ? gp->nodes[1] : gp->nodes[0];
    if (cat->op != FC_OP_CONCAT || z->op != FC_OP_FULL || z->a.value != 0.0 || cat->nin != 2 || cat->out[0] != a ||
        cat->in[1] != z->out[0])
        return;
    const fc_value *x = cat->in[0];
    const int ax = cat->a.axis < 0 ? cat->a.axis + a->rank : cat->a.axis;
    if (ax != a->rank - 1 || x->dtype != a->dtype || !fc_value_is_static(x) || fc_cuda_group_input(gp, x) < 0 ||
        elements(x) != k->M * x->dims[x->rank - 1] || !fc_cuda_inputs_survive(plan, p, gi))
        return;
    k->a_pad = p;
    k->a_src = x->id;
    k->ka = x->dims[x->rank - 1];
}

/* The result's slice, written around: a group of its own whose one node
 * slices the result's first columns (start 0, step 1) into a graph result
 * (the caller's buffer, which nothing else writes: written at the GEMM's
 * place as well as at the slice's), the result read by it alone. */
int fc_cuda_result_slice(const fc_plan *plan, const fc_group *gr, int64_t M, int64_t N, int *dst, int64_t *no) {
    const int gi = index_of(plan, gr);
    if (gi < 0) return -1;
    const fc_value *y = gr->outputs[0];
    const int q = fc_cuda_sole_reader(plan, y);
    if (q <= gi) return -1;
    const fc_group *gq = plan->groups[q];
    if (gq->batch > 0 || gq->loadtime || gq->nnodes != 1 || gq->noutputs != 1) return -1;
    const fc_node *sl = gq->nodes[0];
    const fc_value *ys = gq->outputs[0];
    const int ax = sl->a.axis < 0 ? sl->a.axis + y->rank : sl->a.axis;
    if (sl->op != FC_OP_SLICE || sl->in[0] != y || sl->out[0] != ys || ax != y->rank - 1 || sl->a.start != 0 || sl->a.step != 1 ||
        ys->dtype != y->dtype || !fc_value_is_static(ys) || ys->dims[ax] >= N || elements(ys) != M * ys->dims[ax])
        return -1;
    bool result = false;
    for (int o = 0; o < plan->g->noutputs; o++) result = result || plan->g->outputs[o] == ys;
    if (!result) return -1;
    *dst = ys->id;
    *no = ys->dims[ax];
    return q;
}

static void absorb_y_slice(const fc_plan *plan, int gi, fc_gemv *k) {
    if (k->residual < 0) k->y_slice = fc_cuda_result_slice(plan, plan->groups[gi], k->M, k->N, &k->y_dst, &k->no);
}

/* The gate, evaluated in the epilogue: the pointwise group right after
 * the GEMV (a group between could reuse the gate's buffer, which the GEMV
 * writes early) that reads the result [M, 2F] alone, and it only through
 * slices of its last axis, [0, F) and [F, 2F), into a result [M, F] of the
 * GEMV's type. A SwiGLU MLP's silu(gate) * up, its two GEMMs one launch of
 * sibling weights, is such a group: as a kernel of its own it costs a launch and
 * 2F values stored and read again for F (Llama-1B's step at B = 1: 16
 * launches of 1.2 us, each with a wait before and after). The GEMV's
 * inputs must still be where it reads them when the gate's result is
 * stored (the memory plan may give that result a buffer of theirs). */
static void absorb_gate(const fc_plan *plan, int gi, fc_gemv *k) {
    if (k->kn || k->residual >= 0 || k->y_slice >= 0 || k->N % 2 || gi + 1 >= plan->ngroups) return;
    const fc_value *y = plan->groups[gi]->outputs[0];
    const fc_group *gq = plan->groups[gi + 1];
    if (fc_cuda_sole_reader(plan, y) != gi + 1 || gq->kind != FC_GROUP_POINTWISE || gq->batch > 0 || gq->loadtime ||
        gq->ninputs != 1 || gq->inputs[0] != y || gq->noutputs != 1)
        return;
    const int64_t F = k->N / 2;
    const fc_value *o = gq->outputs[0];
    if (o->dtype != k->dtype || !fc_value_is_static(o) || elements(o) != k->M * F || o->dims[o->rank - 1] != F) return;
    for (int i = 0; i < gq->nnodes; i++) {
        const fc_node *n = gq->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            if (n->in[j] != y) continue;
            const int ax = n->a.axis < 0 ? n->a.axis + y->rank : n->a.axis;
            if (n->op != FC_OP_SLICE || ax != y->rank - 1 || n->out[0]->dims[ax] != F) return;
            int64_t step;
            const int64_t start = fc_view_start(n->out[0], ax, &step);
            if (step != 1 || (start != 0 && start != F)) return;
        }
    }
    if (!fc_cuda_inputs_survive(plan, gi, gi + 1)) return;
    k->gate = gi + 1;
    k->gate_dst = o->id;
    k->f = F;
}

bool fc_cuda_pad_absorbed(const fc_plan *plan, const fc_gemm_choice *choice, int gi) {
    for (int j = 0; j < plan->ngroups; j++) {
        if (choice[j].path == FC_GEMM_GEMV && (choice[j].gemv.a_pad == gi || choice[j].gemv.y_slice == gi || choice[j].gemv.gate == gi))
            return true;
        if (choice[j].path == FC_GEMM_SKINNY && choice[j].skinny.y_slice == gi) return true;
    }
    return false;
}

bool fc_cuda_gemv_plan(const fc_plan *plan, const fc_group *gr, fc_gemv *out) {
    if (plan->dynamic || plan->sm < 80 || !fc_switch_on(FC_SW_SKINNY)) return false;
    if (gr->kind != FC_GROUP_LIBRARY || gr->nnodes != 1 || gr->noutputs != 1 || gr->batch > 0) return false;
    const fc_node *n = gr->nodes[0];
    fc_gemm_info gi;
    if (!fc_gemm_info_of(n, &gi) || gi.trans_a || gi.nweights < 1 || gi.nweights > FC_GEMV_MAX_WEIGHTS ||
        (!gi.trans_b && gi.nweights != 1) || n->out[0] != gr->outputs[0])
        return false;
    const fc_value *a = gi.a, *y = n->out[0];
    const fc_dtype t = a->dtype;
    if ((t != FC_BF16 && t != FC_F16) || gi.out != t || y->dtype != t || a->rank < 2 || !fc_value_is_static(a) ||
        !fc_value_is_static(y))
        return false;
    int64_t M = 1;
    for (int d = 0; d + 1 < a->rank; d++) M *= a->dims[d];
    const int64_t K = a->dims[a->rank - 1];
    if (M < 1 || M > FC_GEMV_MAX_M || K < 1 || (gi.trans_b && (K < GV_STEP || K % GV_STEP)) || (!gi.trans_b && M > FC_GEMV_KN_MAX_M))
        return false;
    fc_gemv k = {.M = M, .K = K, .nweights = gi.nweights, .a = fc_cuda_group_input(gr, a), .residual = -1,
                 .act = gi.act == FC_GEMM_ACT_RELU ? 1 : gi.act == FC_GEMM_ACT_GELU_TANH ? 2 : 0, .alpha = gi.alpha, .dtype = t,
                 .kn = !gi.trans_b, .constant_w = true, .a_pad = -1, .y_slice = -1, .a_src = -1, .y_dst = -1, .ka = K,
                 .gate = -1, .gate_dst = -1};
    if (k.a < 0) return false;
    for (int i = 0; i < gi.nweights; i++) {
        const fc_value *w = gi.w[i];
        /* Column n's weights: row n of W_i [N_i, K], or column n of W [K, N]. */
        const int kd = k.kn ? 0 : 1;
        if (w->dtype != t || w->rank != 2 || !fc_value_is_static(w) || w->dims[kd] != K || w->dims[1 - kd] < 1) return false;
        k.n[i] = w->dims[1 - kd];
        k.N += k.n[i];
        k.w[i] = fc_cuda_group_input(gr, w);
        k.bias[i] = -1;
        k.constant_w = k.constant_w && (w->param_index >= 0 || at_load(plan, w));
        if (k.w[i] < 0) return false;
        if (gi.has_bias) {
            const fc_value *b = gi.bias[i];
            if (b->dtype != t || !fc_value_is_static(b) || elements(b) != k.n[i]) return false;
            if ((k.bias[i] = fc_cuda_group_input(gr, b)) < 0) return false;
            k.constant_w = k.constant_w && (b->param_index >= 0 || at_load(plan, b));
        }
    }
    if (elements(y) != M * k.N || y->dims[y->rank - 1] != k.N) return false;
    if (gi.has_residual) {
        const fc_value *r = gi.residual;
        if (r->dtype != t || !fc_value_is_static(r) || elements(r) != M * k.N) return false;
        if ((k.residual = fc_cuda_group_input(gr, r)) < 0) return false;
    }
    const int64_t sms = fc_cuda_plan_sms(plan);
    /* Clusters from sm 90. */
    k.tc = !k.kn && M >= TC_MIN_M;
    k.splits = k.kn ? kn_splits(k.N, K, sms, plan->sm >= 90 ? KN_MAX_SPLITS : 1) : k.tc ? tc_warps(k.N, K, sms) : nk_splits(K);
    if (!k.splits) return false;
    k.no = k.N;
    const int at = index_of(plan, gr);
    if (at >= 0 && plan->offset) {
        if (!k.kn) absorb_a_pad(plan, at, &k);
        absorb_y_slice(plan, at, &k);
        absorb_gate(plan, at, &k);
    }
    if (out) *out = k;
    return true;
}

/* The tensor-core kernel's mma.sync (fc_attn_mma; once a unit: its guard). */
static const char attn_helpers[] =
#include "attention_helpers.cuh.inc.str"
    ;
/* The programmatic wait of the kernels that load their weights around it. */
static const char pdl_wait[] = "#if __CUDA_ARCH__ >= 900\n  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n#endif\n";
/* The dot product of 8 elements (16 bytes) of each operand, in f32: once a
 * unit (the guard), and in every kernel's own source. */
static const char helpers[] =
    "#ifndef FC_GV_HELPERS\n"
    "#define FC_GV_HELPERS\n"
    "static __device__ __forceinline__ float fc_gv_dot8(const uint4 &a, const uint4 &w, const __nv_bfloat16 *) {\n"
    "  const __nv_bfloat162 *x = reinterpret_cast<const __nv_bfloat162 *>(&a), *y = reinterpret_cast<const __nv_bfloat162 *>(&w);\n"
    "  float s = 0.f;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const float2 p = __bfloat1622float2(x[i]), q = __bfloat1622float2(y[i]);\n"
    "    s = fmaf(p.x, q.x, s);\n"
    "    s = fmaf(p.y, q.y, s);\n"
    "  }\n"
    "  return s;\n"
    "}\n"
    "static __device__ __forceinline__ float fc_gv_dot8(const uint4 &a, const uint4 &w, const __half *) {\n"
    "  const __half2 *x = reinterpret_cast<const __half2 *>(&a), *y = reinterpret_cast<const __half2 *>(&w);\n"
    "  float s = 0.f;\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const float2 p = __half22float2(x[i]), q = __half22float2(y[i]);\n"
    "    s = fmaf(p.x, q.x, s);\n"
    "    s = fmaf(p.y, q.y, s);\n"
    "  }\n"
    "  return s;\n"
    "}\n"
    "/* 8 elements from p: one 16-byte load where p is 16-byte aligned (al),\n"
    " * element by element otherwise (a caller's odd buffer). */\n"
    "template <typename T> static __device__ __forceinline__ uint4 fc_gv_load8(const T *p, bool al) {\n"
    "  if (al) return *reinterpret_cast<const uint4 *>(p);\n"
    "  uint4 r;\n"
    "  unsigned short *h = reinterpret_cast<unsigned short *>(&r);\n"
    "#pragma unroll\n"
    "  for (int e = 0; e < 8; e++) h[e] = reinterpret_cast<const unsigned short *>(p)[e];\n"
    "  return r;\n"
    "}\n"
    "/* The n <= 8 elements of a [K, N] weight's row at p (zeros past n): one\n"
    " * 16-byte load where p is 16-byte aligned (al) and n is 8. */\n"
    "template <typename T> static __device__ __forceinline__ uint4 fc_gv_loadn(const T *p, bool al, long long n) {\n"
    "  if (al && n >= 8) return *reinterpret_cast<const uint4 *>(p);\n"
    "  uint4 r = make_uint4(0u, 0u, 0u, 0u);\n"
    "  unsigned short *h = reinterpret_cast<unsigned short *>(&r);\n"
    "#pragma unroll\n"
    "  for (int e = 0; e < 8; e++)\n"
    "    if (e < n) h[e] = reinterpret_cast<const unsigned short *>(p)[e];\n"
    "  return r;\n"
    "}\n"
    "/* 8 elements (16 bytes) as f32. */\n"
    "static __device__ __forceinline__ void fc_gv_unpack8(const uint4 &w, float (&f)[8], const __nv_bfloat16 *) {\n"
    "  const __nv_bfloat162 *y = reinterpret_cast<const __nv_bfloat162 *>(&w);\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const float2 q = __bfloat1622float2(y[i]);\n"
    "    f[2 * i] = q.x;\n"
    "    f[2 * i + 1] = q.y;\n"
    "  }\n"
    "}\n"
    "static __device__ __forceinline__ void fc_gv_unpack8(const uint4 &w, float (&f)[8], const __half *) {\n"
    "  const __half2 *y = reinterpret_cast<const __half2 *>(&w);\n"
    "#pragma unroll\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const float2 q = __half22float2(y[i]);\n"
    "    f[2 * i] = q.x;\n"
    "    f[2 * i + 1] = q.y;\n"
    "  }\n"
    "}\n"
    "#endif\n";

/* The epilogue of both kernels: v (float, the sum for output row m,
 * column n: `m` and `n` name them) scaled, plus the bias and the residual
 * (`bias`, `res`: floats the kernel loaded early, so that their latency
 * overlaps the weight stream), the activation, stored. */
static void emit_y(fc_strbuf *s, const fc_gemv *k, const char *bias, const char *res, const char *indent) {
    fc_strbuf_printf(s, "%sfloat y = (float)%.17g * v;\n", indent, k->alpha);
    if (k->bias[0] >= 0) fc_strbuf_printf(s, "%sy += %s;\n", indent, bias);
    if (k->residual >= 0) fc_strbuf_printf(s, "%sy += %s;\n", indent, res);
    if (k->act == 1) fc_strbuf_printf(s, "%sy = fc_relu(y);\n", indent);
    if (k->act == 2) fc_strbuf_printf(s, "%sy = fc_gelu_tanh(y);\n", indent);
}

static void emit_epilogue(fc_strbuf *s, const fc_gemv *k, const char *m, const char *n, const char *bias, const char *res,
                          const char *indent) {
    emit_y(s, k, bias, res, indent);
    fc_strbuf_printf(s, "%so0[(long long)%s * NO + %s] = fc_to<%s>(y);\n", indent, m, n, fc_cuda_storage_type(k->dtype));
}

/* The gate's epilogue (absorb_gate) for row m, pair p: the sums vg and vu
 * (floats the kernel declared) of columns p and F + p through the
 * epilogue's scale, biases (bg, bu) and activation into yg and yu, then
 * the gate group's result at m, p by the pointwise kernels' own expression
 * code, its loads of the GEMV's result replaced by yg and yu. Under fast
 * numerics they stay in f32, as every value inside one kernel does; eager
 * rounds them to the type the result would have been stored in. */
static fc_status emit_gate(const fc_plan *plan, fc_strbuf *s, const fc_gemv *k, const char *m, const char *p, const char *bg,
                           const char *bu) {
    const fc_group *gq = plan->groups[k->gate];
    const fc_value *o = gq->outputs[0];
    const char *t = fc_cuda_storage_type(k->dtype);
    char r[64] = "y";
    if (plan->numerics != FC_NUMERICS_FAST) fc_cg_rounded(r, sizeof r, k->dtype, "y");
    fc_strbuf_printf(s, "      float yg, yu;\n      {\n        const float v = vg;\n");
    emit_y(s, k, bg, "", "        ");
    fc_strbuf_printf(s, "        yg = %s;\n      }\n      {\n        const float v = vu;\n", r);
    emit_y(s, k, bu, "", "        ");
    fc_strbuf_printf(s, "        yu = %s;\n      }\n", r);
    /* The group's element L = m F + p reads the result's elements m N + p
     * (the first half's slice) and m N + F + p (the second's). */
    fc_strbuf_printf(s,
                     "      {\n"
                     "      const i64 L = (i64)%s * %lldll + %s;\n"
                     "#define fc_gv_y(i) ((i) - (i64)%s * N < %lldll ? yg : yu)\n",
                     m, (long long)k->f, p, m, (long long)k->f);
    /* Temporaries numbered past the kernel's own names (t, c0, ...). */
    kctx kc = {.p = plan, .gr = gq, .s = s, .tmp = 1000, .store_only_vid = -1, .input0_as = "fc_gv_y"};
    if (o->dtype == FC_BF16 || o->dtype == FC_F16) kc.store_only_vid = o->id;
    const char *x = fc_cg_emit_value(&kc, o, "L");
    fc_strbuf_printf(s, "      o0[L] = fc_to<%s>(%s);\n#undef fc_gv_y\n      }\n", t, x);
    free(kc.memo);
    free(kc.cm);
    if (kc.oom || s->oom) return FC_ERR_NOMEM;
    return kc.err ? fc_set_error(plan->g->ctx, kc.err, "%s (a GEMV's gate, group %d)", kc.errmsg, gq->id) : FC_OK;
}

/* The kernel's signature: the group's inputs a0.., the result o0; a
 * cluster of `cluster` blocks where more than 1. */
static void emit_signature(fc_strbuf *s, const fc_group *gr, const char *t, const char *name, int cluster, int threads) {
    fc_strbuf_printf(s, "extern \"C\" __global__ void ");
    if (cluster > 1) fc_strbuf_printf(s, "__cluster_dims__(%d, 1, 1) ", cluster);
    fc_strbuf_printf(s, "__launch_bounds__(%d) %s(", threads, name);
    for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(s, "const %s *__restrict__ a%d, ", t, i);
    fc_strbuf_printf(s, "%s *__restrict__ o0) {\n", t);
}

/* A's row stride in the kernels (AS): K, or where x's rows are staged
 * (a_pad), K and 32 elements: the tensor-core kernel's lanes (g, t) read
 * 16 bytes of rows g at k = 8 t, and rows 64 bytes apart put each 8 lanes
 * of a load on distinct banks (at K's 1536 bytes every row was on the same
 * ones: 6.5-way conflicts, Nsight Compute on 8 x 50257 x 767). The
 * stage's GV_STAGE_BYTES bound counts rows of K; the 32 elements a row add
 * at most 512 bytes of shared memory. */
static int64_t a_stride(const fc_gemv *k) { return k->a_pad >= 0 ? k->K + 32 : k->K; }

/* A's pad read around (a_pad): x's rows of KA and the zeros after them
 * into shared memory, after the wait (x may be the kernel before's
 * result), as 16-byte aligned rows of AS: the statements into stage, the
 * name the kernel reads A by into A. */
static void a_stage(const fc_gemv *k, char *stage, size_t nstage, char *A, size_t nA) {
    const char *t = fc_cuda_storage_type(k->dtype);
    stage[0] = 0;
    snprintf(A, nA, "a%d", k->a);
    if (k->a_pad < 0) return;
    /* Every block stages all of x: its 16-byte words where x is aligned
     * (its rows of KA are not), each element to its padded place. Element
     * by element global loads made the staging most of a tensor-core
     * block's time (8 x 50257 x 767 at 0.0492 ms against 0.0277 aligned).
     * A word's 8 elements are stored one a step, lane l starting at its
     * element 2 ((l / 8) %% 4) (its words rotated by as many): the lanes of
     * a step then write 32 distinct banks, where in order lanes l, l + 8,
     * l + 16 and l + 24 wrote one (4-way conflicts). */
    snprintf(stage, nstage,
             "  __shared__ __align__(16) %s fc_gv_a[M * AS];\n"
             "  {\n"
             "    enum { KA = %lld, XE = M * KA, XV = XE / 8 };\n"
             "    const %s *x = a%d;\n"
             "    unsigned short *sa = reinterpret_cast<unsigned short *>(fc_gv_a);\n"
             "    const int v = ((unsigned long long)x & 15) == 0 ? XV : 0, q = (threadIdx.x >> 3) & 3;\n"
             "    for (int i = threadIdx.x; i < v; i += blockDim.x) {\n"
             "      const uint4 w = reinterpret_cast<const uint4 *>(x)[i];\n"
             "      const unsigned d[4] = {w.x, w.y, w.z, w.w};\n"
             "      unsigned r[4];\n"
             "#pragma unroll\n"
             "      for (int j = 0; j < 4; j++)\n"
             "        r[j] = q == 0 ? d[j] : q == 1 ? d[(j + 1) & 3] : q == 2 ? d[(j + 2) & 3] : d[(j + 3) & 3];\n"
             "#pragma unroll\n"
             "      for (int j = 0; j < 8; j++) {\n"
             "        const int f = 8 * i + ((j + 2 * q) & 7);\n"
             "        sa[f / KA * AS + f %% KA] = (unsigned short)(r[j >> 1] >> (16 * (j & 1)));\n"
             "      }\n"
             "    }\n"
             "    for (int f = 8 * v + threadIdx.x; f < XE; f += blockDim.x) fc_gv_a[f / KA * AS + f %% KA] = x[f];\n"
             "    for (int i = threadIdx.x; i < M * (K - KA); i += blockDim.x)\n"
             "      fc_gv_a[i / (K - KA) * AS + KA + i %% (K - KA)] = fc_to<%s>(0.f);\n"
             "  }\n"
             "  __syncthreads();\n",
             t, (long long)k->ka, t, k->a, t);
    snprintf(A, nA, "fc_gv_a");
}

/* The statements that point wr[c] and br[c] (c: the index's name) at the
 * weight row and the bias of result column n (a variable the statements
 * change): column n is row n - (N_0 + .. + N_{i-1}) of weight i. */
static void weight_rows(fc_strbuf *s, const fc_gemv *k, const char *c) {
    for (int i = 0; i < k->nweights; i++) {
        if (i == 0) fc_strbuf_printf(s, "    if (n < %lldLL) {", (long long)k->n[0]);
        else fc_strbuf_printf(s, "    else if ((n -= %lldLL) < %lldLL) {", (long long)k->n[i - 1], (long long)k->n[i]);
        fc_strbuf_printf(s, " wr[%s] = a%d + n * K;", c, k->w[i]);
        if (k->bias[i] >= 0) fc_strbuf_printf(s, " br[%s] = a%d + n;", c, k->bias[i]);
        fc_strbuf_printf(s, " }\n");
    }
}

/* The loop body that points wr[c] and br[c] at column c's weights (c:
 * the index's name): column `plain` of the result, or for a gate (two
 * columns) p and F + p of pair p = `pair`, none past the last pair. */
static void column_weights(fc_strbuf *s, const fc_gemv *k, const char *c, const char *pair, const char *plain) {
    if (k->gate >= 0)
        fc_strbuf_printf(s, "    const long long p = %s;\n    long long n = %s ? %lldLL + p : p;\n", pair, c, (long long)k->f);
    else fc_strbuf_printf(s, "    long long n = %s;\n", plain);
    fc_strbuf_printf(s, "    wr[%s] = 0;\n    br[%s] = 0;\n", c, c);
    if (k->gate >= 0) fc_strbuf_printf(s, "    if (p < %lldLL) {\n", (long long)k->f);
    else fc_strbuf_printf(s, "    {\n");
    weight_rows(s, k, c);
    fc_strbuf_printf(s, "    }\n");
}

/* The [N, K] kernel: warp group g of a block's G = 8 / SW computes columns
 * c0, c0 + 1, warp sw of the group its K slice of SPW steps. */
static fc_status emit_nk(const fc_plan *plan, const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s) {
    const char *t = fc_cuda_storage_type(k->dtype);
    /* The epilogue's bias and residual, loaded after the wait (a residual
     * is what a kernel before wrote), before the weight stream. */
    char early[512] = "";
    int e = 0;
    if (k->bias[0] >= 0)
        e += snprintf(early + e, sizeof early - (size_t)e,
                      "  float eb[%d];\n#pragma unroll\n  for (int c = 0; c < %d; c++) eb[c] = br[c] ? fc_ld(*br[c]) : 0.f;\n",
                      GV_COLS, GV_COLS);
    if (k->residual >= 0)
        snprintf(early + e, sizeof early - (size_t)e,
                 "  float er[M][%d];\n#pragma unroll\n  for (int m = 0; m < M; m++)\n#pragma unroll\n"
                 "    for (int c = 0; c < %d; c++) er[m][c] = wr[c] ? fc_ld(a%d[(long long)m * N + c0 + c]) : 0.f;\n",
                 GV_COLS, GV_COLS, k->residual);
    char stage[1536], A[16];
    a_stage(k, stage, sizeof stage, A, sizeof A);
    emit_signature(s, gr, t, name, 1, 32 * GV_WARPS);
    fc_strbuf_printf(s,
                     "  enum { M = %lld, K = %lld, AS = %lld, STEPS = K / %d, SW = %d, G = %d / SW, SPW = STEPS / SW };\n"
                     "  const long long N = %lldLL, NO = %lldLL;\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp %% G, sw = warp / G;\n"
                     "  const long long c0 = ((long long)blockIdx.x * G + g) * %d; /* this warp's columns */\n"
                     "  const %s *wr[%d], *br[%d];\n"
                     "#pragma unroll\n"
                     "  for (int c = 0; c < %d; c++) {\n",
                     (long long)k->M, (long long)k->K, (long long)a_stride(k), GV_STEP, k->splits, GV_WARPS, (long long)k->N,
                     (long long)k->no, GV_COLS, t, GV_COLS, GV_COLS, GV_COLS);
    column_weights(s, k, "c", "(long long)blockIdx.x * G + g", "c0 + c");
    /* At 2 rows the weights' first PU steps are loaded before the wait
     * where they are parameters (nothing before writes them): into the
     * registers of the blocks resident while the kernel before finishes,
     * as the tensor-core kernel does. Measured on the H200 (Llama-1B's
     * decode step, docs/PERF.md): at B = 2 1.028 ms against
     * 1.077 without; at B = 1 0.8437 against 0.8337, where the row norms
     * after the out and down projections each took 0.8 us longer. */
    fc_strbuf_printf(s, "  }\n");
    const bool preload = k->constant_w && k->M >= 2;
    if (preload)
        fc_strbuf_printf(s,
                         "  const bool wal = ((unsigned long long)wr[0] & 15) == 0 && ((unsigned long long)wr[%d] & 15) == 0;\n"
                         "  enum { PU = SPW < 4 ? SPW : 4 };\n"
                         "  uint4 wp[PU][%d];\n"
                         "#pragma unroll\n"
                         "  for (int u = 0; u < PU; u++)\n"
                         "#pragma unroll\n"
                         "    for (int c = 0; c < %d; c++)\n"
                         "      wp[u][c] = wr[c] ? fc_gv_load8(wr[c] + (sw * SPW + u) * %d + lane * %d, wal) : make_uint4(0u, 0u, 0u, 0u);\n",
                         GV_COLS - 1, GV_COLS, GV_COLS, GV_STEP, GV_VEC);
    fc_strbuf_printf(s,
                     "%s"
                     "  float acc[M][%d];\n"
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++) acc[m][c] = 0.f;\n"
                     "%s"
                     "%s"
                     "  const %s *A = %s;\n"
                     "  const bool %s = ((unsigned long long)A & 15) == 0%s; /* rows are 512-byte multiples apart */\n",
                     pdl_wait, GV_COLS, GV_COLS, early, stage, t, A, preload ? "aal" : "al",
                     preload ? "" : " && ((unsigned long long)wr[0] & 15) == 0 &&\n                  ((unsigned long long)wr[1] & 15) == 0");
    /* A step: weight words x (preloaded or loaded), A's rows, the FMAs. */
    static const char step[] =
        "    const int kk = st * %d + lane * %d;\n"
        "    uint4 x[%d];\n"
        "#pragma unroll\n"
        "    for (int c = 0; c < %d; c++) x[c] = %s;\n"
        "#pragma unroll\n"
        "    for (int m = 0; m < M; m++) {\n"
        "      const uint4 av = fc_gv_load8(A + (long long)m * AS + kk, %s);\n"
        "#pragma unroll\n"
        "      for (int c = 0; c < %d; c++) acc[m][c] += fc_gv_dot8(av, x[c], (const %s *)0);\n"
        "    }\n"
        "  }\n";
    /* Without a preload one flag guards both streams' vector loads, so the
     * compiler can specialise the loop once for the aligned case. */
    if (preload) {
        fc_strbuf_printf(s, "#pragma unroll\n  for (int st = sw * SPW; st < sw * SPW + PU; st++) {\n");
        fc_strbuf_printf(s, step, GV_STEP, GV_VEC, GV_COLS, GV_COLS, "wp[st - sw * SPW][c]", "aal", GV_COLS, t);
    }
    fc_strbuf_printf(s, "#pragma unroll 8\n  for (int st = sw * SPW%s; st < (sw + 1) * SPW; st++) {\n", preload ? " + PU" : "");
    fc_strbuf_printf(s, step, GV_STEP, GV_VEC, GV_COLS, GV_COLS,
                     preload ? "wr[c] ? fc_gv_load8(wr[c] + kk, wal) : make_uint4(0u, 0u, 0u, 0u)"
                             : "wr[c] ? fc_gv_load8(wr[c] + kk, al) : make_uint4(0u, 0u, 0u, 0u)",
                     preload ? "aal" : "al", GV_COLS, t);
    fc_strbuf_printf(s,
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++)\n"
                     "#pragma unroll\n"
                     "      for (int o = 16; o > 0; o >>= 1) acc[m][c] += __shfl_xor_sync(0xffffffffu, acc[m][c], o);\n"
                     "  fc_dependents_may_launch();\n",
                     GV_COLS);
    if (k->splits > 1)
        /* The group's SW partials summed by its first warp, in warp order. */
        fc_strbuf_printf(s,
                         "  __shared__ float red[SW][G][M][%d];\n"
                         "  if (lane == 0)\n"
                         "#pragma unroll\n"
                         "    for (int m = 0; m < M; m++)\n"
                         "#pragma unroll\n"
                         "      for (int c = 0; c < %d; c++) red[sw][g][m][c] = acc[m][c];\n"
                         "  __syncthreads();\n"
                         "  if (sw != 0 || lane != 0) return;\n"
                         "#pragma unroll\n"
                         "  for (int m = 0; m < M; m++)\n"
                         "#pragma unroll\n"
                         "    for (int c = 0; c < %d; c++) {\n"
                         "      float v = 0.f;\n"
                         "      for (int q = 0; q < SW; q++) v += red[q][g][m][c];\n"
                         "      acc[m][c] = v;\n"
                         "    }\n",
                         GV_COLS, GV_COLS, GV_COLS);
    else fc_strbuf_printf(s, "  if (lane != 0) return;\n");
    if (k->gate >= 0) {
        fc_strbuf_printf(s,
                         "  const long long p = (long long)blockIdx.x * G + g;\n"
                         "  if (!wr[0]) return;\n"
                         "#pragma unroll\n"
                         "  for (int m = 0; m < M; m++) {\n"
                         "      const float vg = acc[m][0], vu = acc[m][1];\n");
        const fc_status st = emit_gate(plan, s, k, "m", "p", "eb[0]", "eb[1]");
        fc_strbuf_printf(s, "  }\n}\n");
        return st;
    }
    fc_strbuf_printf(s,
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int c = 0; c < %d; c++) {\n"
                     "      if (!wr[c]%s) continue;\n"
                     "      const long long n = c0 + c;\n"
                     "      const float v = acc[m][c];\n",
                     GV_COLS, k->no < k->N ? " || c0 + c >= NO" : "");
    emit_epilogue(s, k, "m", "n", "eb[c]", "er[m][c]", "      ");
    fc_strbuf_printf(s, "    }\n}\n");
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}

/* The [N, K] kernel on tensor cores: block b computes result columns r0 =
 * 16 b .. + 16 as mma.m16n8k16's D = W X^T, 16 rows of W (columns of the
 * result) against the M <= 8 rows of A as the 8 columns of B. Warp w takes
 * K's slice w of W (tc_warps: 8 or 16), 32 elements a step: lane (g, t) = (lane / 4, lane % 4)
 * loads 16 bytes of W rows r0 + g and r0 + g + 8 and of A's row g at k =
 * 32 step + 8 t. A dot product may take K in any order as long as both
 * operands take the same one, so those 8 elements are fragment slots 2t,
 * 2t+1, 2t+8, 2t+9 of two MMAs (elements 0-3, then 4-7) in both A's and
 * B's registers: no shuffles, no shared memory, 16-byte loads of 64
 * contiguous bytes a row. The W warps' accumulators are summed in warp
 * order in shared memory; lane (g, t) finishes results (2t, 2t+1) of
 * columns r0 + g and r0 + g + 8. The weights' first U steps are loaded
 * before griddepcontrol.wait when they are parameters. */
static fc_status emit_nk_tc(const fc_plan *plan, const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s) {
    const char *t = fc_cuda_storage_type(k->dtype);
    const int W = k->splits; /* warps, each a slice of K */
    const int64_t steps = k->K / (W * TC_STEP);
    int U = (int)(steps < TC_MAX_U ? steps : TC_MAX_U);
    while (steps % U) U--;
    char stage[1536], A[16];
    a_stage(k, stage, sizeof stage, A, sizeof A);
    emit_signature(s, gr, t, name, 1, 32 * W);
    fc_strbuf_printf(s,
                     "  enum { M = %lld, K = %lld, AS = %lld, KW = K / %d, STEPS = KW / %d, U = %d };\n"
                     "  const long long N = %lldLL, NO = %lldLL;\n"
                     "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;\n"
                     "  const long long r0 = (long long)blockIdx.x * %d;\n"
                     "  const int k0 = warp * KW + t * 8; /* this lane's first element of K */\n"
                     "  const %s *wr[2], *br[2];\n"
                     "#pragma unroll\n"
                     "  for (int h = 0; h < 2; h++) {\n",
                     (long long)k->M, (long long)k->K, (long long)a_stride(k), W, TC_STEP, U, (long long)k->N, (long long)k->no,
                     k->gate >= 0 ? TC_COLS / 2 : TC_COLS, t);
    /* A gate's pairs: W rows g and g + 8 of the mma are columns p and F
     * + p (8 pairs a block). */
    column_weights(s, k, "h", "r0 + g", "r0 + g + 8 * h");
    fc_strbuf_printf(s,

                     "  }\n"
                     "  const bool wal = ((unsigned long long)wr[0] & 15) == 0 && ((unsigned long long)wr[1] & 15) == 0;\n"
                     "  const uint4 z = make_uint4(0u, 0u, 0u, 0u);\n"
                     "  uint4 w[U][2];\n");
    static const char load_w[] = "#pragma unroll\n"
                                 "  for (int u = 0; u < U; u++)\n"
                                 "#pragma unroll\n"
                                 "    for (int h = 0; h < 2; h++) w[u][h] = wr[h] ? fc_gv_load8(wr[h] + k0 + %s, wal) : z;\n";
    if (k->constant_w) {
        fc_strbuf_printf(s, load_w, "u * 32");
        fc_strbuf_printf(s, "%s", pdl_wait);
    } else {
        fc_strbuf_printf(s, "%s", pdl_wait);
        fc_strbuf_printf(s, load_w, "u * 32");
    }
    /* The epilogue's bias and residual, loaded before the stream. */
    if (k->bias[0] >= 0) fc_strbuf_printf(s, "  float eb[2];\n#pragma unroll\n  for (int h = 0; h < 2; h++) eb[h] = br[h] ? fc_ld(*br[h]) : 0.f;\n");
    if (k->residual >= 0)
        fc_strbuf_printf(s,
                         "  float er[4];\n"
                         "#pragma unroll\n"
                         "  for (int i = 0; i < 4; i++) {\n"
                         "    const int m = 2 * t + (i & 1), h = i >> 1;\n"
                         "    er[i] = m < M && wr[h] ? fc_ld(a%d[(long long)m * N + r0 + g + 8 * h]) : 0.f;\n"
                         "  }\n",
                         k->residual);
    fc_strbuf_printf(s,
                     "%s"
                     "  const %s *__restrict__ X = %s + (long long)g * AS + k0;\n"
                     "  const bool xal = ((unsigned long long)X & 15) == 0;\n"
                     "  float c[4] = {0.f, 0.f, 0.f, 0.f};\n"
                     "  for (int st = 0; st < STEPS; st += U) {\n"
                     "    uint4 x[U];\n"
                     "#pragma unroll\n"
                     "    for (int u = 0; u < U; u++) x[u] = g < M ? fc_gv_load8(X + (st + u) * 32, xal) : z;\n"
                     "#pragma unroll\n"
                     "    for (int u = 0; u < U; u++) {\n"
                     "      const unsigned lo[4] = {w[u][0].x, w[u][1].x, w[u][0].y, w[u][1].y};\n"
                     "      const unsigned hi[4] = {w[u][0].z, w[u][1].z, w[u][0].w, w[u][1].w};\n"
                     "      fc_attn_mma(c, lo, x[u].x, x[u].y, %s());\n"
                     "      fc_attn_mma(c, hi, x[u].z, x[u].w, %s());\n"
                     "    }\n"
                     "    if (st + U < STEPS) {\n",
                     stage, t, A, t, t);
    fc_strbuf_printf(s, load_w, "(st + U + u) * 32");
    fc_strbuf_printf(s,
                     "    }\n"
                     "  }\n"
                     "  fc_dependents_may_launch();\n"
                     "  __shared__ float red[%d][32][4];\n"
                     "#pragma unroll\n"
                     "  for (int i = 0; i < 4; i++) red[warp][lane][i] = c[i];\n"
                     "  __syncthreads();\n"
                     "  if (warp != 0) return;\n",
                     W);
    if (k->gate >= 0) {
        /* Lane (g, t) holds columns p (i = 0, 1) and F + p (i = 2, 3) of
         * rows 2t and 2t + 1. */
        fc_strbuf_printf(s,
                         "  const long long p = r0 + g;\n"
                         "  if (!wr[0]) return;\n"
                         "#pragma unroll\n"
                         "  for (int e = 0; e < 2; e++) {\n"
                         "    const int m = 2 * t + e;\n"
                         "    if (m >= M) continue;\n"
                         "    float vg = 0.f, vu = 0.f;\n"
                         "    for (int q = 0; q < %d; q++) {\n"
                         "      vg += red[q][lane][e];\n"
                         "      vu += red[q][lane][2 + e];\n"
                         "    }\n",
                         W);
        const fc_status st = emit_gate(plan, s, k, "m", "p", "eb[0]", "eb[1]");
        fc_strbuf_printf(s, "  }\n}\n");
        return st;
    }
    fc_strbuf_printf(s,
                     "#pragma unroll\n"
                     "  for (int i = 0; i < 4; i++) {\n"
                     "    const int m = 2 * t + (i & 1), h = i >> 1;\n"
                     "    const long long n = r0 + g + 8 * h;\n"
                     "    if (m >= M || !wr[h]%s) continue;\n"
                     "    float v = 0.f;\n"
                     "    for (int q = 0; q < %d; q++) v += red[q][lane][i];\n",
                     k->no < k->N ? " || n >= NO" : "", W);
    emit_epilogue(s, k, "m", "n", "eb[h]", "er[i]", "    ");
    fc_strbuf_printf(s, "  }\n}\n");
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}

/* The [K, N] kernel: thread (tr, cc) of a block multiplies rows k0 + tr,
 * k0 + tr + 64, ... of its K slice (cluster rank r's: k0 = r KS) at the
 * block's columns nb + 8 cc .. + 8; warp shuffles, then shared memory sum
 * the rows' partials, and block 0 of the cluster the slices'. */
static void emit_kn(const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s) {
    const char *t = fc_cuda_storage_type(k->dtype);
    const int S = k->splits;
    const int64_t slice = kn_slice(k->K, S);
    emit_signature(s, gr, t, name, S, KN_THREADS);
    fc_strbuf_printf(s,
                     "  enum { M = %lld, K = %lld, S = %d, KS = %lld, R = %lld };\n"
                     "  const long long N = %lldLL, NO = %lldLL;\n"
                     "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, tr = tid >> 2;\n"
                     "  const int rank = (int)(blockIdx.x %% S); /* the cluster's rank: clusters are (S, 1, 1) */\n"
                     "  const long long nb = (long long)(blockIdx.x / S) * %d, n0 = nb + (tid & 3) * 8;\n"
                     "  const int k0 = rank * KS;\n"
                     "  const %s *__restrict__ W = a%d;\n"
                     "  const bool al = (N & 7) == 0 && ((unsigned long long)W & 15) == 0; /* 16-byte rows */\n",
                     (long long)k->M, (long long)k->K, S, (long long)slice, (long long)kn_rows(k->K, S), (long long)k->N, (long long)k->no,
                     KN_COLS, t, k->w[0]);
    /* Arrived at the start, waited on before the first remote store: a
     * block's shared memory is written only once it runs (as fc_sk_*). */
    if (S > 1) fc_strbuf_printf(s, "  asm volatile(\"barrier.cluster.arrive.relaxed.aligned;\" ::: \"memory\");\n");
    static const char load_w[] =
        "  uint4 w[R];\n"
        "#pragma unroll\n"
        "  for (int i = 0; i < R; i++) {\n"
        "    const int k = k0 + i * %d + tr;\n"
        "    w[i] = k < K && k < k0 + KS && n0 < N ? fc_gv_loadn(W + (long long)k * N + n0, al, N - n0) : make_uint4(0u, 0u, 0u, 0u);\n"
        "  }\n";
    /* The weights are parameters, which no kernel writes: into registers
     * while the kernel before finishes. */
    /* Thread (om, oc) of block 0 finishes output [om, on]; its bias and
     * residual are loaded early, where their latency overlaps the weights'. */
    fc_strbuf_printf(s,
                     "  const int om = tid / %d, oc = tid %% %d;\n"
                     "  const long long on = nb + oc;\n"
                     "  const bool finisher = rank == 0 && om < M && on < NO;\n"
                     "  float eb = 0.f, er = 0.f;\n",
                     KN_COLS, KN_COLS);
    char bias[64] = "", res[80] = "";
    if (k->bias[0] >= 0) snprintf(bias, sizeof bias, "  if (finisher) eb = fc_ld(a%d[on]);\n", k->bias[0]);
    if (k->residual >= 0) snprintf(res, sizeof res, "  if (finisher) er = fc_ld(a%d[(long long)om * N + on]);\n", k->residual);
    if (k->constant_w) {
        fc_strbuf_printf(s, load_w, KN_ROWS);
        fc_strbuf_printf(s, "%s%s%s", bias, pdl_wait, res);
    } else {
        fc_strbuf_printf(s, "%s", pdl_wait);
        fc_strbuf_printf(s, load_w, KN_ROWS);
        fc_strbuf_printf(s, "%s%s", bias, res);
    }
    fc_strbuf_printf(s,
                     "  float acc[M][8];\n"
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int e = 0; e < 8; e++) acc[m][e] = 0.f;\n"
                     "  const %s *__restrict__ A = a%d;\n"
                     "#pragma unroll\n"
                     "  for (int i = 0; i < R; i++) {\n"
                     "    const int k = k0 + i * %d + tr;\n"
                     "    if (k >= K || k >= k0 + KS) break;\n"
                     "    float f[8];\n"
                     "    fc_gv_unpack8(w[i], f, (const %s *)0);\n"
                     "#pragma unroll\n"
                     "    for (int m = 0; m < M; m++) {\n"
                     "      const float x = fc_ld(A[(long long)m * K + k]);\n"
                     "#pragma unroll\n"
                     "      for (int e = 0; e < 8; e++) acc[m][e] = fmaf(x, f[e], acc[m][e]);\n"
                     "    }\n"
                     "  }\n"
                     "  /* The warp's 8 rows of each column (lanes 4 apart), then the 8 warps' in order. */\n"
                     "#pragma unroll\n"
                     "  for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "    for (int e = 0; e < 8; e++)\n"
                     "#pragma unroll\n"
                     "      for (int o = 4; o < 32; o <<= 1) acc[m][e] += __shfl_xor_sync(0xffffffffu, acc[m][e], o);\n"
                     "  fc_dependents_may_launch();\n"
                     "  __shared__ float part[%d][M][%d];\n"
                     "  if (lane < 4)\n"
                     "#pragma unroll\n"
                     "    for (int m = 0; m < M; m++)\n"
                     "#pragma unroll\n"
                     "      for (int e = 0; e < 8; e++) part[warp][m][lane * 8 + e] = acc[m][e];\n"
                     "  __syncthreads();\n"
                     "  float v = 0.f;\n"
                     "  if (om < M)\n"
                     "#pragma unroll\n"
                     "    for (int q = 0; q < %d; q++) v += part[q][om][oc];\n",
                     t, k->a, KN_ROWS, t, KN_THREADS / 32, KN_COLS, KN_THREADS / 32);
    if (S > 1)
        /* Each block's sums into block 0's shared memory (its slot: the
         * rank), one cluster barrier, block 0 sums them in rank order. */
        fc_strbuf_printf(s,
                         "  __shared__ float red[S][M][%d];\n"
                         "  asm volatile(\"barrier.cluster.wait.aligned;\" ::: \"memory\"); /* every block has started */\n"
                         "  if (om < M) {\n"
                         "    unsigned d;\n"
                         "    asm volatile(\"mapa.shared::cluster.u32 %%0, %%1, %%2;\" : \"=r\"(d)\n"
                         "                 : \"r\"((unsigned)__cvta_generic_to_shared(&red[rank][om][oc])), \"r\"(0));\n"
                         "    asm volatile(\"st.shared::cluster.f32 [%%0], %%1;\" ::\"r\"(d), \"f\"(v) : \"memory\");\n"
                         "  }\n"
                         "  asm volatile(\"barrier.cluster.arrive.release.aligned;\\nbarrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n"
                         "  if (rank != 0) return;\n"
                         "  v = 0.f;\n"
                         "  if (om < M)\n"
                         "#pragma unroll\n"
                         "    for (int q = 0; q < S; q++) v += red[q][om][oc];\n",
                         KN_COLS);
    fc_strbuf_printf(s, "  if (!finisher) return;\n");
    emit_epilogue(s, k, "om", "on", "eb", "er", "  ");
    fc_strbuf_printf(s, "}\n");
}

fc_status fc_cuda_emit_gemv(const fc_plan *plan, const fc_group *gr, const fc_gemv *k, const char *name, fc_strbuf *s, fc_launch *l) {
    char d[96];
    fc_gemm_describe(gr->nodes[0], d, sizeof d);
    const int w0 = snprintf(l->summary, sizeof l->summary, "gemv %.100s, %lld x %lld x %lld", d, (long long)k->M, (long long)k->N,
                            (long long)k->K);
    int w = w0;
    if (k->splits > 1 && w > 0 && (size_t)w < sizeof l->summary)
        w += snprintf(l->summary + w, sizeof l->summary - (size_t)w, ", K in %d slices of %s%s", k->splits,
                      k->kn ? "a cluster" : "a block's warps", k->tc ? " on tensor cores" : "");
    if (k->a_pad >= 0 && w > 0 && (size_t)w < sizeof l->summary)
        w += snprintf(l->summary + w, sizeof l->summary - (size_t)w, ", A's rows of %lld padded inside", (long long)k->ka);
    if (k->y_slice >= 0 && w > 0 && (size_t)w < sizeof l->summary)
        w += snprintf(l->summary + w, sizeof l->summary - (size_t)w, ", writes the %lld columns of the result", (long long)k->no);
    if (k->gate >= 0 && w > 0 && (size_t)w < sizeof l->summary) {
        const fc_group *gq = plan->groups[k->gate];
        w += snprintf(l->summary + w, sizeof l->summary - (size_t)w, ", then");
        for (int q = 0; q < gq->nnodes && w > 0 && (size_t)w + 16 < sizeof l->summary; q++)
            w += snprintf(l->summary + w, sizeof l->summary - (size_t)w, "%s%s", q ? "," : " ", fc_op_table[gq->nodes[q]->op].name);
        if (w > 0 && (size_t)w < sizeof l->summary) snprintf(l->summary + w, sizeof l->summary - (size_t)w, " of its halves");
    }
    /* The pads' launches are left out (codegen.c): x read in A's place,
     * the graph result written in the padded result's. */
    if (k->a_pad >= 0) l->args[k->a] = k->a_src;
    if (k->y_slice >= 0) l->args[gr->ninputs] = k->y_dst;
    if (k->gate >= 0) l->args[gr->ninputs] = k->gate_dst;
    /* No group id in the text: the layers' GEMVs of one shape are one
     * kernel (codegen.c's structural key), compiled once. */
    fc_strbuf_printf(s, "%s%s// %s\n", k->tc ? attn_helpers : "", helpers, l->summary);
    fc_status st = FC_OK;
    if (k->kn) emit_kn(gr, k, name, s);
    else if (k->tc) st = emit_nk_tc(plan, gr, k, name, s);
    else st = emit_nk(plan, gr, k, name, s);
    if (st) return st;

    l->kind = FC_LAUNCH_KERNEL;
    if (l->name != name) snprintf(l->name, sizeof l->name, "%s", name);
    if (k->kn) {
        l->grid[0] = (unsigned)((k->N + KN_COLS - 1) / KN_COLS * k->splits);
        l->block[0] = KN_THREADS;
    } else if (k->tc) {
        /* 16 columns a block, or 8 of a gate's pairs. */
        l->grid[0] = (unsigned)(k->gate >= 0 ? (k->f + TC_COLS / 2 - 1) / (TC_COLS / 2) : (k->N + TC_COLS - 1) / TC_COLS);
        l->block[0] = 32u * (unsigned)k->splits;
    } else if (k->gate >= 0) {
        const int64_t pairs = GV_WARPS / k->splits; /* a pair a warp group */
        l->grid[0] = (unsigned)((k->f + pairs - 1) / pairs);
        l->block[0] = 32 * GV_WARPS;
    } else {
        const int64_t per_block = GV_WARPS / k->splits * GV_COLS;
        l->grid[0] = (unsigned)((k->N + per_block - 1) / per_block);
        l->block[0] = 32 * GV_WARPS;
    }
    l->grid[1] = l->grid[2] = 1;
    l->block[1] = l->block[2] = 1;
    l->pdl = true;
    return s->oom ? FC_ERR_NOMEM : FC_OK;
}
