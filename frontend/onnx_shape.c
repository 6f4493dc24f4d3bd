/* onnx_shape.c - values the importer knows at import time, and folding.
 *
 * Exported models compute their shapes at run time: Shape, then Gather,
 * Slice, Concat, Unsqueeze and integer arithmetic, into Reshape and Expand.
 * fusec's kernels want shapes known when compiling, so the importer keeps
 * such values as data (ox_const) and folds every node whose inputs are all
 * known. Shape vectors may hold symbolic dims: the shape ops move them
 * about as they are (structural folding, below), and arithmetic on them
 * gives an "unknown" element that a Reshape can still take as its inferred
 * (-1) dim. Nodes on known data without symbols are folded by running the
 * node's own translation on a throwaway graph with the reference
 * interpreter, so folding has no second copy of any op's semantics.
 */
#include "onnx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Folding runs the interpreter on the data, so it is kept to small tensors:
 * shape arithmetic and masks, not a model's weights. */
#define OX_FOLD_MAX_ELEMS ((int64_t)1 << 16)

static bool is_float(fc_dtype dt) { return dt == FC_F32 || dt == FC_F64 || dt == FC_F16 || dt == FC_BF16; }

ox_const *ox_const_new(fc_dtype dt, int rank, const int64_t *shape) {
    ox_const *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->dt = dt;
    k->rank = rank;
    k->n = 1;
    for (int d = 0; d < rank; d++) {
        k->shape[d] = shape[d];
        k->n *= shape[d];
    }
    size_t n = (size_t)(k->n ? k->n : 1);
    if (is_float(dt)) k->f = calloc(n, sizeof *k->f);
    else k->i = calloc(n, sizeof *k->i);
    if (!k->f && !k->i) {
        free(k);
        return NULL;
    }
    return k;
}

void ox_const_free(ox_const *k) {
    if (!k) return;
    free(k->i);
    free(k->f);
    free(k->kind);
    free(k);
}

int64_t ox_const_int(const ox_const *k, int64_t i) {
    if (k->i) return k->i[i];
    double f = k->f[i];
    if (!(f == f)) return 0;
    if (f >= 9.2e18) return INT64_MAX;
    if (f <= -9.2e18) return INT64_MIN;
    return (int64_t)f;
}

double ox_const_dbl(const ox_const *k, int64_t i) { return k->f ? k->f[i] : (double)k->i[i]; }

static int elem_kind(const ox_const *k, int64_t i) { return k->kind ? k->kind[i] : OX_KNOWN; }

static bool all_known(const ox_const *k) {
    if (!k->kind) return true;
    for (int64_t i = 0; i < k->n; i++)
        if (k->kind[i] != OX_KNOWN) return false;
    return true;
}

fc_status ox_const_to_tensor(const ox_const *k, fc_tensor *t) {
    memset(t, 0, sizeof *t);
    t->dtype = k->dt;
    t->rank = k->rank;
    for (int d = 0; d < k->rank; d++) t->shape[d] = k->shape[d];
    size_t es = fc_dtype_size(k->dt);
    t->data = malloc((size_t)(k->n ? k->n : 1) * es);
    if (!t->data) return FC_ERR_NOMEM;
    for (int64_t i = 0; i < k->n; i++) {
        switch (k->dt) {
        case FC_F64: ((double *)t->data)[i] = k->f[i]; break;
        case FC_F32: ((float *)t->data)[i] = (float)k->f[i]; break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)k->f[i]); break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)k->f[i]); break;
        case FC_I64: ((int64_t *)t->data)[i] = k->i[i]; break;
        case FC_I32: ((int32_t *)t->data)[i] = (int32_t)k->i[i]; break;
        case FC_I8: ((int8_t *)t->data)[i] = (int8_t)k->i[i]; break;
        default: ((uint8_t *)t->data)[i] = k->i[i] != 0; break;
        }
    }
    return FC_OK;
}

ox_const *ox_const_from_tensor(const fc_tensor *t) {
    ox_const *k = ox_const_new(t->dtype, t->rank, t->shape);
    if (!k) return NULL;
    for (int64_t i = 0; i < k->n; i++) {
        switch (t->dtype) {
        case FC_F64: k->f[i] = ((const double *)t->data)[i]; break;
        case FC_F32: k->f[i] = ((const float *)t->data)[i]; break;
        case FC_F16: k->f[i] = fc_f16_to_f32(((const uint16_t *)t->data)[i]); break;
        case FC_BF16: k->f[i] = fc_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case FC_I64: k->i[i] = ((const int64_t *)t->data)[i]; break;
        case FC_I32: k->i[i] = ((const int32_t *)t->data)[i]; break;
        case FC_I8: k->i[i] = ((const int8_t *)t->data)[i]; break;
        default: k->i[i] = ((const uint8_t *)t->data)[i] != 0; break;
        }
    }
    return k;
}

