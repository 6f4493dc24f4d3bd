/* emit.c - CUDA C for each kernel group of a plan.
 *
 * Every value a kernel computes is emitted by one recursive function,
 * emit_value(v, L): "the value of v at linear index L of v's own shape".
 * Elementwise ops evaluate their operands at the broadcast index, and views
 * (reshape, permute, expand, slice, concat, split, gather, iota, full) turn
 * into index arithmetic on L, never into copies. Results are memoized per
 * (value, index variable) inside the current C scope, so a value used twice
 * at one index is computed once.
 *
 * POINTWISE groups: each thread handles VEC consecutive elements of the
 * iteration space; inputs and outputs with the space's own shape move as
 * 16-byte vectors.
 *
 * REDUCE groups: rows x reduced elements. tpr threads share a row (a warp per
 * row for short rows, a block per row otherwise; one thread per row for
 * column reductions). Each reduction is a phase over the row followed by an
 * all-reduce; values per row (the reductions and what is computed from them
 * alone) are computed once per row after their phase; the final phase
 * writes the outputs. For rows up to 64 elements a thread (16K and more per
 * row), the full-shape inputs are loaded once into registers in a prologue
 * and every phase reads them from there (a persistent reduction); longer
 * rows loop over memory in each phase.
 *
 * Shapes are constants in the source. Arithmetic is in f32 for f32, f16 and
 * bf16 (f64 stays f64, integers in 64 bits) and every value is rounded to
 * its dtype, as in the reference interpreter.
 */
#include "cuda_codegen.h"
#include "attention.h"
#include "skinny.h"
#include "gemm.h"
#include "passes/epilogue.h" /* fc_gemm_describe */

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char prelude[] =
#include "prelude.cuh.inc"
    ;

/* Source text is built with fc_strbuf (ir/strbuf.c). */

/* ---- switches ------------------------------------------------------------ */

const char *fc_cuda_source_switches(void) {
    static const char *const names[] = {"FUSEC_ATTN_BN", "FUSEC_ATTN_PERSIST", "FUSEC_ATTN_L2SECT",
                                        "FUSEC_NORM_PRELOAD", "FUSEC_ATTN_TMA", "FUSEC_SKINNY",
                                        "FUSEC_SKINNY_ATTN"};
    char opt[160];
    int at = snprintf(opt, sizeof opt, "-DFC_SWITCHES="), set = 0;
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++) {
        const char *v = getenv(names[i]);
        set += v != NULL;
        at += snprintf(opt + at, sizeof opt - (size_t)at, "%s%.24s", i ? "." : "", v ? v : "");
    }
    if (!set) return NULL;
    /* Interned: a program keeps pointers to its options. A process sees a
     * few settings at most; past the table, one shared marker still keeps
     * every switched program apart from the default ones. */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char seen[16][160];
    static int nseen;
    const char *r = NULL;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nseen && !r; i++)
        if (!strcmp(seen[i], opt)) r = seen[i];
    if (!r && nseen < 16) {
        memcpy(seen[nseen], opt, sizeof opt);
        r = seen[nseen++];
    }
    pthread_mutex_unlock(&mu);
    return r ? r : "-DFC_SWITCHES=many";
}

int64_t fc_cuda_plan_sms(const fc_plan *plan) { return plan->sm_count > 0 ? plan->sm_count : 132; }

/* ---- types --------------------------------------------------------------- */

const char *fc_cuda_storage_type(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return "double";
    case FC_F32: return "float";
    case FC_F16: return "__half";
    case FC_BF16: return "__nv_bfloat16";
    case FC_I64: return "i64";
    case FC_I32: return "int";
    case FC_I8: return "signed char";
    case FC_BOOL: return "unsigned char";
    default: FC_UNREACHABLE("dtype");
    }
}

static const char *compute_type(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return "double";
    case FC_F32: case FC_F16: case FC_BF16: return "float";
    case FC_BOOL: return "int";
    default: return "i64";
    }
}

/* Expression `e` (in compute type) rounded to dtype dt. */
static void rounded(char *out, size_t n, fc_dtype dt, const char *e) {
    switch (dt) {
    case FC_BF16: snprintf(out, n, "fc_rnd_bf16(%s)", e); break;
    case FC_F16: snprintf(out, n, "fc_rnd_f16(%s)", e); break;
    case FC_I32: snprintf(out, n, "fc_sat(%s, -2147483648ll, 2147483647ll)", e); break;
    case FC_I8: snprintf(out, n, "fc_sat(%s, -128ll, 127ll)", e); break;
    case FC_BOOL: snprintf(out, n, "((%s) != 0)", e); break;
    default: snprintf(out, n, "%s", e); break;
    }
}

/* ---- kernel context -------------------------------------------------------- */

#define SZ 96  /* room for one size expression */
#define CX 256 /* room for one coordinate expression */

typedef struct memo {
    int vid;
    char idx[24];
    char expr[96];
} memo;

/* Coordinates an index is known to have: idx is the linear index of an
 * element of a value of shape (rank, dims) whose coordinate d is the C
 * expression c[d] ("" where not known). */
typedef struct coords {
    char idx[24];
    int rank;
    fc_dim dims[FC_MAX_RANK];
    char c[FC_MAX_RANK][CX];
} coords;

typedef struct kctx {
    const fc_plan *p;
    const fc_group *gr;
    fc_strbuf *s;
    int tmp;
    memo *memo;
    int nmemo, cap_memo;
    /* Indices made from coordinates (a view's, a broadcast operand's, a row
     * kernel's element): coord reads their coordinates back instead of
     * dividing the index again (64-bit divisions by run-time sizes are the
     * costly part of a dynamic kernel's element). Scoped with the memo. */
    coords *cm;
    int ncm, cap_cm;
    /* A trailing reduction: element L = row * len + j0 + e, its outer
     * coordinates from row (computed once a row), the reduced ones from j0. */
    bool row_coords;
    /* A pointwise kernel's vector chunk at base (a multiple of its width,
     * which divides the last dim): chunk_c[d] names base's coordinate d, and
     * element base + e has them, the last plus e. */
    bool chunk_coords;
    char chunk_c[FC_MAX_RANK][24];
    bool oom;
    fc_status err;
    char errmsg[256];
    /* REDUCE groups */
    bool reduce;
    int tpr;
    bool *is_row;    /* per value id: computed once per row */
    bool *row_ready; /* per value id: its row variable exists */
    /* Values kept in registers across phases: element e of chunk c of value
     * cached_vid[i] is cached_arr[i][c][e]. */
    int cached_vid[8];
    char cached_arr[8][16];
    int ncached;
    /* Dynamic plan: symbolic sizes are the kernel's i64 parameters s0 ..
     * s{nsyms-1} (every kernel takes all of them). */
    bool dyn;
    int nsyms;
    /* A frame kernel (fc_launch.frame): its pointers are loaded, not
     * parameters, so read-only loads are said explicitly (fc_nc). */
    bool frame;
    /* Broadcast inputs whose shape is a suffix of the space (a norm's
     * weight) are vector-loaded at base % P (P = their element count):
     * bv lists them for the current chunk; bx maps (element index L, P)
     * to the name of that element's index into them. */
    struct { int input; int64_t p; char off[24]; } bv[8];
    int nbv;
    /* Persistent rows: suffix-broadcast inputs loaded in the prologue with
     * the row (their chunk c in q<input>[c]) instead of in the phases that
     * read them: bq lists the inputs. */
    int bq[8];
    int nbq;
    struct { char L[24]; int64_t p; char ix[24]; } bx[8];
    int nbx;
    /* store_element: the output value being stored unrounded (-1: none). */
    int store_only_vid;
    char store_only_name[24];
} kctx;

/* ---- sizes as C text ---------------------------------------------------------- */

/* A dim as C text: a literal (`768ll`) or the symbol's parameter (`s0`). */
static const char *dimx(int64_t d, char *buf, size_t n) {
    if (fc_dim_is_sym(d)) snprintf(buf, n, "s%d", fc_dim_sym_index(d));
    else snprintf(buf, n, "%lldll", (long long)d);
    return buf;
}

/* A product of dims as C text: `3072ll`, `(s0 * s1 * 768ll)`. */
const char *fc_cuda_mono_text(const fc_mono *m, char *buf, size_t n) {
    if (fc_mono_is_static(m) || m->c == 0) {
        snprintf(buf, n, "%lldll", (long long)m->c);
        return buf;
    }
    size_t pos = (size_t)snprintf(buf, n, "(");
    bool first = true;
    for (int i = 0; i < FC_DYN_MAX_SYMS; i++)
        for (int e = 0; e < m->e[i] && pos < n; e++) {
            pos += (size_t)snprintf(buf + pos, n - pos, "%ss%d", first ? "" : " * ", i);
            first = false;
        }
    if (pos < n && m->c != 1) pos += (size_t)snprintf(buf + pos, n - pos, " * %lldll", (long long)m->c);
    if (pos < n) snprintf(buf + pos, n - pos, ")");
    return buf;
}


/* Row-major strides of dims as C text. */
static void stride_text(const fc_dim *dims, int rank, char st[][SZ]) {
    fc_mono m = fc_mono_one();
    for (int d = rank - 1; d >= 0; d--) {
        fc_cuda_mono_text(&m, st[d], SZ);
        fc_mono_mul_dim(&m, dims[d]);
    }
}

static const char *lookup(kctx *k, int vid, const char *idx) {
    for (int i = k->nmemo - 1; i >= 0; i--)
        if (k->memo[i].vid == vid && !strcmp(k->memo[i].idx, idx)) return k->memo[i].expr;
    return NULL;
}

/* Room for element n of the array *arr of elements of sz bytes (capacity
 * *cap, doubled from first): the array, or NULL (k->oom) out of memory. */
static void *room_for(kctx *k, void *arr, int *cap, int n, size_t sz, int first) {
    if (n < *cap) return arr;
    int c = *cap ? *cap * 2 : first;
    void *grown = realloc(arr, sz * (size_t)c);
    if (!grown) {
        k->oom = true;
        return NULL;
    }
    *cap = c;
    return grown;
}

static void remember(kctx *k, int vid, const char *idx, const char *expr) {
    memo *grown = room_for(k, k->memo, &k->cap_memo, k->nmemo, sizeof *k->memo, 64);
    if (!grown) return;
    k->memo = grown;
    memo *m = &k->memo[k->nmemo++];
    m->vid = vid;
    snprintf(m->idx, sizeof m->idx, "%s", idx);
    snprintf(m->expr, sizeof m->expr, "%s", expr);
}

static void fail(kctx *k, const char *msg) {
    if (!k->err) {
        k->err = FC_ERR_UNSUPPORTED;
        snprintf(k->errmsg, sizeof k->errmsg, "%s", msg);
    }
}

static bool is_input(const kctx *k, const fc_value *v, int *pos) {
    for (int i = 0; i < k->gr->ninputs; i++)
        if (k->gr->inputs[i] == v) {
            if (pos) *pos = i;
            return true;
        }
    return false;
}

static bool same_dims(const fc_value *a, const fc_value *b) {
    return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(fc_dim) * (size_t)a->rank);
}

/* Record that idx is the linear index of the element of shape (rank,
 * dims) at coordinates c (C expressions; NULL or "" where not known). */
static void note_coords(kctx *k, const char *idx, int rank, const fc_dim *dims, const char *const *c) {
    coords *grown = room_for(k, k->cm, &k->cap_cm, k->ncm, sizeof *k->cm, 32);
    if (!grown) return;
    k->cm = grown;
    coords *e = &k->cm[k->ncm++];
    snprintf(e->idx, sizeof e->idx, "%s", idx);
    e->rank = rank;
    for (int d = 0; d < rank; d++) {
        e->dims[d] = dims[d];
        /* One that does not fit is not known (never a cut expression). */
        if (!c[d] || snprintf(e->c[d], CX, "%s", c[d]) >= CX) e->c[d][0] = 0;
    }
}

/* note_coords from an array of names (a view's coordinates). */
static void note_coord_names(kctx *k, const char *idx, const fc_value *x, char names[][24]) {
    const char *c[FC_MAX_RANK];
    for (int d = 0; d < x->rank; d++) c[d] = names[d];
    note_coords(k, idx, x->rank, x->dims, c);
}

/* Coordinate d of index L in shape v, where L's coordinates are known. */
static const char *known_coord(const kctx *k, const fc_value *v, const char *L, int d) {
    for (int i = k->ncm - 1; i >= 0; i--) {
        const coords *e = &k->cm[i];
        if (strcmp(e->idx, L) || e->rank != v->rank || memcmp(e->dims, v->dims, sizeof(fc_dim) * (size_t)v->rank)) continue;
        return e->c[d][0] ? e->c[d] : NULL;
    }
    return NULL;
}

