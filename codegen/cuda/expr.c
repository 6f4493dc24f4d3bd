/* expr.c - the value of a graph value at an element index, as CUDA C.
 *
 * Every value a kernel computes is emitted by one recursive function,
 * fc_cg_emit_value(v, L): "the value of v at linear index L of v's own
 * shape". Elementwise ops evaluate their operands at the broadcast index,
 * and views (reshape, permute, expand, slice, concat, split, gather, iota,
 * full) turn into index arithmetic on L, never into copies. Results are
 * memoized per (value, index variable) inside the current C scope, so a
 * value used twice at one index is computed once.
 *
 * Shapes are constants in the source (symbols of a dynamic plan are the
 * kernel's parameters). Arithmetic is in f32 for f32, f16 and bf16 (f64
 * stays f64, integers in 64 bits). What is rounded to its dtype depends on
 * the plan's numerics (docs/NUMERICS.md): in the default fast mode a float
 * value an op computes (a cast to a float dtype too) stays in its compute
 * type, unrounded, and only its store to memory rounds it (fc_to); the
 * constants of iota and full, and every integer or bool value, are rounded
 * where computed. In eager mode every value is rounded where computed, as
 * eager PyTorch rounds each op's result. Weak scalars are constants of
 * fc_weak_scalar_dtype in both.
 */
#include "kernel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fc_cg_compute_type(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return "double";
    case FC_F32: case FC_F16: case FC_BF16: return "float";
    case FC_BOOL: return "int";
    default: return "i64";
    }
}

bool fc_cg_unrounded(const kctx *k, const fc_value *v) {
    return k->p->numerics == FC_NUMERICS_FAST && fc_dtype_is_float(v->dtype);
}

/* Expression `e` (in compute type) rounded to dtype dt. */
void fc_cg_rounded(char *out, size_t n, fc_dtype dt, const char *e) {
    switch (dt) {
    case FC_BF16: snprintf(out, n, "fc_rnd_bf16(%s)", e); break;
    case FC_F16: snprintf(out, n, "fc_rnd_f16(%s)", e); break;
    case FC_I32: snprintf(out, n, "fc_sat(%s, -2147483648ll, 2147483647ll)", e); break;
    case FC_I8: snprintf(out, n, "fc_sat(%s, -128ll, 127ll)", e); break;
    case FC_BOOL: snprintf(out, n, "((%s) != 0)", e); break;
    default: snprintf(out, n, "%s", e); break;
    }
}

/* A dim as C text: a literal (`768ll`) or the symbol's parameter (`s0`). */
const char *fc_cg_dimx(int64_t d, char *buf, size_t n) {
    if (fc_dim_is_sym(d)) snprintf(buf, n, "s%d", fc_dim_sym_index(d));
    else snprintf(buf, n, "%lldll", (long long)d);
    return buf;
}

/* Row-major strides of dims as C text. */
void fc_cg_stride_text(const fc_dim *dims, int rank, char st[][SZ]) {
    fc_mono m = fc_mono_one();
    for (int d = rank - 1; d >= 0; d--) {
        fc_cuda_mono_text(&m, st[d], SZ);
        fc_mono_mul_dim(&m, dims[d]);
    }
}