/* ---- materializing known data as IR values ------------------------ */

/*
 * A constant whose last two dims hold one value `a` on and below the
 * diagonal and another `b` above it, the same table for every index of the
 * leading dims: a causal mask, as exporters fold it (an additive 0 / -inf
 * table, or a bool tril, often already expanded to the batch). It is made
 * from iota and a comparison instead of a parameter, so that the attention
 * pass sees the causal mask it recognises and the kernel skips the masked
 * tiles instead of reading a T x S table. NULL when k is not one.
 */
static fc_value *causal_mask(ox_ctx *ox, const ox_const *k, const fc_dim *dims) {
    if (k->rank < 2 || k->n < 4) return NULL;
    int64_t T = k->shape[k->rank - 2], S = k->shape[k->rank - 1];
    if (T < 2 || S < 2 || k->n % (T * S)) return NULL;
    double a = ox_const_dbl(k, 0), b = ox_const_dbl(k, 1);
    if (a == b || a != a || b != b) return NULL;
    for (int64_t t = 0; t < k->n; t += T * S)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < S; j++)
                if (ox_const_dbl(k, t + i * S + j) != (j <= i ? a : b)) return NULL;
    fc_value *qi = fc_iota(ox->g, k->rank, dims, k->rank - 2, FC_I32);
    fc_value *kj = fc_iota(ox->g, k->rank, dims, k->rank - 1, FC_I32);
    if (k->dt == FC_BOOL) return a ? fc_ge(ox->g, qi, kj) : fc_lt(ox->g, qi, kj);
    fc_value *va = fc_full(ox->g, 0, NULL, a, k->dt), *vb = fc_full(ox->g, 0, NULL, b, k->dt);
    return fc_where(ox->g, fc_ge(ox->g, qi, kj), va, vb);
}

/*
 * A constant 0, 1, .., n-1 along its one dim that is not 1 (torch.arange
 * folded by the exporter: the positions of a mask too large to fold) is an
 * iota, which the attention pass reads as the query or key index of a
 * causal mask. NULL when k is not one.
 */
static fc_value *arange(ox_ctx *ox, const ox_const *k, const fc_dim *dims) {
    int ax = -1;
    for (int d = 0; d < k->rank; d++)
        if (k->shape[d] != 1) {
            if (ax >= 0) return NULL;
            ax = d;
        }
    if (ax < 0 || k->n < 2 || (k->dt != FC_I64 && k->dt != FC_I32 && k->dt != FC_F32 && k->dt != FC_F64)) return NULL;
    for (int64_t i = 0; i < k->n; i++)
        if (ox_const_dbl(k, i) != (double)i) return NULL;
    return fc_iota(ox->g, k->rank, dims, ax, k->dt);
}

fc_value *ox_materialize(ox_ctx *ox, ox_val *val) {
    if (val->v) return val->v;
    ox_const *k = val->k;
    if (!k) return NULL;
    if (!all_known(k)) {
        ox_error(ox, FC_ERR_UNSUPPORTED, "value '%s' is computed from symbolic dims and is used as a tensor; bind the "
                 "symbols (--bind) to fold it", val->name);
        return NULL;
    }
    fc_dim dims[FC_MAX_RANK];
    for (int d = 0; d < k->rank; d++) dims[d] = k->shape[d];
    bool uniform = true;
    for (int64_t i = 1; i < k->n && uniform; i++)
        uniform = k->f ? (k->f[i] == k->f[0] || (k->f[i] != k->f[i] && k->f[0] != k->f[0])) : k->i[i] == k->i[0];
    double v0 = k->n ? ox_const_dbl(k, 0) : 0;
    if (uniform && k->i && k->n && (int64_t)v0 != k->i[0]) uniform = false; /* not exact as a double */
    if (uniform) {
        val->v = fc_full(ox->g, k->rank, dims, v0, k->dt);
        return val->v;
    }
    /* The ops that make a known table belong to no node of the model (the
     * first node to read it would otherwise be named for every reader). */
    const fc_loc at = ox->g->cur_loc;
    ox->g->cur_loc = (fc_loc){0, 0};
    val->v = causal_mask(ox, k, dims);
    if (!val->v) val->v = arange(ox, k, dims);
    ox->g->cur_loc = at;
    if (val->v) return val->v;
    /* Non-uniform data: a parameter named as the ONNX value, its data in the
     * weights. Only the model's own importer has weights; a throwaway
     * folding graph gets its data as parameters from the folder. */
    ox_ctx *root = ox->root ? ox->root : ox;
    if (!root->w || root->g != ox->g) {
        ox_error(ox, FC_ERR_UNSUPPORTED, "value '%s' cannot be folded", val->name);
        return NULL;
    }
    fc_tensor t;
    if (ox_const_to_tensor(k, &t) != FC_OK) {
        fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
        return NULL;
    }
    fc_value *p = fc_param(ox->g, val->name, k->dt, k->rank, dims);
    if (fc_graph_status(ox->g) || fc_weights_add_owned(root->w, val->name, &t) != FC_OK) {
        free(t.data);
        return NULL;
    }
    root->nweights_made++;
    val->v = p;
    return p;
}