/* Declare `i64 name = coordinate d of linear index L in shape v`. */
static void coord(kctx *k, const fc_value *v, const char *L, int d, char *name, size_t n) {
    char st[FC_MAX_RANK][SZ], dim[SZ];
    snprintf(name, n, "c%d", k->tmp++);
    const char *known = known_coord(k, v, L, d);
    if (known) {
        fc_strbuf_printf(k->s, "      i64 %s = %s;\n", name, known);
        return;
    }
    stride_text(v->dims, v->rank, st);
    if (d == 0) fc_strbuf_printf(k->s, "      i64 %s = %s / %s;\n", name, L, st[0]);
    else fc_strbuf_printf(k->s, "      i64 %s = (%s / %s) %% %s;\n", name, L, st[d], dimx(v->dims[d], dim, sizeof dim));
}

static bool full_shape(const fc_group *gr, const fc_value *v);

/* x's element count when x, without leading size-1 dims, is a suffix of
 * the group's space with static dims (so the element at space index L is
 * x's element L % P); 0 otherwise. */
static int64_t suffix_numel(const fc_group *gr, const fc_value *x) {
    int lead = 0;
    while (lead < x->rank && x->dims[lead] == 1) lead++;
    int r = x->rank - lead;
    if (r > gr->rank) return 0;
    int64_t p = 1;
    for (int d = 0; d < r; d++) {
        fc_dim dim = x->dims[lead + d];
        if (fc_dim_is_sym(dim) || dim != gr->space[gr->rank - r + d]) return 0;
        p *= dim;
    }
    return p;
}

/* Index of operand x (broadcast into the shape of out) at out's index L. */
static void broadcast_index(kctx *k, const fc_value *out, const char *L, const fc_value *x, char *name, size_t n) {
    if (same_dims(out, x)) {
        snprintf(name, n, "%s", L);
        return;
    }
    if (k->nbx && full_shape(k->gr, out)) {
        int64_t p = suffix_numel(k->gr, x);
        for (int i = 0; i < k->nbx && p; i++)
            if (k->bx[i].p == p && !strcmp(k->bx[i].L, L)) {
                snprintf(name, n, "%s", k->bx[i].ix);
                return;
            }
    }
    char xs[FC_MAX_RANK][SZ];
    stride_text(x->dims, x->rank, xs);
    int off = out->rank - x->rank;
    char expr[1024] = "0", c[FC_MAX_RANK][24];
    size_t pos = 1;
    for (int d = 0; d < x->rank; d++) {
        snprintf(c[d], sizeof c[d], "0");
        if (x->dims[d] == 1) continue;
        coord(k, out, L, d + off, c[d], sizeof c[d]);
        pos += (size_t)snprintf(expr + pos, sizeof expr - pos, " + %s * %s", c[d], xs[d]);
        if (pos >= sizeof expr) pos = sizeof expr - 1;
    }
    snprintf(name, n, "ix%d", k->tmp++);
    fc_strbuf_printf(k->s, "      i64 %s = %s;\n", name, expr);
    note_coord_names(k, name, x, c);
}

static void literal(fc_dtype dt, double x, char *out, size_t n) {
    double r = fc_round_to_dtype(x, dt);
    if (isnan(r)) snprintf(out, n, "(%s)NAN", compute_type(dt));
    else if (isinf(r)) snprintf(out, n, "(%s)(%sINFINITY)", compute_type(dt), r < 0 ? "-" : "");
    else if (fc_dtype_is_float(dt)) snprintf(out, n, "(%s)%.17g", compute_type(dt), r);
    else snprintf(out, n, "(%s)%lldll", compute_type(dt), (long long)r);
}

static const char *emit_value(kctx *k, const fc_value *v, const char *L);

/* Emit `CT t = expr;` (rounded to v's dtype), remember it, return the name. */
static const char *bind(kctx *k, const fc_value *v, const char *L, const char *expr) {
    char name[24], r[1100];
    snprintf(name, sizeof name, "t%d", k->tmp++);
    /* A value whose only use here is a store of its own dtype is left
     * unrounded: the store's conversion rounds to nearest even, exactly as
     * fc_rnd_* does, and rounding is idempotent (same bits, two instructions
     * an element fewer). It is not memoized: another use recomputes it. */
    if (v->id == k->store_only_vid) {
        fc_strbuf_printf(k->s, "      %s %s = %s;\n", compute_type(v->dtype), name, expr);
        snprintf(k->store_only_name, sizeof k->store_only_name, "%s", name);
        return k->store_only_name;
    }
    rounded(r, sizeof r, v->dtype, expr);
    fc_strbuf_printf(k->s, "      %s %s = %s;\n", compute_type(v->dtype), name, r);
    remember(k, v->id, L, name);
    return lookup(k, v->id, L);
}

/* A loaded element: storage to compute type is exact, nothing to round. */
static const char *bind_load(kctx *k, const fc_value *v, const char *L, const char *expr) {
    char name[24];
    snprintf(name, sizeof name, "t%d", k->tmp++);
    fc_strbuf_printf(k->s, "      %s %s = %s;\n", compute_type(v->dtype), name, expr);
    remember(k, v->id, L, name);
    return lookup(k, v->id, L);
}

static const char *unary_fn(fc_op op, fc_dtype ct) {
    bool dbl = ct == FC_F64;
    switch (op) {
    case FC_OP_ABS: return fc_dtype_is_float(ct) ? (dbl ? "fabs" : "fabsf") : "llabs";
    case FC_OP_LOG: return dbl ? "log" : "logf";
    case FC_OP_SQRT: return dbl ? "sqrt" : "sqrtf";
    case FC_OP_SIN: return dbl ? "sin" : "sinf";
    case FC_OP_COS: return dbl ? "cos" : "cosf";
    case FC_OP_TANH: return dbl ? "tanh" : "tanhf";
    case FC_OP_ERF: return dbl ? "erf" : "erff";
    case FC_OP_EXP: return "fc_exp";
    case FC_OP_RSQRT: return "fc_rsqrt";
    case FC_OP_SIGMOID: return "fc_sigmoid";
    case FC_OP_RELU: return "fc_relu";
    case FC_OP_GELU: return "fc_gelu";
    case FC_OP_GELU_TANH: return "fc_gelu_tanh";
    case FC_OP_SILU: return "fc_silu";
    default: return NULL;
    }
}

/* Operand i of n at out index L, converted to compute type of dtype ct. */
static void operand(kctx *k, const fc_node *n, int i, const char *L, fc_dtype ct, char *out, size_t sz) {
    const fc_value *x = n->in[i];
    if (x->weak) {
        literal(x->dtype, x->scalar, out, sz);
        return;
    }
    char idx[24];
    broadcast_index(k, n->out[0], L, x, idx, sizeof idx);
    const char *e = emit_value(k, x, idx);
    snprintf(out, sz, "((%s)%s)", compute_type(ct), e ? e : "0");
}

static bool in_group(const kctx *k, const fc_node *n);

/* Is operand j of the multiply n an in-group `t + 1` (f32 or f64, the
 * multiply's dtype, read by n alone and not stored)? Then *t is t, and
 * h * (t + 1) is emitted as fma(h, t, h): one instruction less (gelu's erf
 * form is x/2 * (1 + erf(..)), 22 of the pointwise chain's 36 instructions
 * an element are erf) and one rounding less (t + 1 is not rounded). */
static bool plus_one_operand(const kctx *k, const fc_node *n, int j, const fc_value **t) {
    const fc_value *b = n->in[j], *v = n->out[0];
    if (b->weak || !b->def || b->def->op != FC_OP_ADD || !in_group(k, b->def)) return false;
    if ((v->dtype != FC_F32 && v->dtype != FC_F64) || b->dtype != v->dtype) return false;
    const fc_node *add = b->def;
    int one = add->in[0]->weak && add->in[0]->scalar == 1.0 ? 0 : add->in[1]->weak && add->in[1]->scalar == 1.0 ? 1 : -1;
    if (one < 0 || add->in[1 - one]->weak || add->in[1 - one]->dtype != b->dtype || !same_dims(add->in[1 - one], b))
        return false;
    for (int o = 0; o < k->gr->noutputs; o++)
        if (k->gr->outputs[o] == b) return false;
    int uses = 0;
    for (int i = 0; i < k->gr->nnodes; i++)
        for (int q = 0; q < k->gr->nodes[i]->nin; q++) uses += k->gr->nodes[i]->in[q] == b;
    if (uses != 1) return false;
    *t = add->in[1 - one];
    return true;
}

static const char *emit_elementwise(kctx *k, const fc_node *n, const char *L) {
    const fc_value *v = n->out[0];
    const fc_value *t1 = NULL;
    int pj = -1;
    if (n->op == FC_OP_MUL) pj = plus_one_operand(k, n, 1, &t1) ? 1 : plus_one_operand(k, n, 0, &t1) ? 0 : -1;
    if (pj >= 0) {
        char h[300], idx[24], e[1024];
        operand(k, n, 1 - pj, L, v->dtype, h, sizeof h);
        broadcast_index(k, v, L, n->in[pj], idx, sizeof idx);
        const char *te = emit_value(k, t1, idx);
        snprintf(e, sizeof e, "%s(%s, (%s)%s, %s)", v->dtype == FC_F64 ? "fma" : "fmaf", h, compute_type(v->dtype),
                 te ? te : "0", h);
        return bind(k, v, L, e);
    }
    fc_dtype ct = v->dtype;
    if (fc_op_is_compare(n->op)) ct = n->in[0]->dtype == n->in[1]->dtype ? n->in[0]->dtype
                                                                         : fc_promote(n->in[0]->dtype, n->in[1]->dtype);
    if (n->op == FC_OP_CAST) ct = n->in[0]->dtype;
    char a[300], b[300], c[300], e[1024];
    operand(k, n, n->op == FC_OP_WHERE ? 1 : 0, L, ct, a, sizeof a);
    if (n->nin > 1) operand(k, n, n->op == FC_OP_WHERE ? 2 : 1, L, ct, b, sizeof b);
    const char *fn = unary_fn(n->op, ct);
    switch (n->op) {
    case FC_OP_NEG: snprintf(e, sizeof e, "(-%s)", a); break;
    case FC_OP_RECIP: snprintf(e, sizeof e, "((%s)1 / %s)", compute_type(ct), a); break;
    case FC_OP_ADD: snprintf(e, sizeof e, "(%s + %s)", a, b); break;
    case FC_OP_SUB: snprintf(e, sizeof e, "(%s - %s)", a, b); break;
    case FC_OP_MUL: snprintf(e, sizeof e, "(%s * %s)", a, b); break;
    case FC_OP_DIV: {
        /* Division by a value computed once per row (softmax's sum): multiply
         * by its reciprocal, computed once per row (one more rounding, at
         * most one f32 ulp). */
        const char *rcp = k->reduce && !n->in[1]->weak && k->is_row[n->in[1]->id] && !k->is_row[v->id]
                              ? lookup(k, n->in[1]->id, "rcp") : NULL;
        if (rcp) snprintf(e, sizeof e, "(%s * (%s)%s)", a, compute_type(ct), rcp);
        else snprintf(e, sizeof e, "(%s / %s)", a, b);
        break;
    }
    case FC_OP_MAX: snprintf(e, sizeof e, "fc_max(%s, %s)", a, b); break;
    case FC_OP_MIN: snprintf(e, sizeof e, "fc_min(%s, %s)", a, b); break;
    case FC_OP_POW: snprintf(e, sizeof e, "fc_pow(%s, %s)", a, b); break;
    case FC_OP_EQ: snprintf(e, sizeof e, "(%s == %s)", a, b); break;
    case FC_OP_NE: snprintf(e, sizeof e, "(%s != %s)", a, b); break;
    case FC_OP_LT: snprintf(e, sizeof e, "(%s < %s)", a, b); break;
    case FC_OP_LE: snprintf(e, sizeof e, "(%s <= %s)", a, b); break;
    case FC_OP_GT: snprintf(e, sizeof e, "(%s > %s)", a, b); break;
    case FC_OP_GE: snprintf(e, sizeof e, "(%s >= %s)", a, b); break;
    case FC_OP_WHERE:
        operand(k, n, 0, L, FC_BOOL, c, sizeof c);
        snprintf(e, sizeof e, "(%s ? %s : %s)", c, a, b);
        break;
    case FC_OP_CAST:
        if (v->dtype == FC_BOOL) { /* nonzero, compared in the source type (0.5 is true) */
            snprintf(e, sizeof e, "(%s != (%s)0)", a, compute_type(ct));
        } else if (fc_dtype_is_float(ct) && (fc_dtype_is_int(v->dtype))) {
            double lo = fc_round_to_dtype(-INFINITY, v->dtype), hi = fc_round_to_dtype(INFINITY, v->dtype);
            snprintf(e, sizeof e, "fc_f2i((double)%s, %.17g, %.17g)", a, lo, hi);
        } else {
            snprintf(e, sizeof e, "(%s)%s", compute_type(v->dtype), a);
        }
        break;
    default:
        if (!fn) {
            fail(k, "codegen: op without a CUDA lowering");
            return "0";
        }
        snprintf(e, sizeof e, "%s(%s)", fn, a);
    }
    return bind(k, v, L, e);
}