const char *fc_cg_lookup(kctx *k, int vid, const char *idx) {
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

void fc_cg_remember(kctx *k, int vid, const char *idx, const char *expr) {
    memo *grown = room_for(k, k->memo, &k->cap_memo, k->nmemo, sizeof *k->memo, 64);
    if (!grown) return;
    k->memo = grown;
    memo *m = &k->memo[k->nmemo++];
    m->vid = vid;
    snprintf(m->idx, sizeof m->idx, "%s", idx);
    snprintf(m->expr, sizeof m->expr, "%s", expr);
}

void fc_cg_fail(kctx *k, const char *msg) {
    if (!k->err) {
        k->err = FC_ERR_UNSUPPORTED;
        snprintf(k->errmsg, sizeof k->errmsg, "%s", msg);
    }
}

bool fc_cg_is_input(const kctx *k, const fc_value *v, int *pos) {
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
void fc_cg_note_coords(kctx *k, const char *idx, int rank, const fc_dim *dims, const char *const *c) {
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
    fc_cg_note_coords(k, idx, x->rank, x->dims, c);
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
    fc_cg_stride_text(v->dims, v->rank, st);
    if (d == 0) fc_strbuf_printf(k->s, "      i64 %s = %s / %s;\n", name, L, st[0]);
    else fc_strbuf_printf(k->s, "      i64 %s = (%s / %s) %% %s;\n", name, L, st[d], fc_cg_dimx(v->dims[d], dim, sizeof dim));
}

/* x's element count when x, without leading size-1 dims, is a suffix of
 * the group's space with static dims (so the element at space index L is
 * x's element L % P); 0 otherwise. */
int64_t fc_cg_suffix_numel(const fc_group *gr, const fc_value *x) {
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
    if (k->nbx && fc_cg_full_shape(k->gr, out)) {
        int64_t p = fc_cg_suffix_numel(k->gr, x);
        for (int i = 0; i < k->nbx && p; i++)
            if (k->bx[i].p == p && !strcmp(k->bx[i].L, L)) {
                snprintf(name, n, "%s", k->bx[i].ix);
                return;
            }
    }
    char xs[FC_MAX_RANK][SZ];
    fc_cg_stride_text(x->dims, x->rank, xs);
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
    if (isnan(r)) snprintf(out, n, "(%s)NAN", fc_cg_compute_type(dt));
    else if (isinf(r)) snprintf(out, n, "(%s)(%sINFINITY)", fc_cg_compute_type(dt), r < 0 ? "-" : "");
    else if (fc_dtype_is_float(dt)) snprintf(out, n, "(%s)%.17g", fc_cg_compute_type(dt), r);
    else snprintf(out, n, "(%s)%lldll", fc_cg_compute_type(dt), (long long)r);
}

/* Emit `CT t = expr;`, remember it, return the name. The value is rounded
 * to v's dtype unless the numerics keep it unrounded (fc_cg_unrounded);
 * `always` rounds it in every mode (iota and full: constants of their
 * dtype, as a loaded input is a value of its dtype). */
static const char *bind_as(kctx *k, const fc_value *v, const char *L, const char *expr, bool always) {
    char name[24], r[1100];
    snprintf(name, sizeof name, "t%d", k->tmp++);
    if (!always && fc_cg_unrounded(k, v)) {
        fc_strbuf_printf(k->s, "      %s %s = %s;\n", fc_cg_compute_type(v->dtype), name, expr);
        fc_cg_remember(k, v->id, L, name);
        return fc_cg_lookup(k, v->id, L);
    }
    /* A value whose only use here is a store of its own dtype is left
     * unrounded: the store's conversion rounds to nearest even, exactly as
     * fc_rnd_* does, and rounding is idempotent (same bits, two instructions
     * an element fewer). It is not memoized: another use recomputes it. */
    if (v->id == k->store_only_vid) {
        fc_strbuf_printf(k->s, "      %s %s = %s;\n", fc_cg_compute_type(v->dtype), name, expr);
        snprintf(k->store_only_name, sizeof k->store_only_name, "%s", name);
        return k->store_only_name;
    }
    fc_cg_rounded(r, sizeof r, v->dtype, expr);
    fc_strbuf_printf(k->s, "      %s %s = %s;\n", fc_cg_compute_type(v->dtype), name, r);
    fc_cg_remember(k, v->id, L, name);
    return fc_cg_lookup(k, v->id, L);
}

static const char *bind(kctx *k, const fc_value *v, const char *L, const char *expr) {
    return bind_as(k, v, L, expr, false);
}

/* A loaded element: storage to compute type is exact, nothing to round. */
static const char *bind_load(kctx *k, const fc_value *v, const char *L, const char *expr) {
    char name[24];
    snprintf(name, sizeof name, "t%d", k->tmp++);
    fc_strbuf_printf(k->s, "      %s %s = %s;\n", fc_cg_compute_type(v->dtype), name, expr);
    fc_cg_remember(k, v->id, L, name);
    return fc_cg_lookup(k, v->id, L);
}

static const char *unary_fn(fc_op op, fc_dtype ct, bool eager) {
    bool dbl = ct == FC_F64;
    switch (op) {
    case FC_OP_EXP: return eager ? "fc_exp_eager" : "fc_exp";
    case FC_OP_SIGMOID: return eager ? "fc_sigmoid_eager" : "fc_sigmoid";
    case FC_OP_SILU: return eager ? "fc_silu_eager" : "fc_silu";
    case FC_OP_GELU_TANH: return eager ? "fc_gelu_tanh_eager" : "fc_gelu_tanh";
    case FC_OP_ABS: return fc_dtype_is_float(ct) ? (dbl ? "fabs" : "fabsf") : "llabs";
    case FC_OP_LOG: return dbl ? "log" : "logf";
    case FC_OP_SQRT: return dbl ? "sqrt" : "sqrtf";
    case FC_OP_SIN: return dbl ? "sin" : "sinf";
    case FC_OP_COS: return dbl ? "cos" : "cosf";
    case FC_OP_TANH: return dbl ? "tanh" : "tanhf";
    case FC_OP_ERF: return dbl ? "erf" : "erff";
    case FC_OP_RSQRT: return "fc_rsqrt";
    case FC_OP_RELU: return "fc_relu";
    case FC_OP_GELU: return "fc_gelu";
    case FC_OP_HARDSWISH: return "fc_hardswish";
    default: return NULL;
    }
}

/* Operand i of n at out index L, converted to compute type of dtype ct. */
static void operand(kctx *k, const fc_node *n, int i, const char *L, fc_dtype ct, char *out, size_t sz) {
    const fc_value *x = n->in[i];
    if (x->weak) {
        literal(fc_weak_scalar_dtype(n->op, x->dtype), x->scalar, out, sz);
        return;
    }
    char idx[24];
    broadcast_index(k, n->out[0], L, x, idx, sizeof idx);
    const char *e = fc_cg_emit_value(k, x, idx);
    snprintf(out, sz, "((%s)%s)", fc_cg_compute_type(ct), e ? e : "0");
}

/* Is operand j of the multiply n an in-group `t + 1` (of the multiply's
 * dtype, f32 or f64, or any float one whose values the numerics keep
 * unrounded; read by n alone and not stored)? Then *t is t, and h * (t + 1)
 * is emitted as fma(h, t, h): one instruction less (gelu's erf form is
 * x/2 * (1 + erf(..)), 22 of the pointwise chain's 36 instructions an
 * element are erf) and one rounding less (t + 1 is not rounded). */
static bool plus_one_operand(const kctx *k, const fc_node *n, int j, const fc_value **t) {
    const fc_value *b = n->in[j], *v = n->out[0];
    if (b->weak || !b->def || b->def->op != FC_OP_ADD || !fc_cg_in_group(k, b->def)) return false;
    bool wide = v->dtype == FC_F32 || v->dtype == FC_F64 || fc_cg_unrounded(k, v);
    if (!wide || b->dtype != v->dtype) return false;
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

/* Division of a float by a weak scalar b is a multiply by 1/b, rounded
 * to the compute type, as eager PyTorch's CUDA kernel divides by a Python
 * scalar (so eager mode matches it to the bit; one rounding more than a
 * division, at most 1.5 ulps of f32 where the division has 0.5). */
static bool weak_reciprocal(const fc_node *n, fc_dtype ct, char *out, size_t sz) {
    if (!n->in[1]->weak || !fc_dtype_is_float(ct)) return false;
    fc_dtype wt = fc_opmath_dtype(ct); /* an integer scalar of a true division too */
    double b = fc_round_to_dtype(n->in[1]->scalar, wt);
    double inv = fc_round_to_dtype(1.0 / b, wt);
    if (!isfinite(inv) || !isfinite(b)) return false; /* x / 0 and x / inf keep the division */
    snprintf(out, sz, "(%s)%.17g", fc_cg_compute_type(ct), inv);
    return true;
}

static const char *emit_elementwise(kctx *k, const fc_node *n, const char *L) {
    const fc_value *v = n->out[0];
    const fc_value *t1 = NULL;
    int pj = -1;
    /* Eager numerics multiply and add as eager PyTorch does (its gelu is
     * x/2 * (1 + erf(..)) with the add rounded): no fma there. */
    if (n->op == FC_OP_MUL && k->p->numerics != FC_NUMERICS_EAGER) pj = plus_one_operand(k, n, 1, &t1) ? 1 : plus_one_operand(k, n, 0, &t1) ? 0 : -1;
    if (pj >= 0) {
        char h[300], idx[24], e[1024];
        operand(k, n, 1 - pj, L, v->dtype, h, sizeof h);
        broadcast_index(k, v, L, n->in[pj], idx, sizeof idx);
        const char *te = fc_cg_emit_value(k, t1, idx);
        snprintf(e, sizeof e, "%s(%s, (%s)%s, %s)", v->dtype == FC_F64 ? "fma" : "fmaf", h, fc_cg_compute_type(v->dtype),
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
    const char *fn = unary_fn(n->op, ct, k->p->numerics == FC_NUMERICS_EAGER);
    switch (n->op) {
    case FC_OP_NEG: snprintf(e, sizeof e, "(-%s)", a); break;
    case FC_OP_RECIP: snprintf(e, sizeof e, "((%s)1 / %s)", fc_cg_compute_type(ct), a); break;
    case FC_OP_ADD: snprintf(e, sizeof e, "(%s + %s)", a, b); break;
    case FC_OP_SUB: snprintf(e, sizeof e, "(%s - %s)", a, b); break;
    case FC_OP_MUL: snprintf(e, sizeof e, "(%s * %s)", a, b); break;
    case FC_OP_DIV: {
        /* Division by a value computed once per row (softmax's sum): multiply
         * by its reciprocal, computed once per row (one more rounding, at
         * most one f32 ulp). */
        const char *rcp = k->reduce && !n->in[1]->weak && k->is_row[n->in[1]->id] && !k->is_row[v->id]
                              ? fc_cg_lookup(k, n->in[1]->id, "rcp") : NULL;
        char inv[64];
        if (rcp) snprintf(e, sizeof e, "(%s * (%s)%s)", a, fc_cg_compute_type(ct), rcp);
        else if (weak_reciprocal(n, ct, inv, sizeof inv)) snprintf(e, sizeof e, "(%s * %s)", a, inv);
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
            snprintf(e, sizeof e, "(%s != (%s)0)", a, fc_cg_compute_type(ct));
        } else if (fc_dtype_is_float(ct) && (fc_dtype_is_int(v->dtype))) {
            double lo = fc_round_to_dtype(-INFINITY, v->dtype), hi = fc_round_to_dtype(INFINITY, v->dtype);
            snprintf(e, sizeof e, "fc_f2i((double)%s, %.17g, %.17g)", a, lo, hi);
        } else {
            snprintf(e, sizeof e, "(%s)%s", fc_cg_compute_type(v->dtype), a);
        }
        break;
    default:
        if (!fn) {
            fc_cg_fail(k, "codegen: op without a CUDA lowering");
            return "0";
        }
        snprintf(e, sizeof e, "%s(%s)", fn, a);
    }
    return bind(k, v, L, e);
}

/* Linear index into x from coordinates (names) of x's dims. */
static void linear(const fc_value *x, char coords[][24], char *out, size_t n) {
    char st[FC_MAX_RANK][SZ];
    fc_cg_stride_text(x->dims, x->rank, st);
    size_t pos = (size_t)snprintf(out, n, "0");
    for (int d = 0; d < x->rank && pos < n; d++)
        pos += (size_t)snprintf(out + pos, n - pos, " + %s * %s", coords[d], st[d]);
}

/* x reshaped to v: where v's coordinates at L are known (c, names) and
 * the dims regroup (one of x's dims a run of static dims of v, or a static
 * dim of v a run of x's, or the same dim), x's coordinates at L without a
 * division by a run-time size: merged as sums of products, split by static
 * sizes. Otherwise nothing is noted (coord then divides L). */
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
    fc_cg_note_coords(k, L, x->rank, x->dims, xc);
}

/* Concat operands [lo, hi) of n (all of nonzero length along ax, ending
 * at end[i]), as a binary search on the coordinate: only the operand that
 * owns it is read, and the nesting is log2 of the operands deep. A chain of
 * `else if`s nests once per operand, and NVRTC's front end recurses once a
 * level: thousands of operands overflowed its stack. Values computed
 * inside a branch are scoped to it. */
static void concat_range(kctx *k, const fc_node *n, const fc_value *v, char c[][24], int ax, const int *op,
                         const int64_t *end, int lo, int hi, const char *res) {
    if (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        fc_strbuf_printf(k->s, "      if (%s < %lldll) {\n", c[ax], (long long)end[mid - 1]);
        concat_range(k, n, v, c, ax, op, end, lo, mid, res);
        fc_strbuf_printf(k->s, "      } else {\n");
        concat_range(k, n, v, c, ax, op, end, mid, hi, res);
        fc_strbuf_printf(k->s, "      }\n");
        return;
    }
    const fc_value *xi = n->in[op[lo]];
    int64_t off = end[lo] - xi->dims[ax];
    char in_c[FC_MAX_RANK][24], name[24], idx[1200], iv[24];
    for (int d = 0; d < v->rank; d++) memcpy(in_c[d], c[d], 24);
    snprintf(name, sizeof name, "c%d", k->tmp++);
    fc_strbuf_printf(k->s, "      i64 %s = %s - %lldll;\n", name, c[ax], (long long)off);
    snprintf(in_c[ax], sizeof in_c[ax], "%s", name);
    linear(xi, in_c, idx, sizeof idx);
    snprintf(iv, sizeof iv, "ix%d", k->tmp++);
    fc_strbuf_printf(k->s, "      i64 %s = %s;\n", iv, idx);
    int mark = k->nmemo, cmark = k->ncm;
    note_coord_names(k, iv, xi, in_c);
    const char *e = fc_cg_emit_value(k, xi, iv);
    /* concat promotes: an operand of another dtype is converted and
     * rounded to the result's dtype */
    char conv[160], rconv[400];
    snprintf(conv, sizeof conv, "(%s)%s", fc_cg_compute_type(v->dtype), e ? e : "0");
    if (fc_cg_unrounded(k, v)) snprintf(rconv, sizeof rconv, "%s", conv);
    else fc_cg_rounded(rconv, sizeof rconv, v->dtype, conv);
    fc_strbuf_printf(k->s, "      %s = %s;\n", res, rconv);
    k->nmemo = mark;
    k->ncm = cmark;
}

static const char *emit_concat(kctx *k, const fc_node *n, const fc_value *v, char c[][24], const char *L) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + v->rank : n->a.axis);
    char res[24];
    snprintf(res, sizeof res, "t%d", k->tmp++);
    fc_strbuf_printf(k->s, "      %s %s;\n", fc_cg_compute_type(v->dtype), res);
    /* The operands that own coordinates, and where each ends. */
    int *op = malloc(sizeof *op * (size_t)n->nin);
    int64_t *end = malloc(sizeof *end * (size_t)n->nin);
    if (!op || !end) {
        free(op);
        free(end);
        k->oom = true;
        return "0";
    }
    int m = 0;
    int64_t off = 0;
    for (int i = 0; i < n->nin; i++) {
        int64_t len = n->in[i]->dims[ax];
        if (fc_dim_is_sym(len)) {
            fc_cg_fail(k, "codegen: concat along a symbolic dimension");
            m = -1;
            break;
        }
        if (len == 0) continue;
        off += len;
        op[m] = i;
        end[m++] = off;
    }
    if (m > 0) concat_range(k, n, v, c, ax, op, end, 0, m, res);
    else if (m == 0) fc_strbuf_printf(k->s, "      %s = 0; /* no operand owns a coordinate */\n", res);
    free(op);
    free(end);
    if (m < 0) return "0";
    fc_cg_remember(k, v->id, L, res);
    return fc_cg_lookup(k, v->id, L);
}

static const char *emit_view(kctx *k, const fc_node *n, const fc_value *v, const char *L) {
    char c[FC_MAX_RANK][24], in_c[FC_MAX_RANK][24], idx[1200], name[24];
    const fc_attrs *a = &n->a;
    for (int d = 0; d < v->rank; d++) coord(k, v, L, d, c[d], sizeof c[d]);
    const fc_value *x = n->nin ? n->in[0] : NULL;
    switch (n->op) {
    case FC_OP_RESHAPE:
        reshape_coords(k, v, c, x, L);
        return fc_cg_emit_value(k, x, L);
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
        if (fc_dim_is_sym(x->dims[ax])) {
            fc_cg_fail(k, "codegen: slice or split of a symbolic dimension");
            return "0";
        }
        int64_t step;
        const int64_t start = fc_view_start(v, ax, &step);
        for (int d = 0; d < x->rank; d++) memcpy(in_c[d], c[d], 24);
        snprintf(name, sizeof name, "c%d", k->tmp++);
        fc_strbuf_printf(k->s, "      i64 %s = %lldll + %s * %lldll;\n", name, (long long)start, c[ax], (long long)step);
        snprintf(in_c[ax], sizeof in_c[ax], "%s", name);
        break;
    }
    case FC_OP_IOTA: {
        int ax = (int)(a->axis < 0 ? a->axis + v->rank : a->axis);
        return bind_as(k, v, L, c[ax], true);
    }
    case FC_OP_FULL: {
        char lit[64];
        literal(v->dtype, a->value, lit, sizeof lit);
        return bind_as(k, v, L, lit, true);
    }
    case FC_OP_CONCAT: return emit_concat(k, n, v, c, L);
    case FC_OP_GATHER: {
        const fc_value *tab = n->in[0], *ix = n->in[1];
        int ax = (int)(a->axis < 0 ? a->axis + tab->rank : a->axis);
        char ic[FC_MAX_RANK][24], ilin[1200], iv[24];
        for (int d = 0; d < ix->rank; d++) memcpy(ic[d], c[ax + d], 24);
        linear(ix, ic, ilin, sizeof ilin);
        snprintf(iv, sizeof iv, "ix%d", k->tmp++);
        fc_strbuf_printf(k->s, "      i64 %s = %s;\n", iv, ilin);
        note_coord_names(k, iv, ix, ic);
        const char *e = fc_cg_emit_value(k, ix, iv);
        /* Out-of-range indices are clamped: a kernel cannot report them (the
         * reference interpreter rejects them). */
        snprintf(name, sizeof name, "c%d", k->tmp++);
        if (fc_dim_is_sym(tab->dims[ax])) {
            char sd[SZ];
            fc_cg_dimx(tab->dims[ax], sd, sizeof sd);
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
    return fc_cg_emit_value(k, x, name);
}

const char *fc_cg_emit_value(kctx *k, const fc_value *v, const char *L) {
    if (k->err || k->oom) return "0";
    /* A value computed once per row is a per-row variable. */
    if (k->reduce && v->id >= 0 && k->is_row[v->id]) {
        const char *e = fc_cg_lookup(k, v->id, "row");
        if (e) return e;
        fc_cg_fail(k, "codegen: a per-row value is read before its reduction");
        return "0";
    }
    const char *e = fc_cg_lookup(k, v->id, L);
    if (e) return e;
    int pos;
    if (fc_cg_is_input(k, v, &pos)) {
        char ld[128];
        if (pos == 0 && k->input0_as) snprintf(ld, sizeof ld, "%s(%s)", k->input0_as, L);
        else if (k->frame) snprintf(ld, sizeof ld, "fc_ld(fc_nc(a%d + (%s)))", pos, L);
        else snprintf(ld, sizeof ld, "fc_ld(a%d[%s])", pos, L);
        return bind_load(k, v, L, ld);
    }
    const fc_node *n = v->def;
    FC_ASSERT(n);
    if (fc_op_is_reduce(n->op)) {
        fc_cg_fail(k, "codegen: a reduction result is read at an element index");
        return "0";
    }
    if (fc_op_is_view(n->op)) return emit_view(k, n, v, L);
    return emit_elementwise(k, n, L);
}

bool fc_cg_in_group(const kctx *k, const fc_node *n) {
    int og = k->p->group_of_node[n->id];
    return og == k->gr->id;
}