/* ---- structural folding of shape vectors with symbols -------------- */

static ox_const *vec_new(int64_t n) {
    int64_t sh[1] = {n};
    ox_const *k = ox_const_new(FC_I64, 1, sh);
    if (k && n) {
        k->kind = calloc((size_t)n, 1);
        if (!k->kind) {
            ox_const_free(k);
            return NULL;
        }
    }
    return k;
}

static int64_t attr_int(const Onnx__NodeProto *n, const char *name, int64_t def) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i]->i;
    return def;
}

static const Onnx__AttributeProto *attr_get(const Onnx__NodeProto *n, const char *name) {
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
    return NULL;
}

/* Fold a node whose inputs are known and hold symbolic or unknown
 * elements. Only the ops that move shape elements about, and the integer
 * arithmetic on them, are handled; *done false leaves the node unfolded. */
static fc_status fold_symbolic(ox_ctx *ox, bool *done) {
    const char *op = ox->node->op_type;
    ox_const *a = ox->in[0] ? ox->in[0]->k : NULL;
    *done = false;
    if (!a || a->rank > 1) return FC_OK;
    ox_const *r = NULL;
    if (!strcmp(op, "Identity") || (!strcmp(op, "Cast") && !is_float(a->dt))) {
        r = vec_new(a->n);
        if (!r) return FC_ERR_NOMEM;
        for (int64_t i = 0; i < a->n; i++) {
            r->i[i] = a->i[i];
            r->kind[i] = (unsigned char)elem_kind(a, i);
        }
        r->rank = a->rank;
    } else if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Reshape")) {
        /* A scalar to [1] and back: the element stays. */
        if (a->n != 1) return FC_OK;
        r = vec_new(1);
        if (!r) return FC_ERR_NOMEM;
        r->i[0] = a->i[0];
        r->kind[0] = (unsigned char)elem_kind(a, 0);
        r->rank = !strcmp(op, "Squeeze") ? 0 : 1;
    } else if (!strcmp(op, "Gather")) {
        ox_const *ix = ox->nin > 1 && ox->in[1] ? ox->in[1]->k : NULL;
        if (!ix || ix->rank > 1 || !all_known(ix) || a->rank != 1) return FC_OK;
        r = vec_new(ix->n);
        if (!r) return FC_ERR_NOMEM;
        for (int64_t i = 0; i < ix->n; i++) {
            int64_t j = ox_const_int(ix, i);
            if (j < 0) j += a->n;
            if (j < 0 || j >= a->n) {
                ox_const_free(r);
                return ox_error(ox, FC_ERR_INPUT, "index %lld is out of range for a shape of %lld",
                                (long long)ox_const_int(ix, i), (long long)a->n);
            }
            r->i[i] = a->i[j];
            r->kind[i] = (unsigned char)elem_kind(a, j);
        }
        r->rank = ix->rank;
    } else if (!strcmp(op, "Concat")) {
        int64_t tot = 0;
        for (int j = 0; j < ox->nin; j++) {
            if (!ox->in[j] || !ox->in[j]->k || ox->in[j]->k->rank != 1) return FC_OK;
            tot += ox->in[j]->k->n;
        }
        r = vec_new(tot);
        if (!r) return FC_ERR_NOMEM;
        int64_t o = 0;
        for (int j = 0; j < ox->nin; j++)
            for (int64_t i = 0; i < ox->in[j]->k->n; i++, o++) {
                r->i[o] = ox_const_int(ox->in[j]->k, i);
                r->kind[o] = (unsigned char)elem_kind(ox->in[j]->k, i);
            }
    } else if (!strcmp(op, "Slice") && a->rank == 1) {
        int64_t st = 0, en = INT64_MAX, sp = 1;
        if (ox->opset < 10) {
            const Onnx__AttributeProto *s = attr_get(ox->node, "starts"), *e = attr_get(ox->node, "ends");
            if (!s || !e || s->n_ints != 1 || e->n_ints != 1) return FC_OK;
            st = s->ints[0];
            en = e->ints[0];
        } else {
            for (int j = 1; j < ox->nin && j < 5; j++) {
                if (j == 3) continue; /* axes: one axis, 0 or -1 */
                ox_const *c = ox->in[j] ? ox->in[j]->k : NULL;
                if (!c) { if (j < 3) return FC_OK; continue; }
                if (c->n != 1) return FC_OK;
                int64_t v = ox_const_int(c, 0);
                if (j == 1) st = v; else if (j == 2) en = v; else sp = v;
            }
        }
        if (sp == 0) return FC_OK;
        int64_t n = a->n, lo, hi;
        if (st < 0) st += n;
        if (en < 0) en += n;
        if (sp > 0) {
            lo = st < 0 ? 0 : st > n ? n : st;
            hi = en < 0 ? 0 : en > n ? n : en;
        } else {
            lo = st < 0 ? -1 : st > n - 1 ? n - 1 : st;
            hi = en < -1 ? -1 : en > n - 1 ? n - 1 : en;
        }
        int64_t cnt = sp > 0 ? (hi > lo ? (hi - lo + sp - 1) / sp : 0) : (lo > hi ? (lo - hi + (-sp) - 1) / (-sp) : 0);
        r = vec_new(cnt);
        if (!r) return FC_ERR_NOMEM;
        for (int64_t i = 0; i < cnt; i++) {
            int64_t j = lo + i * sp;
            r->i[i] = a->i[j];
            r->kind[i] = (unsigned char)elem_kind(a, j);
        }
    } else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div")) {
        ox_const *b = ox->nin > 1 && ox->in[1] ? ox->in[1]->k : NULL;
        if (!b || b->rank > 1 || (a->n != b->n && a->n != 1 && b->n != 1)) return FC_OK;
        int64_t n = a->n > b->n ? a->n : b->n;
        r = vec_new(n);
        if (!r) return FC_ERR_NOMEM;
        r->rank = a->rank > b->rank ? a->rank : b->rank;
        for (int64_t i = 0; i < n; i++) {
            int64_t ia = a->n == 1 ? 0 : i, ib = b->n == 1 ? 0 : i;
            int ka = elem_kind(a, ia), kb = elem_kind(b, ib);
            int64_t x = ox_const_int(a, ia), y = ox_const_int(b, ib);
            bool ident = (op[0] == 'M' || op[0] == 'D') ? (kb == OX_KNOWN && y == 1) : (kb == OX_KNOWN && y == 0);
            if (ka == OX_KNOWN && kb == OX_KNOWN) {
                r->i[i] = op[0] == 'A' ? x + y : op[0] == 'S' ? x - y : op[0] == 'M' ? x * y : (y ? x / y : 0);
            } else if (ident) {
                r->i[i] = x;
                r->kind[i] = (unsigned char)ka;
            } else if (op[0] == 'M' && ka == OX_KNOWN && x == 1) {
                r->i[i] = y;
                r->kind[i] = (unsigned char)kb;
            } else {
                r->kind[i] = OX_UNKNOWN;
            }
        }
    } else {
        return FC_OK;
    }
    (void)attr_int;
    ox->out_k[0] = r;
    *done = true;
    return FC_OK;
}