/* Linear index into x from coordinates (names) of x's dims. */
static void linear(const fc_value *x, char coords[][24], char *out, size_t n) {
    char st[FC_MAX_RANK][SZ];
    stride_text(x->dims, x->rank, st);
    size_t pos = (size_t)snprintf(out, n, "0");
    for (int d = 0; d < x->rank && pos < n; d++)
        pos += (size_t)snprintf(out + pos, n - pos, " + %s * %s", coords[d], st[d]);
}

/* x reshaped to v: where v's coordinates at L are known (c, names) and
 * the dims regroup (one of x's dims a run of static dims of v, or a static
 * dim of v a run of x's, or the same dim), x's coordinates at L without a
 * division by a run-time size: merged as sums of products, split by static
 * sizes. Otherwise nothing is noted (coord divides L as before). */
static void reshape_coords(kctx *k, const fc_value *v, char c[][24], const fc_value *x, const char *L) {
    for (int d = 0; d < v->rank; d++)
        if (!known_coord(k, v, L, d)) return;
    char buf[FC_MAX_RANK][CX];
    const char *xc[FC_MAX_RANK];
    int i = 0, j = 0;
    while (i < x->rank || j < v->rank) {
        if (i < x->rank && x->dims[i] == 1) {
            xc[i++] = "0";
            continue;
        }
        if (j < v->rank && v->dims[j] == 1) {
            j++;
            continue;
        }
        if (i >= x->rank || j >= v->rank) return;
        if (x->dims[i] == v->dims[j]) {
            xc[i++] = c[j++];
            continue;
        }
        if (fc_dim_is_sym(x->dims[i]) || fc_dim_is_sym(v->dims[j])) return;
        if (x->dims[i] > v->dims[j]) {
            /* x's dim i is v's dims j .. q - 1, merged (row-major). */
            int64_t prod = 1;
            int q = j;
            while (q < v->rank && !fc_dim_is_sym(v->dims[q]) && prod < x->dims[i]) prod *= v->dims[q++];
            if (prod != x->dims[i]) return;
            size_t pos = (size_t)snprintf(buf[i], CX, "(0");
            int64_t inner = prod;
            for (int r = j; r < q && pos < CX; r++) {
                inner /= v->dims[r];
                pos += (size_t)snprintf(buf[i] + pos, CX - pos, " + %s * %lldll", c[r], (long long)inner);
            }
            if (pos + 2 > CX) return;
            snprintf(buf[i] + pos, CX - pos, ")");
            xc[i] = buf[i];
            i++;
            j = q;
        } else {
            /* v's dim j is x's dims i .. q - 1: split by their static sizes. */
            int64_t prod = 1;
            int q = i;
            while (q < x->rank && !fc_dim_is_sym(x->dims[q]) && prod < v->dims[j]) prod *= x->dims[q++];
            if (prod != v->dims[j]) return;
            int64_t inner = prod;
            for (int r = i; r < q; r++) {
                inner /= x->dims[r];
                if (snprintf(buf[r], CX, "((%s / %lldll) %% %lldll)", c[j], (long long)inner, (long long)x->dims[r]) >= CX) return;
                xc[r] = buf[r];
            }
            i = q;
            j++;
        }
    }
    note_coords(k, L, x->rank, x->dims, xc);
}

static const char *emit_view(kctx *k, const fc_node *n, const fc_value *v, const char *L) {
    char c[FC_MAX_RANK][24], in_c[FC_MAX_RANK][24], idx[1200], name[24];
    const fc_attrs *a = &n->a;
    for (int d = 0; d < v->rank; d++) coord(k, v, L, d, c[d], sizeof c[d]);
    const fc_value *x = n->nin ? n->in[0] : NULL;
    switch (n->op) {
    case FC_OP_RESHAPE:
        reshape_coords(k, v, c, x, L);
        return emit_value(k, x, L);
    case FC_OP_PERMUTE:
        for (int d = 0; d < v->rank; d++) {
            int64_t src = a->list[d] < 0 ? a->list[d] + x->rank : a->list[d];
            memcpy(in_c[src], c[d], 24);
        }
        break;
    case FC_OP_EXPAND: {
        int off = v->rank - x->rank;
        for (int d = 0; d < x->rank; d++) snprintf(in_c[d], sizeof in_c[d], "%s", x->dims[d] == 1 ? "0" : c[d + off]);
        break;
    }
    case FC_OP_SLICE:
    case FC_OP_SPLIT: {
        int ax = (int)(a->axis < 0 ? a->axis + x->rank : a->axis);
        int64_t start = 0, step = 1;
        if (fc_dim_is_sym(x->dims[ax])) {
            fail(k, "codegen: slice or split of a symbolic dimension");
            return "0";
        }
        if (n->op == FC_OP_SLICE) {
            int64_t dim = x->dims[ax];
            start = a->start < 0 ? (a->start + dim < 0 ? 0 : a->start + dim) : (a->start > dim ? dim : a->start);
            step = a->step;
        } else {
            for (int i = 0; i < v->def_index; i++) start += n->out[i]->dims[ax];
        }
        for (int d = 0; d < x->rank; d++) memcpy(in_c[d], c[d], 24);
        snprintf(name, sizeof name, "c%d", k->tmp++);
        fc_strbuf_printf(k->s, "      i64 %s = %lldll + %s * %lldll;\n", name, (long long)start, c[ax], (long long)step);
        snprintf(in_c[ax], sizeof in_c[ax], "%s", name);
        break;
    }
    case FC_OP_IOTA: {
        int ax = (int)(a->axis < 0 ? a->axis + v->rank : a->axis);
        return bind(k, v, L, c[ax]);
    }
    case FC_OP_FULL: {
        char lit[64];
        literal(v->dtype, a->value, lit, sizeof lit);
        return bind(k, v, L, lit);
    }
    case FC_OP_CONCAT: {
        /* An if-chain: only the operand that owns the coordinate is read.
         * Values computed inside a branch are scoped to it. */
        int ax = (int)(a->axis < 0 ? a->axis + v->rank : a->axis);
        char res[24];
        snprintf(res, sizeof res, "t%d", k->tmp++);
        fc_strbuf_printf(k->s, "      %s %s;\n", compute_type(v->dtype), res);
        int64_t off = 0;
        for (int i = 0; i < n->nin; i++) {
            const fc_value *xi = n->in[i];
            int64_t len = xi->dims[ax];
            if (fc_dim_is_sym(len)) {
                fail(k, "codegen: concat along a symbolic dimension");
                return "0";
            }
            fc_strbuf_printf(k->s, "      %sif (%s < %lldll) {\n", i ? "else " : "", c[ax], (long long)(off + len));
            if (i == n->nin - 1) fc_strbuf_printf(k->s, "      /* last operand */\n");
            for (int d = 0; d < v->rank; d++) memcpy(in_c[d], c[d], 24);
            snprintf(name, sizeof name, "c%d", k->tmp++);
            fc_strbuf_printf(k->s, "      i64 %s = %s - %lldll;\n", name, c[ax], (long long)off);
            snprintf(in_c[ax], sizeof in_c[ax], "%s", name);
            linear(xi, in_c, idx, sizeof idx);
            char iv[24];
            snprintf(iv, sizeof iv, "ix%d", k->tmp++);
            fc_strbuf_printf(k->s, "      i64 %s = %s;\n", iv, idx);
            int mark = k->nmemo, cmark = k->ncm;
            note_coord_names(k, iv, xi, in_c);
            const char *e = emit_value(k, xi, iv);
            /* concat promotes: an operand of another dtype is converted and
             * rounded to the result's dtype */
            char conv[160], rconv[400];
            snprintf(conv, sizeof conv, "(%s)%s", compute_type(v->dtype), e ? e : "0");
            rounded(rconv, sizeof rconv, v->dtype, conv);
            fc_strbuf_printf(k->s, "      %s = %s;\n      }\n", res, rconv);
            k->nmemo = mark;
            k->ncm = cmark;
            off += len;
        }
        remember(k, v->id, L, res);
        return lookup(k, v->id, L);
    }
    case FC_OP_GATHER: {
        const fc_value *tab = n->in[0], *ix = n->in[1];
        int ax = (int)(a->axis < 0 ? a->axis + tab->rank : a->axis);
        char ic[FC_MAX_RANK][24], ilin[1200], iv[24];
        for (int d = 0; d < ix->rank; d++) memcpy(ic[d], c[ax + d], 24);
        linear(ix, ic, ilin, sizeof ilin);
        snprintf(iv, sizeof iv, "ix%d", k->tmp++);
        fc_strbuf_printf(k->s, "      i64 %s = %s;\n", iv, ilin);
        note_coord_names(k, iv, ix, ic);
        const char *e = emit_value(k, ix, iv);
        /* Out-of-range indices are clamped: a kernel cannot report them (the
         * reference interpreter rejects them). */
        snprintf(name, sizeof name, "c%d", k->tmp++);
        if (fc_dim_is_sym(tab->dims[ax])) {
            char sd[SZ];
            dimx(tab->dims[ax], sd, sizeof sd);
            fc_strbuf_printf(k->s, "      i64 %s = (i64)%s; %s = %s < 0 ? %s + %s : %s; %s = fc_sat(%s, 0ll, %s - 1);\n", name,
                e ? e : "0", name, name, name, sd, name, name, name, sd);
        } else {
            fc_strbuf_printf(k->s, "      i64 %s = (i64)%s; %s = %s < 0 ? %s + %lldll : %s; %s = fc_sat(%s, 0ll, %lldll);\n", name,
                e ? e : "0", name, name, name, (long long)tab->dims[ax], name, name, name, (long long)tab->dims[ax] - 1);
        }
        for (int d = 0; d < ax; d++) memcpy(in_c[d], c[d], 24);
        snprintf(in_c[ax], sizeof in_c[ax], "%s", name);
        for (int d = ax + 1; d < tab->rank; d++) memcpy(in_c[d], c[d - 1 + ix->rank], 24);
        x = tab;
        break;
    }
    default: FC_UNREACHABLE("not a view");
    }
    linear(x, in_c, idx, sizeof idx);
    snprintf(name, sizeof name, "ix%d", k->tmp++);
    fc_strbuf_printf(k->s, "      i64 %s = %s;\n", name, idx);
    note_coord_names(k, name, x, in_c);
    return emit_value(k, x, name);
}

static const char *emit_value(kctx *k, const fc_value *v, const char *L) {
    if (k->err || k->oom) return "0";
    /* A value computed once per row is a per-row variable. */
    if (k->reduce && v->id >= 0 && k->is_row[v->id]) {
        const char *e = lookup(k, v->id, "row");
        if (e) return e;
        fail(k, "codegen: a per-row value is read before its reduction");
        return "0";
    }
    const char *e = lookup(k, v->id, L);
    if (e) return e;
    int pos;
    if (is_input(k, v, &pos)) {
        char ld[128];
        if (k->frame) snprintf(ld, sizeof ld, "fc_ld(fc_nc(a%d + (%s)))", pos, L);
        else snprintf(ld, sizeof ld, "fc_ld(a%d[%s])", pos, L);
        return bind_load(k, v, L, ld);
    }
    const fc_node *n = v->def;
    FC_ASSERT(n);
    if (fc_op_is_reduce(n->op)) {
        fail(k, "codegen: a reduction result is read at an element index");
        return "0";
    }
    if (fc_op_is_view(n->op)) return emit_view(k, n, v, L);
    return emit_elementwise(k, n, L);
}

/* ---- group membership ------------------------------------------------------ */

static bool in_group(const kctx *k, const fc_node *n) {
    int og = k->p->group_of_node[n->id];
    return og == k->gr->id;
}

/* Row shape for the CUDA kernels: as many elements as rows (a per-row
 * value is indexed by the row), no more dims than the space. */
static bool row_numel(const fc_group *gr, const fc_value *v) {
    fc_mono rows = fc_group_rows_mono(gr), ne = fc_mono_of(v->dims, v->rank);
    return fc_mono_eq(&ne, &rows) && v->rank <= gr->rank;
}

/* Mark values computed once per row (fc_group_mark_rows). */
static void mark_rows(kctx *k) {
    const fc_group *gr = k->gr;
    fc_group_mark_rows(k->p, gr, k->is_row, row_numel);
    /* A stored value of per-row shape that does not depend on the
     * reductions is computed and stored once per row too. */
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (!k->is_row[v->id] && !full_shape(gr, v) && row_numel(gr, v)) k->is_row[v->id] = true;
    }
}

/* ---- kernels ----------------------------------------------------------------- */

/* Dynamic plans: `, i64 s0, ..., i64 s{n-1}` after the pointers. */
static void sym_params(kctx *k, bool comma) {
    if (!k->dyn) return;
    for (int i = 0; i < k->nsyms; i++) fc_strbuf_printf(k->s, "%si64 s%d", comma || i ? ", " : "", i);
}

static void sym_args(kctx *k, const char *prefix) {
    if (!k->dyn) return;
    for (int i = 0; i < k->nsyms; i++) fc_strbuf_printf(k->s, "%ss%d, ", prefix, i);
}

/* The argument list of a group's kernel (or body function). */
static void kernel_params(kctx *k) {
    const fc_group *gr = k->gr;
    for (int i = 0; i < gr->ninputs; i++)
        fc_strbuf_printf(k->s, "%sconst %s *__restrict__ a%d", i ? ", " : "", fc_cuda_storage_type(gr->inputs[i]->dtype), i);
    for (int i = 0; i < gr->noutputs; i++)
        fc_strbuf_printf(k->s, "%s%s *__restrict__ o%d", i || gr->ninputs ? ", " : "", fc_cuda_storage_type(gr->outputs[i]->dtype), i);
    sym_params(k, gr->ninputs + gr->noutputs > 0);
}

static void kernel_signature(kctx *k, fc_launch *l, unsigned block) {
    fc_cuda_kernel_open(k->s, l, block, 0);
    kernel_params(k);
    fc_strbuf_printf(k->s, ") {\n");
    /* The prelude's: the kernel after it may launch at once. Measured on
     * the H200 (docs/PERF.md, session 11): the skinny GEMMs after the
     * layernorms and the attention start early and fetch their weights;
     * making these kernels wait (programmatic dependents themselves) gained
     * nothing more, so they do not. */
    if (!k->dyn) fc_strbuf_printf(k->s, "  fc_dependents_may_launch();\n");
}

/* Vector width: 16 bytes of the widest full-shape input or output, when
 * `len` (the contiguous run) is a multiple of it. */
static int vector_width(const kctx *k, int64_t len) {
    const fc_group *gr = k->gr;
    size_t widest = 1;
    for (int i = 0; i < gr->ninputs; i++)
        if (gr->inputs[i]->rank == gr->rank && !memcmp(gr->inputs[i]->dims, gr->space, sizeof(int64_t) * (size_t)gr->rank))
            if (fc_dtype_size(gr->inputs[i]->dtype) > widest) widest = fc_dtype_size(gr->inputs[i]->dtype);
    for (int i = 0; i < gr->noutputs; i++)
        if (fc_dtype_size(gr->outputs[i]->dtype) > widest) widest = fc_dtype_size(gr->outputs[i]->dtype);
    int vec = (int)(16 / widest);
    if (vec > 8) vec = 8;
    while (vec > 1 && len % vec) vec /= 2;
    return vec;
}

static bool full_shape(const fc_group *gr, const fc_value *v) {
    if (v->rank != gr->rank) return false;
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] != gr->space[d]) return false;
    return true;
}

/* Emit the VEC elements starting at linear index `base` of the space: each
 * element's index variable, memo entries for vector-loaded inputs `vin`
 * (names of fc_vec variables, NULL when not vector-loaded), and a callback
 * for what to do with each element. */
typedef void (*elem_fn)(kctx *k, int e, const char *L, void *arg);

/* A trailing reduction's element L = row * len + j0 + e: coordinate d of
 * the group's space is, for an outer (kept) dim, one of row's (the same for
 * the whole row: the compiler computes it once a row), for a reduced dim,
 * one of j0 + e (a vector chunk never crosses the end of a row: its width
 * divides the row's length). */
static void row_element_coords(kctx *k, const char *L, int e) {
    const fc_group *gr = k->gr;
    int r0 = gr->rank;
    while (r0 > 0 && gr->reduced[r0 - 1]) r0--;
    char outer[FC_MAX_RANK][SZ], inner[FC_MAX_RANK][SZ], dim[SZ], buf[FC_MAX_RANK][CX];
    const char *c[FC_MAX_RANK];
    stride_text(gr->space, r0, outer);
    stride_text(gr->space + r0, gr->rank - r0, inner);
    for (int d = 0; d < gr->rank; d++) {
        dimx(gr->space[d], dim, sizeof dim);
        int w;
        if (d < r0 && d == 0) w = snprintf(buf[d], CX, "(row / %s)", outer[d]);
        else if (d < r0) w = snprintf(buf[d], CX, "((row / %s) %% %s)", outer[d], dim);
        else if (gr->rank - r0 == 1) w = snprintf(buf[d], CX, "(j0 + %d)", e);
        else if (d == r0) w = snprintf(buf[d], CX, "((j0 + %d) / %s)", e, inner[d - r0]);
        else w = snprintf(buf[d], CX, "(((j0 + %d) / %s) %% %s)", e, inner[d - r0], dim);
        c[d] = w < CX ? buf[d] : NULL;
    }
    note_coords(k, L, gr->rank, gr->space, c);
}

/* Element base + e of a pointwise kernel's chunk (k->chunk_coords). */
static void chunk_element_coords(kctx *k, const char *L, int e) {
    const fc_group *gr = k->gr;
    char last[48];
    const char *c[FC_MAX_RANK];
    for (int d = 0; d < gr->rank; d++) c[d] = k->chunk_c[d];
    snprintf(last, sizeof last, "(%s + %d)", k->chunk_c[gr->rank - 1], e);
    c[gr->rank - 1] = last;
    note_coords(k, L, gr->rank, gr->space, c);
}

/* Declare the coordinates of the chunk at base once (k->chunk_c), where a
 * chunk never crosses the last dim: its width divides it. */
static void chunk_base_coords(kctx *k, int vec) {
    const fc_group *gr = k->gr;
    k->chunk_coords = false;
    if (gr->rank < 1) return;
    fc_dim last = gr->space[gr->rank - 1];
    if (vec > 1 && (fc_dim_is_sym(last) || last % vec)) return;
    char st[FC_MAX_RANK][SZ], dim[SZ];
    stride_text(gr->space, gr->rank, st);
    for (int d = 0; d < gr->rank; d++) {
        snprintf(k->chunk_c[d], sizeof k->chunk_c[d], "cb%d", k->tmp++);
        if (d == 0) fc_strbuf_printf(k->s, "      i64 %s = base / %s;\n", k->chunk_c[d], st[0]);
        else fc_strbuf_printf(k->s, "      i64 %s = (base / %s) %% %s;\n", k->chunk_c[d], st[d], dimx(gr->space[d], dim, sizeof dim));
    }
    k->chunk_coords = true;
}

static void elements(kctx *k, const char *base, int vec, char vin[][24], elem_fn fn, void *arg) {
    const fc_group *gr = k->gr;
    for (int e = 0; e < vec; e++) {
        char L[24];
        snprintf(L, sizeof L, "L%d", k->tmp++);
        fc_strbuf_printf(k->s, "      i64 %s = %s + %d;\n", L, base, e);
        if (k->row_coords) row_element_coords(k, L, e);
        if (k->chunk_coords) chunk_element_coords(k, L, e);
        /* Suffix-broadcast inputs: their index for this element, and the
         * vector lane that holds it. */
        k->nbx = 0;
        for (int b = 0; b < k->nbv; b++) {
            int at = -1;
            for (int q = 0; q < k->nbx; q++)
                if (k->bx[q].p == k->bv[b].p) at = q;
            if (at < 0) {
                at = k->nbx++;
                snprintf(k->bx[at].L, sizeof k->bx[at].L, "%s", L);
                k->bx[at].p = k->bv[b].p;
                snprintf(k->bx[at].ix, sizeof k->bx[at].ix, "bx%d", k->tmp++);
                fc_strbuf_printf(k->s, "      i64 %s = %s + %d;\n", k->bx[at].ix, k->bv[b].off, e);
            }
            char ex[96];
            snprintf(ex, sizeof ex, "fc_ld_lane(%s, %d)", vin[k->bv[b].input], e);
            remember(k, gr->inputs[k->bv[b].input]->id, k->bx[at].ix, ex);
        }
        for (int i = 0; i < gr->ninputs; i++)
            if (vin[i][0] && full_shape(gr, gr->inputs[i])) {
                char ex[96];
                snprintf(ex, sizeof ex, "fc_ld_lane(%s, %d)", vin[i], e);
                remember(k, gr->inputs[i]->id, L, ex);
            }
        for (int i = 0; i < k->ncached; i++) {
            char ex[96];
            snprintf(ex, sizeof ex, "%s[c][%d]", k->cached_arr[i], e);
            remember(k, k->cached_vid[i], L, ex);
        }
        fn(k, e, L, arg);
    }
}

/* The load of vec elements of input i from element `at` on, as C text in
 * buf: a plain dereference in a parameter kernel (its `const __restrict__`
 * pointer gives ld.global.nc), fc_nc_vec in a frame kernel, whose pointers
 * are loaded from the frame (the compiler cannot see they are read-only
 * for the kernel's life: 20% slower permutes on the H200 without it). */
static const char *vector_load(const kctx *k, int i, int vec, const char *at, char *buf, size_t n) {
    const char *t = fc_cuda_storage_type(k->gr->inputs[i]->dtype);
    if (k->frame) snprintf(buf, n, "fc_nc_vec<%s, %d>(a%d + %s)", t, vec, i, at);
    else snprintf(buf, n, "*(const fc_vec<%s, %d> *)(a%d + %s)", t, vec, i, at);
    return buf;
}

/* P when input i of the group is a suffix-broadcast input (a norm's
 * weight) that moves as vectors of vec: every chunk stays inside one copy
 * of it (P % vec == 0; base is a multiple of vec) and the vector is at
 * most 16 bytes (the alignment kernels assume of every pointer); else 0. */
static int64_t vector_bcast(const fc_group *gr, int i, int vec) {
    const fc_value *x = gr->inputs[i];
    int64_t p = vec > 1 && !full_shape(gr, x) ? suffix_numel(gr, x) : 0;
    return p > 0 && p % vec == 0 && (size_t)vec * fc_dtype_size(x->dtype) <= 16 ? p : 0;
}

static bool in_prologue(const kctx *k, int i) {
    for (int q = 0; q < k->nbq; q++)
        if (k->bq[q] == i) return true;
    return false;
}

/* Declare vector loads of every full-shape input at `base`; names in vin. */
static void vector_loads(kctx *k, const char *base, int vec, char vin[][24], const char *cache_fmt) {
    const fc_group *gr = k->gr;
    k->nbv = k->nbx = 0;
    for (int i = 0; i < gr->ninputs; i++) {
        vin[i][0] = 0;
        const fc_value *x = gr->inputs[i];
        const int64_t p = vector_bcast(gr, i, vec);
        if (p > 0 && k->nbv < 8) {
            char *off = k->bv[k->nbv].off;
            off[0] = 0;
            for (int b = 0; b < k->nbv; b++)
                if (k->bv[b].p == p) memcpy(off, k->bv[b].off, sizeof k->bv[b].off);
            if (!off[0]) {
                snprintf(off, 24, "bo%d", k->tmp++);
                fc_strbuf_printf(k->s, "      i64 %s = %s %% %lldll;\n", off, base, (long long)p);
            }
            k->bv[k->nbv].input = i;
            k->bv[k->nbv].p = p;
            k->nbv++;
            if (cache_fmt && in_prologue(k, i)) {
                snprintf(vin[i], 24, "q%d[c]", i);
                continue;
            }
            snprintf(vin[i], 24, "v%d", k->tmp++);
            char ld[128];
            fc_strbuf_printf(k->s, "      fc_vec<%s, %d> %s = %s;\n", fc_cuda_storage_type(x->dtype), vec, vin[i],
                             vector_load(k, i, vec, off, ld, sizeof ld));
            continue;
        }
        if (!full_shape(gr, gr->inputs[i]) || vec == 1) continue;
        if (cache_fmt) {
            snprintf(vin[i], 24, cache_fmt, i);
        } else {
            snprintf(vin[i], 24, "v%d", k->tmp++);
            char ld[128];
            fc_strbuf_printf(k->s, "      fc_vec<%s, %d> %s = %s;\n", fc_cuda_storage_type(gr->inputs[i]->dtype), vec, vin[i],
                             vector_load(k, i, vec, base, ld, sizeof ld));
        }
    }
}

typedef struct store_arg {
    char (*vout)[24]; /* vector output names, or NULL (scalar stores) */
    bool row_outputs; /* REDUCE: skip per-row outputs (stored separately) */
} store_arg;

static void store_element(kctx *k, int e, const char *L, void *arg) {
    store_arg *sa = arg;
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->reduce && k->is_row[v->id]) continue;
        if (!full_shape(gr, v)) {
            fail(k, "codegen: a stored result does not have the kernel's iteration shape");
            return;
        }
        /* bf16/f16 outputs not computed yet at this index are stored
         * unrounded (see bind); the store's conversion rounds once. */
        if ((v->dtype == FC_BF16 || v->dtype == FC_F16) && !lookup(k, v->id, L)) k->store_only_vid = v->id;
        const char *x = emit_value(k, v, L);
        k->store_only_vid = -1;
        if (sa->vout && sa->vout[o][0]) fc_strbuf_printf(k->s, "      %s.v[%d] = fc_to<%s>(%s);\n", sa->vout[o], e, fc_cuda_storage_type(v->dtype), x);
        else fc_strbuf_printf(k->s, "      o%d[%s] = fc_to<%s>(%s);\n", o, L, fc_cuda_storage_type(v->dtype), x);
    }
}