/* ---- folding by running the translation --------------------------- */

static ox_const *const_copy(const ox_const *k) {
    ox_const *c = ox_const_new(k->dt, k->rank, k->shape);
    if (!c) return NULL;
    size_t n = (size_t)(k->n ? k->n : 1);
    if (k->f) memcpy(c->f, k->f, n * sizeof *c->f);
    else memcpy(c->i, k->i, n * sizeof *c->i);
    if (k->kind) {
        c->kind = malloc(n);
        if (!c->kind) { ox_const_free(c); return NULL; }
        memcpy(c->kind, k->kind, n);
    }
    return c;
}

/* Which input of the node a parameter of the folding graph stands for. */
static int param_input(ox_val **ins, int nin, const fc_value *p) {
    for (int i = 0; i < nin; i++)
        if (ins[i] && ins[i]->v == p) return i;
    return 0;
}

static fc_status fold_by_running(ox_ctx *ox, bool *done) {
    *done = false;
    ox_ctx sub;
    memset(&sub, 0, sizeof sub);
    sub.ctx = ox->ctx;
    sub.file = ox->file;
    sub.opset = ox->opset;
    sub.root = ox;
    sub.node = ox->node;
    sub.nout = ox->nout;
    sub.g = fc_graph_new(ox->ctx, "fold");
    if (!sub.g) return FC_ERR_NOMEM;
    ox_val tmp[64];
    ox_val *ins[64];
    fc_tensor tin[64];
    int nparams = 0;
    memset(tmp, 0, sizeof tmp);
    fc_status st = FC_OK;
    for (int i = 0; i < ox->nin; i++) {
        ins[i] = NULL;
        if (!ox->in[i]) continue;
        ox_const *k = ox->in[i]->k;
        fc_dim dims[FC_MAX_RANK];
        for (int d = 0; d < k->rank; d++) dims[d] = k->shape[d];
        char pn[16];
        snprintf(pn, sizeof pn, "in%d", i);
        tmp[i].name = ox->in[i]->name;
        tmp[i].k = k;
        tmp[i].v = fc_param(sub.g, pn, k->dt, k->rank, dims);
        if (ox_const_to_tensor(k, &tin[nparams]) != FC_OK) { st = FC_ERR_NOMEM; break; }
        nparams++;
        ins[i] = &tmp[i];
    }
    sub.in = ins;
    sub.nin = ox->nin;
    if (st == FC_OK && ox_translate(&sub) == FC_OK && !fc_graph_status(sub.g)) {
        fc_value *outs[16];
        int nret = 0, map[16];
        for (int i = 0; i < sub.nout; i++) {
            map[i] = -1;
            if (sub.out_v[i] && !sub.out_k[i]) {
                if (sub.out_v[i]->weak) goto give_up;
                if (sub.out_v[i]->param_index >= 0) { /* a pass-through (Identity): the input's data */
                    sub.out_k[i] = const_copy(tmp[sub.out_v[i]->param_index < 64 ? param_input(ins, ox->nin, sub.out_v[i]) : 0].k);
                    if (!sub.out_k[i]) goto give_up;
                    continue;
                }
                map[i] = nret;
                outs[nret++] = sub.out_v[i];
            }
        }
        fc_tensor tout[16];
        memset(tout, 0, sizeof tout);
        if (nret && (fc_graph_return(sub.g, nret, outs) != FC_OK ||
                     fc_run_reference(sub.g, tin, nparams, tout, nret) != FC_OK))
            goto give_up;
        bool ok = true;
        for (int i = 0; i < sub.nout; i++) {
            if (map[i] < 0) continue;
            if (fc_tensor_numel(&tout[map[i]]) > OX_FOLD_MAX_ELEMS * 16) ok = false;
        }
        for (int i = 0; ok && i < sub.nout; i++) {
            if (map[i] >= 0) {
                ox->out_k[i] = ox_const_from_tensor(&tout[map[i]]);
                if (!ox->out_k[i]) ok = false;
            } else {
                ox->out_k[i] = sub.out_k[i];
                sub.out_k[i] = NULL;
            }
        }
        for (int i = 0; i < nret; i++) fc_tensor_release(&tout[i]);
        if (ok) *done = true;
        else
            for (int i = 0; i < sub.nout; i++) {
                ox_const_free(ox->out_k[i]);
                ox->out_k[i] = NULL;
            }
    }
give_up:
    for (int i = 0; i < 16; i++) ox_const_free(sub.out_k[i]);
    for (int i = 0; i < nparams; i++) free(tin[i].data);
    fc_graph_free(sub.g);
    /* A node that does not fold is translated into the model's graph next,
     * which reports its own error if it has one: this attempt's is dropped. */
    if (!*done) fc_clear_error(ox->ctx);
    return st;
}

fc_status ox_try_fold(ox_ctx *ox, bool *folded) {
    *folded = false;
    if (ox->nin == 0 || ox->nout > 16 || ox_op_is_sequence(ox->node->op_type)) return FC_OK;
    bool sym = false;
    int64_t tot = 0;
    for (int i = 0; i < ox->nin; i++) {
        if (!ox->in[i]) continue;
        if (!ox->in[i]->k) return FC_OK;
        if (!all_known(ox->in[i]->k)) sym = true;
        tot += ox->in[i]->k->n;
    }
    if (tot > OX_FOLD_MAX_ELEMS) return FC_OK;
    /* Ops whose translation reads data at import (Shape of a known value
     * is its own fold) need no folding. */
    if (!strcmp(ox->node->op_type, "Shape") || !strcmp(ox->node->op_type, "Size")) return FC_OK;
    if (sym) return fold_symbolic(ox, folded);
    if (!ox_op_known(ox->node->op_type)) return FC_OK;
    return fold_by_running(ox, folded);
}