static void declare_vector_outputs(kctx *k, int vec, char vout[][24]) {
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++) {
        vout[o][0] = 0;
        if (vec == 1 || (k->reduce && k->is_row[gr->outputs[o]->id])) continue;
        snprintf(vout[o], 24, "w%d", k->tmp++);
        fc_strbuf_printf(k->s, "      fc_vec<%s, %d> %s;\n", fc_cuda_storage_type(gr->outputs[o]->dtype), vec, vout[o]);
    }
}

static void vector_stores(kctx *k, int vec, char vout[][24], const char *base) {
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++)
        if (vout[o][0])
            fc_strbuf_printf(k->s, "      *(fc_vec<%s, %d> *)(o%d + %s) = %s;\n", fc_cuda_storage_type(gr->outputs[o]->dtype), vec, o, base, vout[o]);
}

/* Threads a pointwise group needs (one per VEC elements); in a dynamic
 * plan, the static factor of that count. */
static int64_t pointwise_threads(kctx *k) {
    fc_mono n = fc_group_space_mono(k->gr);
    return n.c / vector_width(k, n.c);
}

/* A pointwise group as a device function over threads t0, t0 + stride, ...
 * A kernel of its own calls it once; a batched launch calls several. */
static fc_status pointwise_body(kctx *k, const char *name) {
    const fc_group *gr = k->gr;
    /* The vector width comes from the static factor of the element count:
     * with it the count is a multiple of VEC for every binding. */
    fc_mono n = fc_group_space_mono(gr);
    int vec = vector_width(k, n.c);
    fc_strbuf_printf(k->s, "static __device__ __forceinline__ void %s_body(", name);
    kernel_params(k);
    fc_strbuf_printf(k->s, "%si64 t0, i64 stride) {\n", gr->ninputs + gr->noutputs + (k->dyn ? k->nsyms : 0) ? ", " : "");
    if (fc_mono_is_static(&n) && n.c <= INT32_MAX) {
        /* Fewer than 2^31 elements: a 32-bit loop counter (t + stride stays
         * below 2^32: the grid covers the threads once, so stride is below
         * their count + a block) and a base that widens only at the address. */
        fc_strbuf_printf(k->s, "  for (unsigned t = (unsigned)t0; t < %lldu; t += (unsigned)stride) {\n", (long long)(n.c / vec));
        fc_strbuf_printf(k->s, "      i64 base = (i64)(t * %du);\n", vec);
    } else if (fc_mono_is_static(&n)) {
        fc_strbuf_printf(k->s, "  for (i64 t = t0; t < %lldll; t += stride) {\n", (long long)(n.c / vec));
        fc_strbuf_printf(k->s, "      i64 base = t * %d;\n", vec);
    } else {
        char ne[SZ];
        fc_strbuf_printf(k->s, "  const i64 nthreads = %s / %d;\n", fc_cuda_mono_text(&n, ne, sizeof ne), vec);
        fc_strbuf_printf(k->s, "  for (i64 t = t0; t < nthreads; t += stride) {\n");
        fc_strbuf_printf(k->s, "      i64 base = t * %d;\n", vec);
    }
    char (*vin)[24] = calloc((size_t)gr->ninputs + 1, 24);
    char (*vout)[24] = calloc((size_t)gr->noutputs + 1, 24);
    if (!vin || !vout) {
        free(vin);
        free(vout);
        return FC_ERR_NOMEM;
    }
    chunk_base_coords(k, vec);
    vector_loads(k, "base", vec, vin, NULL);
    declare_vector_outputs(k, vec, vout);
    store_arg sa = {vec > 1 ? vout : NULL, false};
    elements(k, "base", vec, vin, store_element, &sa);
    k->chunk_coords = false;
    vector_stores(k, vec, vout, "base");
    fc_strbuf_printf(k->s, "  }\n}\n\n");
    free(vin);
    free(vout);
    return FC_OK;
}

#define PW_BLOCK 256u

static fc_status pointwise_kernel(kctx *k, fc_launch *l) {
    fc_status st = pointwise_body(k, l->name);
    if (st) return st;
    int64_t grid = (pointwise_threads(k) + PW_BLOCK - 1) / PW_BLOCK;
    if (grid > (1 << 30)) grid = 1 << 30;
    if (grid < 1) grid = 1;
    kernel_signature(k, l, PW_BLOCK);
    fc_strbuf_printf(k->s, "  %s_body(", l->name);
    for (int i = 0; i < k->gr->ninputs; i++) fc_strbuf_printf(k->s, "a%d, ", i);
    for (int i = 0; i < k->gr->noutputs; i++) fc_strbuf_printf(k->s, "o%d, ", i);
    sym_args(k, "");
    fc_strbuf_printf(k->s, "(i64)blockIdx.x * %u + threadIdx.x, (i64)gridDim.x * %u);\n}\n\n", PW_BLOCK, PW_BLOCK);
    l->grid[0] = (unsigned)grid;
    l->grid[1] = l->grid[2] = 1;
    fc_mono n = fc_group_space_mono(k->gr);
    l->grid_work[0] = n;
    l->grid_per[0] = (int64_t)vector_width(k, n.c) * PW_BLOCK;
    l->grid_max[0] = 1 << 30;
    return FC_OK;
}

/* REDUCE kernels. */

/* Worth keeping in registers rather than recomputing (a cast or an add of
 * a register-held input is not). */
static bool costly(fc_op op) {
    return fc_op_cost_of(op) >= FC_COST_MID; /* ops.def, column `cost` */
}

/* If a per-row value divides anything in the group, compute its reciprocal
 * once per row (memo key "rcp"). */
static void row_reciprocal(kctx *k, const fc_value *v, const char *name) {
    if (!fc_dtype_is_float(v->dtype)) return;
    for (int i = 0; i < k->gr->nnodes; i++) {
        const fc_node *n = k->gr->nodes[i];
        if (n->op == FC_OP_DIV && n->in[1] == v && fc_dtype_is_float(n->out[0]->dtype)) {
            char rn[24];
            snprintf(rn, sizeof rn, "rcp%d", k->tmp++);
            fc_strbuf_printf(k->s, "    %s %s = (%s)1 / %s;\n", compute_type(v->dtype), rn, compute_type(v->dtype), name);
            remember(k, v->id, "rcp", rn);
            return;
        }
    }
}

typedef struct phase_arg {
    const fc_node *r; /* the reduction of this phase */
    const char *acc;
    const char *store; /* register array that keeps the reduced input, or NULL */
} phase_arg;

static void accumulate(kctx *k, int e, const char *L, void *arg) {
    phase_arg *pa = arg;
    const char *x = emit_value(k, pa->r->in[0], L);
    if (pa->store) fc_strbuf_printf(k->s, "      %s[c][%d] = %s;\n", pa->store, e, x);
    const char *ct = compute_type(pa->r->out[0]->dtype == FC_BOOL ? FC_I64 : pa->r->in[0]->dtype);
    switch (pa->r->op) {
    case FC_OP_REDUCE_MAX: fc_strbuf_printf(k->s, "      %s = fc_max(%s, (%s)%s);\n", pa->acc, pa->acc, ct, x); break;
    case FC_OP_REDUCE_MIN: fc_strbuf_printf(k->s, "      %s = fc_min(%s, (%s)%s);\n", pa->acc, pa->acc, ct, x); break;
    default: fc_strbuf_printf(k->s, "      %s += (%s)%s;\n", pa->acc, ct, x); break;
    }
}

/* The row loop of a REDUCE kernel (reduce_kernel) at one vector width:
 * rl->loop_open opens the element loop for rl->vec. Emitted once, or
 * twice for a symbolic row length (a vector path and a scalar one). */
typedef struct row_loop {
    int tpr, rpb, vec;
    int64_t kv, len;
    bool cache, sym_len;
    const char *rows_s, *len_s, *loop_open;
} row_loop;

static fc_status reduce_rows(kctx *k, const row_loop *rl) {
    const fc_group *gr = k->gr;
    const int tpr = rl->tpr, rpb = rl->rpb, vec = rl->vec;
    const int64_t kv = rl->kv, len = rl->len;
    const bool cache = rl->cache, sym_len = rl->sym_len;
    const char *rows_s = rl->rows_s, *len_s = rl->len_s, *loop_open = rl->loop_open;
    fc_strbuf_printf(k->s, "  for (i64 row = (i64)blockIdx.x * %d + threadIdx.x / %d; row < %s; row += (i64)gridDim.x * %d) {\n", rpb, tpr,
        rows_s, rpb);
    char (*vin)[24] = calloc((size_t)gr->ninputs + 1, 24);
    char (*vout)[24] = calloc((size_t)gr->noutputs + 1, 24);
    if (!vin || !vout) {
        free(vin);
        free(vout);
        return FC_ERR_NOMEM;
    }
    if (cache) {
        /* Prologue: the row's full-shape inputs into registers, once. */
        for (int i = 0; i < gr->ninputs; i++) {
            const bool bq = in_prologue(k, i);
            if (!full_shape(gr, gr->inputs[i]) && !bq) continue;
            const char *st = fc_cuda_storage_type(gr->inputs[i]->dtype);
            fc_strbuf_printf(k->s, "    fc_vec<%s, %d> %c%d[%lld];\n", st, vec, bq ? 'q' : 'r', i, (long long)kv);
        }
        fc_strbuf_printf(k->s, "%s", loop_open);
        for (int i = 0; i < gr->ninputs; i++) {
            char ld[128], at[64];
            if (full_shape(gr, gr->inputs[i])) {
                fc_strbuf_printf(k->s, "      r%d[c] = %s;\n", i, vector_load(k, i, vec, "base", ld, sizeof ld));
            } else if (in_prologue(k, i)) {
                snprintf(at, sizeof at, "base %% %lldll", (long long)vector_bcast(gr, i, vec));
                fc_strbuf_printf(k->s, "      q%d[c] = %s;\n", i, vector_load(k, i, vec, at, ld, sizeof ld));
            }
        }
        fc_strbuf_printf(k->s, "    }}\n");
    }
    /* One phase per reduction, in order. */
    for (int i = 0; i < gr->nnodes; i++) {
        const fc_node *r = gr->nodes[i];
        if (!fc_op_is_reduce(r->op)) continue;
        fc_dtype acc_dt = r->in[0]->dtype == FC_BOOL ? FC_I64 : r->in[0]->dtype;
        const char *ct = compute_type(acc_dt);
        char acc[24], init[64];
        snprintf(acc, sizeof acc, "acc%d", k->tmp++);
        if (r->op == FC_OP_REDUCE_MAX)
            snprintf(init, sizeof init, fc_dtype_is_float(acc_dt) ? "-INFINITY" : "(i64)0x8000000000000000ull");
        else if (r->op == FC_OP_REDUCE_MIN)
            snprintf(init, sizeof init, fc_dtype_is_float(acc_dt) ? "INFINITY" : "(i64)0x7fffffffffffffffll");
        else snprintf(init, sizeof init, "0");
        fc_strbuf_printf(k->s, "    %s %s = %s;\n", ct, acc, init);
        /* Persistent rows: keep the reduced value's input (softmax's exp) in
         * registers when later phases read it too, so it is computed once. */
        char store[16] = "";
        const fc_value *x = r->in[0];
        if (cache && x->def && in_group(k, x->def) && costly(x->def->op) && k->ncached < 8 && kv * vec <= 64 &&
            !is_input(k, x, NULL)) {
            bool later_use = false;
            for (int j = 0; j < gr->nnodes; j++)
                for (int q = 0; q < gr->nodes[j]->nin; q++)
                    if (gr->nodes[j]->in[q] == x && gr->nodes[j] != r) later_use = true;
            if (later_use) {
                snprintf(store, sizeof store, "s%d", k->tmp++);
                fc_strbuf_printf(k->s, "    %s %s[%lld][%d];\n", compute_type(x->dtype), store, (long long)kv, vec);
            }
        }
        fc_strbuf_printf(k->s, "%s", loop_open);
        int mark = k->nmemo, cmark = k->ncm;
        vector_loads(k, "base", vec, vin, cache ? "r%d[c]" : NULL);
        phase_arg pa = {r, acc, store[0] ? store : NULL};
        elements(k, "base", vec, vin, accumulate, &pa);
        k->nmemo = mark;
        k->ncm = cmark;
        fc_strbuf_printf(k->s, "    }}\n");
        if (store[0]) {
            k->cached_vid[k->ncached] = x->id;
            snprintf(k->cached_arr[k->ncached], sizeof k->cached_arr[0], "%s", store);
            k->ncached++;
        }
        const char *opname = r->op == FC_OP_REDUCE_MAX ? "fc_op_max" : r->op == FC_OP_REDUCE_MIN ? "fc_op_min" : "fc_op_sum";
        const char *smem = acc_dt == FC_F64 ? "smem_d" : fc_dtype_is_float(acc_dt) ? "smem_f" : "smem_i";
        if (tpr > 32) fc_strbuf_printf(k->s, "    %s = fc_allreduce(%s, %d, %s, %s());\n", acc, acc, tpr, smem, opname);
        else if (tpr > 1) fc_strbuf_printf(k->s, "    %s = fc_allreduce(%s, %d, (%s *)0, %s());\n", acc, acc, tpr, ct, opname);
        char val[256];
        if (r->op == FC_OP_REDUCE_MEAN && sym_len) snprintf(val, sizeof val, "(%s / (%s)%s)", acc, ct, len_s);
        else if (r->op == FC_OP_REDUCE_MEAN) snprintf(val, sizeof val, "(%s / (%s)%lld)", acc, ct, (long long)len);
        else snprintf(val, sizeof val, "%s", acc);
        char rv[600];
        rounded(rv, sizeof rv, r->out[0]->dtype, val);
        char name[24];
        snprintf(name, sizeof name, "red%d", k->tmp++);
        fc_strbuf_printf(k->s, "    %s %s = %s;\n", compute_type(r->out[0]->dtype), name, rv);
        remember(k, r->out[0]->id, "row", name);
        row_reciprocal(k, r->out[0], name);
        k->row_ready[r->out[0]->id] = true;
        /* Per-row values that are now computable. */
        for (int j = 0; j < gr->nnodes; j++) {
            const fc_node *m = gr->nodes[j];
            if (fc_op_is_reduce(m->op) || m->nout != 1 || !k->is_row[m->out[0]->id] || k->row_ready[m->out[0]->id]) continue;
            bool ready = true;
            for (int q = 0; q < m->nin; q++)
                if (!m->in[q]->weak && k->is_row[m->in[q]->id] && !k->row_ready[m->in[q]->id]) ready = false;
            if (!ready) continue;
            /* evaluate at the row index with the row-level operands resolved */
            k->is_row[m->out[0]->id] = false;
            const char *e = emit_value(k, m->out[0], "row");
            k->is_row[m->out[0]->id] = true;
            remember(k, m->out[0]->id, "row", e);
            row_reciprocal(k, m->out[0], e);
            k->row_ready[m->out[0]->id] = true;
        }
    }
    /* Final phase: full-shape outputs per element, per-row outputs once. */
    bool any_full = false;
    for (int o = 0; o < gr->noutputs; o++)
        if (!k->is_row[gr->outputs[o]->id]) any_full = true;
    if (any_full) {
        fc_strbuf_printf(k->s, "%s", loop_open);
        int mark = k->nmemo, cmark = k->ncm;
        vector_loads(k, "base", vec, vin, cache ? "r%d[c]" : NULL);
        declare_vector_outputs(k, vec, vout);
        store_arg sa = {vec > 1 ? vout : NULL, true};
        elements(k, "base", vec, vin, store_element, &sa);
        vector_stores(k, vec, vout, "base");
        k->nmemo = mark;
        k->ncm = cmark;
        fc_strbuf_printf(k->s, "    }}\n");
    }
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (!k->is_row[v->id]) continue;
        const char *e = lookup(k, v->id, "row");
        fc_strbuf_printf(k->s, "    if (tid == 0) o%d[row] = fc_to<%s>(%s);\n", o, fc_cuda_storage_type(v->dtype), e ? e : "0");
    }
    fc_strbuf_printf(k->s, "  }\n");
    free(vin);
    free(vout);
    return FC_OK;
}

/* The element loop over a contiguous row of len_s elements, chunks of vec
 * from j0 (a trailing reduction without its row in registers). */
static void trailing_loop_open(char *buf, size_t n, int tpr, int vec, const char *len_s) {
    snprintf(buf, n, "    for (i64 j0 = (i64)tid * %d; j0 < %s; j0 += %d) {\n      {\n      i64 base = row * %s + j0;\n", vec,
             len_s, tpr * vec, len_s);
}

/* Whether every input of gr has its iteration shape (no broadcast one). */
static bool all_full_inputs(const fc_group *gr) {
    for (int i = 0; i < gr->ninputs; i++)
        if (!full_shape(gr, gr->inputs[i])) return false;
    return true;
}

static fc_status reduce_kernel(kctx *k, fc_launch *l) {
    const fc_group *gr = k->gr;
    /* Trailing reduction: the reduced dims are a suffix, rows are contiguous. */
    bool trailing = true;
    bool seen_reduced = false;
    for (int d = 0; d < gr->rank; d++) {
        if (gr->reduced[d]) seen_reduced = true;
        else if (seen_reduced) trailing = false;
    }
    /* Dynamic plans: rows and the row length are monomials; the vector
     * width comes from the row length's static factor (so it divides every
     * binding), and a symbolic row length takes a looped schedule sized by
     * that static factor (valid for any length >= 1). */
    fc_mono mrows = fc_group_rows_mono(gr), mlen = fc_group_row_len_mono(gr);
    bool sym_len = !fc_mono_is_static(&mlen);
    char rows_s[SZ], len_s[SZ];
    fc_cuda_mono_text(&mrows, rows_s, sizeof rows_s);
    fc_cuda_mono_text(&mlen, len_s, sizeof len_s);
    int64_t len = mlen.c;
    int vec = trailing ? vector_width(k, len) : 1;
    int64_t nvec = len / vec;
    int tpr, rpb;
    if (!trailing) {
        tpr = 1;
        rpb = 256;
    } else if (sym_len) {
        if (nvec >= 512) {
            tpr = 256;
            rpb = 1;
        } else {
            tpr = 32;
            rpb = 8;
        }
    } else if (nvec <= 128) {
        tpr = 32;
        rpb = 8;
    } else {
        tpr = 64;
        while (tpr < 1024 && tpr * 4 < nvec) tpr *= 2;
        rpb = 1;
    }
    k->tpr = tpr;
    int64_t kv = (nvec + tpr - 1) / tpr; /* vectors per thread */
    /* Persistent: keep full-shape inputs in registers when they fit. */
    size_t cache_bytes = 0;
    for (int i = 0; i < gr->ninputs; i++)
        if (full_shape(gr, gr->inputs[i])) cache_bytes += (size_t)kv * (size_t)vec * fc_dtype_size(gr->inputs[i]->dtype);
    bool cache = trailing && !sym_len && vec > 1 && kv <= 8 && cache_bytes <= 512;
    /* And, in what is left of those 512 bytes, the suffix-broadcast inputs
     * (a norm's weight and bias), so that their loads overlap the row's
     * instead of following the reductions: the GPT-2 block's layernorms
     * read theirs after two all-reduces, an L2 round trip the GPU waited
     * for. Only where the blocks fit in one wave (or the rows are
     * symbolic): with more, other blocks hide that latency, and the
     * registers cost more than it saves (rmsnorm, 32768 rows of 4096: 0.5-0.9%
     * slower; docs/CODEGEN.md). */
    k->nbq = 0;
    const bool one_wave = !fc_mono_is_static(&mrows) || (mrows.c + rpb - 1) / rpb <= fc_cuda_plan_sms(k->p);
    /* FUSEC_NORM_PRELOAD=0: never, as before session 10 (measuring). */
    const bool preload = one_wave && !fc_env_is_zero("FUSEC_NORM_PRELOAD");
    for (int i = 0; cache && preload && i < gr->ninputs && k->nbq < 8; i++) {
        const size_t b = (size_t)kv * (size_t)vec * fc_dtype_size(gr->inputs[i]->dtype);
        if (vector_bcast(gr, i, vec) > 0 && cache_bytes + b <= 512) {
            k->bq[k->nbq++] = i;
            cache_bytes += b;
        }
    }
    unsigned block = (unsigned)(tpr * rpb);
    kernel_signature(k, l, block);
    mark_rows(k);
    k->row_coords = trailing;

    /* The element loop over a row; chunk c covers elements [j0, j0 + vec). */
    char loop_open[4096]; /* rank 8: 8 terms of at most ~4 size expressions */
    if (cache)
        snprintf(loop_open, sizeof loop_open,
                 "    _Pragma(\"unroll\") for (int c = 0; c < %lld; c++) {\n      i64 j0 = ((i64)c * %d + tid) * %d;\n"
                 "      if (j0 < %lldll) {\n      i64 base = row * %lldll + j0;\n",
                 (long long)kv, tpr, vec, (long long)len, (long long)len);
    else if (trailing)
        trailing_loop_open(loop_open, sizeof loop_open, tpr, vec, len_s);
    else {
        /* Column reduction: one thread per row (kept index); the full index
         * is composed from the kept and reduced coordinates. */
        char st[FC_MAX_RANK][SZ];
        stride_text(gr->space, gr->rank, st);
        /* base = sum over dims of (coordinate * stride); the coordinates of
         * kept dims come from `row`, those of reduced dims from `j0`. */
        size_t pos = (size_t)snprintf(loop_open, sizeof loop_open,
                                      "    for (i64 j0 = 0; j0 < %s; j0++) {\n      {\n      i64 base = 0", len_s);
        fc_mono krem = fc_mono_one(), rrem = fc_mono_one();
        for (int d = gr->rank - 1; d >= 0 && pos < sizeof loop_open; d--) {
            fc_mono *rem = gr->reduced[d] ? &rrem : &krem;
            char rs[SZ], ds[SZ];
            pos += (size_t)snprintf(loop_open + pos, sizeof loop_open - pos, " + ((%s / %s) %% %s) * %s",
                                    gr->reduced[d] ? "j0" : "row", fc_cuda_mono_text(rem, rs, sizeof rs), dimx(gr->space[d], ds, sizeof ds),
                                    st[d]);
            fc_mono_mul_dim(rem, gr->space[d]);
        }
        if (pos < sizeof loop_open) snprintf(loop_open + pos, sizeof loop_open - pos, ";\n");
        fc_strbuf_printf(k->s, "  /* column reduction: rows are the kept coordinates */\n");
    }

    if (tpr > 32) fc_strbuf_printf(k->s, "  __shared__ double smem_d[32]; __shared__ float smem_f[32]; __shared__ i64 smem_i[32];\n");
    fc_strbuf_printf(k->s, "  const int tid = threadIdx.x %% %d;\n", tpr);
    row_loop rl = {tpr, rpb, vec, kv, len, cache, sym_len, rows_s, len_s, loop_open};
    /* A symbolic row length gives vec 1 (no static factor to divide), so
     * every load is one element. When the length is a multiple of the
     * width the dtypes allow, long enough to give each of a row's threads
     * a vector (shorter rows ran 1% slower as vectors: T = 64 of the GPT-2
     * variant's softmax, docs/PERF.md "Session 14") and the buffers are
     * 16-byte aligned (checked at run time), the rows go as vectors
     * instead: the row loop twice, chosen per launch. Only where every
     * input has the kernel's shape (a broadcast input's period is
     * symbolic). FUSEC_REDUCE_VEC=0 (read at codegen): the scalar loop
     * alone, for measuring. */
    const int wide = sym_len && trailing && !cache && all_full_inputs(gr) && !fc_env_is_zero("FUSEC_REDUCE_VEC")
                         ? vector_width(k, 16)
                         : 1;
    fc_status st;
    if (wide > 1) {
        fc_strbuf_printf(k->s, "  if ((%s) %% %d == 0 && (%s) >= %d && ((0ull", len_s, wide, len_s, tpr * wide);
        for (int i = 0; i < gr->ninputs; i++) fc_strbuf_printf(k->s, " | (unsigned long long)a%d", i);
        for (int o = 0; o < gr->noutputs; o++)
            if (!k->is_row[gr->outputs[o]->id]) fc_strbuf_printf(k->s, " | (unsigned long long)o%d", o);
        fc_strbuf_printf(k->s, ") & 15) == 0) {\n");
        char open_wide[4096];
        trailing_loop_open(open_wide, sizeof open_wide, tpr, wide, len_s);
        row_loop rw = rl;
        rw.vec = wide;
        rw.loop_open = open_wide;
        /* Both loops start from the same state: row values not made yet. */
        const size_t nv = (size_t)k->p->g->next_value_id + 1;
        bool *ready = malloc(nv);
        if (!ready) return FC_ERR_NOMEM;
        memcpy(ready, k->row_ready, nv);
        const int mark = k->nmemo, cmark = k->ncm;
        st = reduce_rows(k, &rw);
        fc_strbuf_printf(k->s, "  } else {\n");
        memcpy(k->row_ready, ready, nv);
        free(ready);
        k->nmemo = mark;
        k->ncm = cmark;
        if (st == FC_OK) st = reduce_rows(k, &rl);
        fc_strbuf_printf(k->s, "  }\n");
    } else {
        st = reduce_rows(k, &rl);
    }
    if (st != FC_OK) return st;
    fc_strbuf_printf(k->s, "}\n\n");
    int64_t grid = (mrows.c + rpb - 1) / rpb;
    if (grid > (1 << 30)) grid = 1 << 30;
    if (grid < 1) grid = 1;
    l->grid[0] = (unsigned)grid;
    l->grid[1] = l->grid[2] = 1;
    l->grid_work[0] = mrows;
    l->grid_per[0] = rpb;
    l->grid_max[0] = 1 << 30;
    return FC_OK;
}

static void summarize(const fc_group *gr, char *out, size_t n) {
    size_t pos = (size_t)snprintf(out, n, "%s:", gr->kind == FC_GROUP_REDUCE      ? "reduce"
                                                 : gr->kind == FC_GROUP_LIBRARY   ? "library"
                                                 : gr->kind == FC_GROUP_ATTENTION ? "attention"
                                                                                  : "pointwise");
    for (int i = 0; i < gr->nnodes && pos + 16 < n; i++)
        pos += (size_t)snprintf(out + pos, n - pos, "%s%s", i ? "," : " ", fc_op_table[gr->nodes[i]->op].name);
}

/* Independent small pointwise groups [first, last] of one batch: each body
 * is a device function; one kernel gives each group its own range of
 * blocks. The launch's arguments are the groups' arguments in order. */
static fc_status batched_launch(const fc_plan *plan, int first, int last, fc_strbuf *s, fc_launch *l) {
    fc_graph *g = plan->g;
    l->kind = FC_LAUNCH_KERNEL;
    l->group = plan->groups[first]->id;
    snprintf(l->name, sizeof l->name, "fc_%s_b%d", g->name, first);
    size_t pos = (size_t)snprintf(l->summary, sizeof l->summary, "batch of %d:", last - first + 1);
    int nargs = 0;
    for (int i = first; i <= last; i++) nargs += plan->groups[i]->ninputs + plan->groups[i]->noutputs;
    l->args = calloc((size_t)nargs + 1, sizeof(int));
    int64_t *blocks = calloc((size_t)(last - first + 1), sizeof(int64_t));
    if (!l->args || !blocks) {
        free(blocks);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    }
    fc_status st = FC_OK;
    for (int i = first; i <= last && !st; i++) {
        const fc_group *gr = plan->groups[i];
        for (int q = 0; q < gr->nnodes && pos + 16 < sizeof l->summary; q++)
            pos += (size_t)snprintf(l->summary + pos, sizeof l->summary - pos, "%s%s", q ? "," : " ", fc_op_table[gr->nodes[q]->op].name);
        if (pos + 2 < sizeof l->summary && i < last) pos += (size_t)snprintf(l->summary + pos, sizeof l->summary - pos, ";");
        kctx k = {.p = plan, .gr = gr, .s = s, .dyn = plan->dynamic, .nsyms = g->nsyms, .frame = l->frame, .store_only_vid = -1};
        char name[80];
        snprintf(name, sizeof name, "%s_%d", l->name, i - first);
        fc_strbuf_printf(s, "// group %d (batched)\n", gr->id);
        st = pointwise_body(&k, name);
        blocks[i - first] = (pointwise_threads(&k) + PW_BLOCK - 1) / PW_BLOCK;
        if (blocks[i - first] < 1) blocks[i - first] = 1;
        if (!st && k.err) st = fc_set_error(g->ctx, k.err, "%s (group %d)", k.errmsg, gr->id);
        free(k.memo);
        free(k.cm);
    }
    if (st) {
        free(blocks);
        return st;
    }
    /* The kernel: all arguments, prefixed by group. */
    fc_cuda_kernel_open(s, l, PW_BLOCK, 0);
    int a = 0;
    for (int i = first; i <= last; i++) {
        const fc_group *gr = plan->groups[i];
        for (int q = 0; q < gr->ninputs; q++, a++) {
            fc_strbuf_printf(s, "%sconst %s *__restrict__ g%d_a%d", a ? ", " : "", fc_cuda_storage_type(gr->inputs[q]->dtype), i - first, q);
        }
        for (int q = 0; q < gr->noutputs; q++, a++)
            fc_strbuf_printf(s, "%s%s *__restrict__ g%d_o%d", a ? ", " : "", fc_cuda_storage_type(gr->outputs[q]->dtype), i - first, q);
    }
    if (plan->dynamic)
        for (int q = 0; q < g->nsyms; q++, a++) fc_strbuf_printf(s, "%si64 s%d", a ? ", " : "", q);
    fc_strbuf_printf(s, ") {\n  long long b = blockIdx.x;\n");
    /* Arguments in the kernel's order: each group's reads, then its writes. */
    int at = 0;
    int64_t start = 0;
    for (int i = first; i <= last; i++) {
        const fc_group *gr = plan->groups[i];
        for (int q = 0; q < gr->ninputs; q++) l->args[at++] = gr->inputs[q]->id;
        for (int q = 0; q < gr->noutputs; q++) l->args[at++] = gr->outputs[q]->id;
        int64_t nb = blocks[i - first];
        fc_strbuf_printf(s, "  %sif (b < %lldll) %s_%d_body(", i > first ? "else " : "", (long long)(start + nb), l->name, i - first);
        for (int q = 0; q < gr->ninputs; q++) fc_strbuf_printf(s, "g%d_a%d, ", i - first, q);
        for (int q = 0; q < gr->noutputs; q++) fc_strbuf_printf(s, "g%d_o%d, ", i - first, q);
        if (plan->dynamic)
            for (int q = 0; q < g->nsyms; q++) fc_strbuf_printf(s, "s%d, ", q);
        fc_strbuf_printf(s, "(b - %lldll) * %u + threadIdx.x, %lldll * %u);\n", (long long)start, PW_BLOCK, (long long)nb, PW_BLOCK);
        start += nb;
    }
    fc_strbuf_printf(s, "}\n\n");
    free(blocks);
    l->nargs = nargs;
    l->nreads = nargs; /* reads and writes interleave by group; the runtime
                        * only maps each value id to its pointer */
    l->grid[0] = (unsigned)start;
    l->grid[1] = l->grid[2] = 1;
    /* Batched groups have static spaces: a constant grid. */
    l->grid_work[0].c = start;
    l->grid_per[0] = 1;
    l->grid_max[0] = start;
    l->nsyms = plan->dynamic ? g->nsyms : 0;
    return FC_OK;
}

/* ---- the frame (dynamic plans of kernels only) ------------------------------ */

/* `__launch_bounds__(..)` for l's recorded block and blocks per SM. */
static const char *launch_bounds(const fc_launch *l, char *buf, size_t n) {
    if (l->min_blocks) snprintf(buf, n, "__launch_bounds__(%u, %u)", l->block[0], l->min_blocks);
    else snprintf(buf, n, "__launch_bounds__(%u)", l->block[0]);
    return buf;
}

void fc_cuda_kernel_open(fc_strbuf *s, fc_launch *l, unsigned block, unsigned min_blocks) {
    l->block[0] = block;
    l->block[1] = l->block[2] = 1;
    l->min_blocks = min_blocks;
    char b[48];
    if (l->frame) fc_strbuf_printf(s, "static __device__ __forceinline__ void %s_main(", l->name);
    else fc_strbuf_printf(s, "extern \"C\" __global__ void %s %s(", launch_bounds(l, b, sizeof b), l->name);
}

/* What every frame entry uses, once after the prelude:
 * - fc_fp turns a frame word into whatever pointer the body's parameter
 *   is, said to be global: loaded from memory it would otherwise be
 *   generic, and every access through it a generic ld/st (a kernel
 *   parameter is known global; with generic accesses the GPT-2 block's
 *   variant was 2.6% slower at T >= 256 on the H200, docs/PERF.md run 19);
 * - fc_nc and fc_nc_vec are the read-only loads (ld.global.nc) a
 *   parameter kernel gets from its `const __restrict__` pointers;
 * - fc_grid_wait waits for the kernel before (a programmatic dependent
 *   launch may start while it finishes; griddepcontrol is sm_90's). */
static const char frame_prelude[] =
    "struct fc_fp {\n  long long v;\n"
    "  template <class T> __device__ __forceinline__ operator T *() const {\n"
    "    T *p = reinterpret_cast<T *>(v);\n    __builtin_assume(__isGlobal(p));\n    return p;\n  }\n};\n"
    "template <typename T> __device__ __forceinline__ T fc_nc(const T *p) { return __ldg(p); }\n"
    "template <typename T, int N> __device__ __forceinline__ fc_vec<T, N> fc_nc_vec(const T *p) {\n"
    "  fc_vec<T, N> r;\n"
    "  if constexpr (sizeof r == 16) { uint4 u = __ldg((const uint4 *)p); memcpy(&r, &u, 16); }\n"
    "  else if constexpr (sizeof r == 8) { uint2 u = __ldg((const uint2 *)p); memcpy(&r, &u, 8); }\n"
    "  else if constexpr (sizeof r == 4) { unsigned u = __ldg((const unsigned *)p); memcpy(&r, &u, 4); }\n"
    "  else if constexpr (sizeof r == 2) { unsigned short u = __ldg((const unsigned short *)p); memcpy(&r, &u, 2); }\n"
    "  else r = *(const fc_vec<T, N> *)p;\n"
    "  return r;\n}\n"
    "static __device__ __forceinline__ void fc_grid_wait() {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n"
    "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n#endif\n}\n\n";

/* Launch l's entry point, after its body (fc_cuda_kernel_open): its words
 * of the frame are loaded first, then it waits for the kernel before, so
 * that under a programmatic launch the loads overlap that kernel's end.
 *
 * The carrier (the plan's first kernel, when the frame is carried: see
 * frame_carry) takes the frame's words by value as well, a
 * __grid_constant__ parameter the runtime sets with the launch (a graph
 * node's parameters: cuGraphExecKernelNodeSetParams), reads its own words
 * from there, and its block 0 stores them all into the frame for the
 * kernels after it. So a new shape or new pointers cost the host one
 * parameter update instead of a copy before the launch (docs/DYNAMIC.md,
 * "The carried frame"). The kernel after the carrier must then not start
 * before the carrier ends (it reads the frame before it waits): neither
 * is a programmatic dependent. */
static void frame_entry(fc_strbuf *s, fc_launch *l, int nsyms, int carried_words) {
    char b[48];
    const bool carrier = carried_words > 0;
    l->pdl = !carrier; /* it waits (fc_grid_wait) before its body */
    if (carrier) {
        fc_strbuf_printf(s,
                         "extern \"C\" __global__ void %s %s(long long *__restrict__ fc_frame, "
                         "const __grid_constant__ fc_frame_words<%d> fc_fw) {\n",
                         launch_bounds(l, b, sizeof b), l->name, carried_words);
        fc_strbuf_printf(s, "  fc_frame_store(fc_frame, fc_fw);\n");
    } else
        fc_strbuf_printf(s, "extern \"C\" __global__ void %s %s(const long long *__restrict__ fc_frame) {\n",
                         launch_bounds(l, b, sizeof b), l->name);
    const char *from = carrier ? "fc_fw.w" : "fc_frame";
    for (int a = 0; a < l->nargs; a++)
        fc_strbuf_printf(s, "  const long long w%d = %s[%d];\n", a, from, nsyms + l->args[a]);
    for (int k = 0; k < l->nsyms; k++) fc_strbuf_printf(s, "  const long long s%d = %s[%d];\n", k, from, k);
    fc_strbuf_printf(s, "  fc_grid_wait();\n  %s_main(", l->name);
    for (int a = 0; a < l->nargs; a++) fc_strbuf_printf(s, "%sfc_fp{w%d}", a ? ", " : "", a);
    for (int k = 0; k < l->nsyms; k++) fc_strbuf_printf(s, "%ss%d", l->nargs + k ? ", " : "", k);
    fc_strbuf_printf(s, ");\n}\n\n");
}

/* The frame's words as one kernel parameter (the carrier's, above), and
 * block 0's store of them into the frame. */
static const char frame_carry_prelude[] =
    "template <int N> struct fc_frame_words {\n  long long w[N];\n};\n"
    "template <int N>\n"
    "static __device__ __forceinline__ void fc_frame_store(long long *t, const fc_frame_words<N> &fw) {\n"
    "  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {\n"
    "    const int n = blockDim.x * blockDim.y * blockDim.z;\n"
    "    for (int i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); i < N; i += n) t[i] = fw.w[i];\n"
    "  }\n}\n\n";

/* The most bytes of words the carrier takes: with the frame's address,
 * within the 4 KiB of parameters every CUDA 12 driver accepts. */
#define FRAME_CARRY_MAX_WORDS 500

/* Whether a frame plan's frame of `words` words is carried by its first
 * kernel (frame_entry): it fits in the carrier's parameters, and
 * $FUSEC_FRAME_CARRY is not 0 (read here, so it is in the source and the
 * kernel-cache key; 0 copies the frame from the host before the launch, as
 * before session 13). */
static bool frame_carry(int words) {
    return words <= FRAME_CARRY_MAX_WORDS && !fc_env_is_zero("FUSEC_FRAME_CARRY");
}

/* A library group (a gemm or matmul) that a dynamic plan runs as a
 * generated kernel (codegen/cuda/gemm.c) instead of a library call: then
 * a new shape needs no library setup. */
static bool generated_gemm(const fc_plan *plan, const fc_group *gr) {
    return gr->kind == FC_GROUP_LIBRARY && plan->dynamic && fc_cuda_variant_gemm_kernels() &&
           fc_cuda_gemm_kernel_fits(gr);
}

/* Whether a dynamic plan's kernels take the frame: every launch of it is
 * a kernel (a library call takes its sizes from the host at each shape;
 * an attention group of a dynamic plan fails below), and
 * $FUSEC_VARIANT_FRAME is not 0 (read here: it is in the source, so in
 * the kernel-cache key). */
static bool frame_plan(const fc_plan *plan) {
    if (!plan->dynamic) return false;
    const char *e = getenv("FUSEC_VARIANT_FRAME");
    if (e && !strcmp(e, "0")) return false;
    for (int i = 0; i < plan->ngroups; i++) {
        const fc_group *gr = plan->groups[i];
        if (gr->batch > 0) continue;
        if (gr->kind == FC_GROUP_ATTENTION || (gr->kind == FC_GROUP_LIBRARY && !generated_gemm(plan, gr))) return false;
    }
    return true;
}

/* The frame launch of out just made: the words it carries (the frame's, if
 * it is the first kernel and the frame is carried), else 0. */
static int carrier_words(fc_cuda_src *out, bool carry) {
    if (!carry || out->frame_carried) return 0;
    out->frame_carried = true;
    return out->frame_words;
}

fc_status fc_cuda_codegen(const fc_plan *plan, fc_cuda_src *out) {
    memset(out, 0, sizeof *out);
    fc_graph *g = plan->g;
    fc_strbuf s = {0};
    fc_strbuf_printf(&s, "// generated by fusec %s for graph %s\n%s\n", FUSEC_VERSION_STRING, g->name, prelude);
    out->launches = calloc((size_t)plan->ngroups + 1, sizeof *out->launches);
    if (!out->launches) return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    fc_status st = FC_OK;
    bool gemm_templates = false; /* codegen/cuda/gemm.c's, emitted before the first GEMM kernel */
    unsigned skinny_templates = 0; /* codegen/cuda/skinny.c's, before the first skinny GEMM */
    /* Attention groups that run inside the skinny GEMM reading their result
     * (codegen/cuda/skinny.c, "attention and projection"): fused_into[i] is
     * that GEMM's group index (the attention gets no launch of its own),
     * fused_from[j] the attention's; -1 elsewhere. */
    int *fused_into = malloc(sizeof(int) * (size_t)(plan->ngroups + 1)), *fused_from = malloc(sizeof(int) * (size_t)(plan->ngroups + 1));
    fc_skinny_attention *fused = calloc((size_t)plan->ngroups + 1, sizeof *fused);
    if (!fused_into || !fused_from || !fused) {
        free(fused_into);
        free(fused_from);
        free(fused);
        fc_cuda_src_release(out);
        return fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    }
    for (int i = 0; i < plan->ngroups; i++) fused_into[i] = fused_from[i] = -1;
    for (int i = 0; i < plan->ngroups; i++) {
        fc_skinny_attention f;
        if (fc_cuda_skinny_attention_plan(plan, i, &f)) {
            fused[f.gemm_group] = f;
            fused_into[i] = f.gemm_group;
            fused_from[f.gemm_group] = i;
        }
    }
    const bool frame = frame_plan(plan);
    bool carry = false; /* whether the first kernel is to carry the frame */
    if (frame) {
        fc_strbuf_printf(&s, "%s", frame_prelude);
        out->frame_words = g->nsyms + g->next_value_id;
        carry = frame_carry(out->frame_words);
        if (carry) fc_strbuf_printf(&s, "%s", frame_carry_prelude);
    }
    if (plan->dynamic && g->nsyms > FC_DYN_MAX_SYMS)
        st = fc_set_error(g->ctx, FC_ERR_UNSUPPORTED, "codegen: graph %s has %d symbols; a dynamic program takes at most %d", g->name,
                          g->nsyms, FC_DYN_MAX_SYMS);
    for (int i = 0; i <= plan->ngroups; i++)
        for (int a = 0; a < 3; a++) {
            out->launches[i].grid_work[a] = fc_mono_one();
            out->launches[i].grid_per[a] = 1;
            out->launches[i].grid_max[a] = 1;
        }
    for (int gi = 0; gi < plan->ngroups && !st; gi++) {
        const fc_group *gr = plan->groups[gi];
        if (gr->batch > 0) {
            int end = gi;
            while (end + 1 < plan->ngroups && plan->groups[end + 1]->batch == gr->batch) end++;
            fc_launch *bl = &out->launches[out->nlaunches++];
            bl->frame = frame;
            st = batched_launch(plan, gi, end, &s, bl);
            if (!st && frame) frame_entry(&s, bl, g->nsyms, carrier_words(out, carry));
            gi = end;
            continue;
        }
        if (fused_into[gi] >= 0) continue; /* runs inside a later launch */
        fc_launch *l = &out->launches[out->nlaunches++];
        l->group = gr->id;
        summarize(gr, l->summary, sizeof l->summary);
        l->nargs = gr->ninputs + gr->noutputs;
        l->nreads = gr->ninputs;
        l->args = calloc((size_t)l->nargs + 1, sizeof(int));
        if (!l->args) {
            st = fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
            break;
        }
        for (int i = 0; i < gr->ninputs; i++) l->args[i] = gr->inputs[i]->id;
        for (int i = 0; i < gr->noutputs; i++) l->args[gr->ninputs + i] = gr->outputs[i]->id;
        if (gr->kind == FC_GROUP_LIBRARY && plan->dynamic && gr->nodes[0]->op != FC_OP_MATMUL && gr->nodes[0]->op != FC_OP_GEMM) {
            st = fc_set_error(g->ctx, FC_ERR_UNSUPPORTED,
                              "codegen: group %d (%s): %s with symbolic shapes has no library call or kernel (bind the symbols)",
                              gr->id, l->summary, fc_op_table[gr->nodes[0]->op].name);
            break;
        }
        if (generated_gemm(plan, gr)) {
            snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
            if (gr->nodes[0]->op == FC_OP_GEMM) fc_gemm_describe(gr->nodes[0], l->summary, sizeof l->summary);
            l->frame = frame;
            st = fc_cuda_emit_gemm(plan, gr, l->name, &s, &gemm_templates, l);
            if (!st && frame) frame_entry(&s, l, g->nsyms, carrier_words(out, carry));
            continue;
        }
        if (fused_from[gi] >= 0) { /* codegen/cuda/skinny.c */
            snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
            st = fc_cuda_emit_skinny_attention(plan->groups[fused_from[gi]], gr, &fused[gi], l->name, &s, &skinny_templates, l);
            if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (codegen)");
            continue;
        }
        fc_skinny sk;
        if (fc_cuda_skinny_plan(plan, gr, &sk)) { /* codegen/cuda/skinny.c */
            snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
            st = fc_cuda_emit_skinny(gr, &sk, l->name, &s, &skinny_templates, l);
            continue;
        }
        if (gr->kind == FC_GROUP_LIBRARY) {
            l->kind = FC_LAUNCH_LIBRARY;
            snprintf(l->name, sizeof l->name, "%s", fc_op_table[gr->nodes[0]->op].name);
            if (gr->nodes[0]->op == FC_OP_GEMM) fc_gemm_describe(gr->nodes[0], l->summary, sizeof l->summary);
            continue;
        }
        if (gr->kind == FC_GROUP_ATTENTION && plan->dynamic) {
            /* fc_pipeline lowers attention ops in dynamic plans; one that
             * stays (a symbolic head dim with the default scale) has no
             * kernel: the flash-attention template needs static shapes. */
            st = fc_set_error(g->ctx, FC_ERR_UNSUPPORTED,
                              "codegen: group %d (%s): attention with symbolic shapes has no dynamic kernel (bind the symbols)",
                              gr->id, l->summary);
            break;
        }
        if (gr->kind == FC_GROUP_ATTENTION) { /* codegen/cuda/attention.c */
            snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
            char *src = NULL;
            st = fc_cuda_emit_attention(plan, gr, l->name, &src, l);
            if (!st) fc_strbuf_printf(&s, "// group %d: %s\n%s", gr->id, l->summary, src);
            free(src);
            continue;
        }
        if (gr->kind == FC_GROUP_ALIAS) { /* a view of a stored buffer: nothing to run */
            l->kind = FC_LAUNCH_ALIAS;
            snprintf(l->name, sizeof l->name, "alias");
            continue;
        }
        l->kind = FC_LAUNCH_KERNEL;
        snprintf(l->name, sizeof l->name, "fc_%s_k%d", g->name, gr->id);
        l->nsyms = plan->dynamic ? g->nsyms : 0;
        l->frame = frame;
        kctx k = {.p = plan, .gr = gr, .s = &s, .reduce = gr->kind == FC_GROUP_REDUCE, .dyn = plan->dynamic, .nsyms = g->nsyms, .frame = frame,
                .store_only_vid = -1};
        k.is_row = calloc((size_t)g->next_value_id + 1, sizeof(bool));
        k.row_ready = calloc((size_t)g->next_value_id + 1, sizeof(bool));
        if (!k.is_row || !k.row_ready) st = FC_ERR_NOMEM;
        else {
            fc_strbuf_printf(&s, "// group %d: %s\n", gr->id, l->summary);
            st = gr->kind == FC_GROUP_REDUCE ? reduce_kernel(&k, l) : pointwise_kernel(&k, l);
        }
        if (!st && k.oom) st = FC_ERR_NOMEM;
        if (!st && k.err) st = fc_set_error(g->ctx, k.err, "%s (group %d: %s)", k.errmsg, gr->id, l->summary);
        if (!st && frame) frame_entry(&s, l, g->nsyms, carrier_words(out, carry));
        if (st == FC_ERR_NOMEM) fc_set_error(g->ctx, st, "out of memory (codegen)");
        free(k.memo);
        free(k.cm);
        free(k.is_row);
        free(k.row_ready);
    }
    free(fused_into);
    free(fused_from);
    free(fused);
    /* The kernel after the carrier reads the frame before it waits: it
     * starts when the carrier has ended (a plain edge), never during. */
    const int carrier = fc_cuda_src_frame_carrier(out);
    for (int i = carrier + 1; carrier >= 0 && i < out->nlaunches; i++)
        if (out->launches[i].kind == FC_LAUNCH_KERNEL) {
            out->launches[i].pdl = false;
            break;
        }
    if (!st && s.oom) st = fc_set_error(g->ctx, FC_ERR_NOMEM, "out of memory (codegen)");
    if (st) {
        free(s.buf);
        fc_cuda_src_release(out);
        return st;
    }
    out->source = s.buf;
    return FC_OK;
}

int fc_cuda_src_frame_carrier(const fc_cuda_src *s) {
    if (!s->frame_carried) return -1;
    for (int i = 0; i < s->nlaunches; i++)
        if (s->launches[i].kind == FC_LAUNCH_KERNEL) return i;
    return -1;
}

void fc_cuda_src_release(fc_cuda_src *s) {
    if (!s) return;
    for (int i = 0; i < s->nlaunches; i++) free(s->launches[i].args);
    free(s->launches);
    free(s->source);
    memset(s, 0, sizeof *s);
}

fc_status fc_cuda_launch_grid(const fc_plan *bound, const fc_launch *l, unsigned grid[3]) {
    for (int a = 0; a < 3; a++) grid[a] = l->grid[a];
    if (l->kind != FC_LAUNCH_KERNEL || l->nsyms == 0) return FC_OK;
    if (!bound || (bound->nsyms > 0 && !bound->sym_values) || bound->nsyms != l->nsyms)
        return bound && bound->g ? fc_set_error(bound->g->ctx, FC_ERR_USAGE, "launch grid: the plan is not bound from this launch's plan")
                                 : FC_ERR_USAGE;
    for (int a = 0; a < 3; a++) {
        int64_t work = fc_mono_eval(&l->grid_work[a], bound->sym_values, bound->nsyms);
        int64_t per = l->grid_per[a] > 0 ? l->grid_per[a] : 1;
        if (work < 0)
            return fc_set_error(bound->g->ctx, FC_ERR_INPUT, "launch %s: the grid overflows 64 bits", l->name);
        int64_t n = work / per + (work % per != 0);
        int64_t max = l->grid_max[a] > 0 ? l->grid_max[a] : 1;
        if (n > max) n = max;
        if (n < 1) n = 1;
        grid[a] = (unsigned)n;
    }
    return FC_OK;
}
