/*
 * interp.c - the reference interpreter: the oracle every backend is checked
 * against. Written for clarity, not speed.
 *
 * Every value is held as a dense, row-major array of doubles; every op
 * computes in float64; and every node's results are rounded to their dtype
 * once the node has run. That is what an exact machine would produce running
 * the graph node by node, rounding as eager PyTorch does (one rounding per
 * op). FC_REF_EXACT leaves the float results unrounded instead: the exact
 * value of the graph on its inputs, which fast numerics approximate. A
 * backend differs from these by its own arithmetic and rounding, which
 * docs/NUMERICS.md bounds per op family and dtype.
 *
 * Shapes. Value types may hold symbolic dims. The interpreter binds each
 * symbol from the input tensors, then computes every node's result shape
 * again from its operands' concrete shapes, as the op's semantics say, and
 * unifies it with the value's type: static dims must agree, a bound symbol
 * must agree, an unbound one is bound. So a binding the builder could not
 * foresee (B = 1 where it assumed broadcasting, say) is reported as an error,
 * never turned into an out-of-bounds read.
 *
 * Errors go to the graph's context. Nothing prints or exits; every
 * temporary is freed on every path.
 *
 * This file holds the interpreter's state, its errors and result shapes,
 * and runs a graph node by node; the ops are in interp_elementwise.c,
 * interp_matmul.c, interp_views.c and interp_conv.c, elements and concrete shapes in
 * interp_tensor.c (interp_impl.h lists them).
 */
#include "interp_impl.h"

#include <stdarg.h>

/* ================================================================ */
/* The interpreter state.                                            */
/* ================================================================ */

const char *fc_ref_value_name(const fc_value *v, char *buf, size_t n)
{
    if (v->name)
        snprintf(buf, n, "%%%s", v->name);
    else
        snprintf(buf, n, "%%%d", v->id);
    return buf;
}

/*
 * Record an error. While a node runs, the message names its op and first
 * result: "reference: matmul %y: inner dimensions differ (3 vs 4)".
 */
__attribute__((format(printf, 3, 4)))
fc_status fc_ref_err(interp *ip, fc_status st, const char *fmt, ...)
{
    char msg[1024], name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ip->node && ip->node->nout > 0)
        return fc_set_error(ip->ctx, st, "reference: %s %s: %s", fc_op_table[ip->node->op].name,
                            fc_ref_value_name(ip->node->out[0], name, sizeof name), msg);
    return fc_set_error(ip->ctx, st, "reference: %s", msg);
}

/* Give the buffer of value v a concrete shape and zeroed storage. */
fc_status fc_ref_alloc_buf(interp *ip, const fc_value *v, int rank, const int64_t *shape)
{
    char name[128], sh[256];
    ibuf *b = &ip->val[v->id];
    FC_ASSERT(b->data == NULL);
    int64_t n;
    if (!fc_ref_shape_numel(rank, shape, &n))
        return fc_ref_err(ip, FC_ERR_INPUT, "%s has shape %s: its element count overflows int64",
                          fc_ref_value_name(v, name, sizeof name), fc_ref_shape_str(rank, shape, sh, sizeof sh));
    b->data = fc_ref_alloc_zeroed(ip->ctx, n, sizeof(double));
    if (!b->data)
        return nomem(ip);
    b->rank = rank;
    for (int i = 0; i < rank; i++) /* not memcpy: shape may be NULL for rank 0 */
        b->shape[i] = shape[i];
    b->numel = n;
    return FC_OK;
}

/*
 * Result k of the current node has the concrete shape `shape`, computed from
 * its operands. Unify it with the value's type (binding new symbols) and
 * allocate its buffer.
 */
fc_status fc_ref_set_result(interp *ip, int k, int rank, const int64_t *shape)
{
    const fc_value *v = ip->node->out[k];
    char name[128], sh[256], ty[256];
    if (rank != v->rank)
        return fc_ref_err(ip, FC_ERR_INPUT, "result %s has shape %s at run time, but its type is %s",
                          fc_ref_value_name(v, name, sizeof name), fc_ref_shape_str(rank, shape, sh, sizeof sh),
                          fc_type_str(ip->g, v->dtype, v->rank, v->dims, ty, sizeof ty));
    for (int i = 0; i < rank; i++) {
        fc_dim d = v->dims[i];
        if (fc_dim_is_sym(d) && resolve_dim(ip, d) < 0) {
            ip->sym[fc_dim_sym_index(d)] = shape[i]; /* first seen here */
            continue;
        }
        int64_t want = resolve_dim(ip, d);
        if (want >= 0 && want != shape[i]) {
            if (fc_dim_is_sym(d))
                return fc_ref_err(ip, FC_ERR_INPUT,
                                  "result %s has shape %s at run time, but its type is %s with %s = %lld",
                                  fc_ref_value_name(v, name, sizeof name), fc_ref_shape_str(rank, shape, sh, sizeof sh),
                                  fc_type_str(ip->g, v->dtype, v->rank, v->dims, ty, sizeof ty),
                                  sym_name(ip, d), (long long)want);
            return fc_ref_err(ip, FC_ERR_INPUT, "result %s has shape %s at run time, but its type is %s",
                              fc_ref_value_name(v, name, sizeof name), fc_ref_shape_str(rank, shape, sh, sizeof sh),
                              fc_type_str(ip->g, v->dtype, v->rank, v->dims, ty, sizeof ty));
        }
    }
    return fc_ref_alloc_buf(ip, v, rank, shape);
}

/* ================================================================ */
/* Running a graph.                                                  */
/* ================================================================ */

/* Is v a value of this graph (an id in range)? */
static bool known_value(const interp *ip, const fc_value *v)
{
    return v && v->id >= 0 && v->id < ip->nval;
}

static fc_status run_node(interp *ip)
{
    const fc_node *n = ip->node;
    fc_status st = FC_ERR_UNSUPPORTED;

    /* Nodes are in topological order, each value defined once. A pass that
     * broke that gets an error here rather than an abort: the pass tests run
     * this oracle on the graphs that passes produce. */
    for (int k = 0; k < n->nin; k++)
        if (!known_value(ip, n->in[k]) || !ip->val[n->in[k]->id].data)
            return fc_ref_err(ip, FC_ERR_INPUT, "operand %d is used before it is computed", k);
    for (int k = 0; k < n->nout; k++)
        if (!known_value(ip, n->out[k]) || ip->val[n->out[k]->id].data)
            return fc_ref_err(ip, FC_ERR_INPUT, "result %d is defined twice", k);
    /* Every op is listed, without a default, so that a new op in ops.def
     * is a compile error (-Wswitch) until it is given semantics here. */
    switch (n->op) {
    case FC_OP_NEG: case FC_OP_ABS: case FC_OP_EXP: case FC_OP_LOG:
    case FC_OP_SQRT: case FC_OP_RSQRT: case FC_OP_RECIP: case FC_OP_SIN:
    case FC_OP_COS: case FC_OP_TANH: case FC_OP_SIGMOID: case FC_OP_RELU:
    case FC_OP_GELU: case FC_OP_GELU_TANH: case FC_OP_SILU: case FC_OP_HARDSWISH: case FC_OP_ERF:
    case FC_OP_ADD: case FC_OP_SUB: case FC_OP_MUL: case FC_OP_DIV:
    case FC_OP_MAX: case FC_OP_MIN: case FC_OP_POW:
    case FC_OP_EQ: case FC_OP_NE: case FC_OP_LT:
    case FC_OP_LE: case FC_OP_GT: case FC_OP_GE:
    case FC_OP_WHERE: case FC_OP_CAST:
        st = fc_ref_run_elementwise(ip);
        break;
    case FC_OP_REDUCE_SUM: case FC_OP_REDUCE_MAX:
    case FC_OP_REDUCE_MIN: case FC_OP_REDUCE_MEAN:
        st = fc_ref_run_reduce(ip);
        break;
    case FC_OP_SOFTMAX: st = fc_ref_run_softmax(ip); break;
    case FC_OP_LAYERNORM: st = fc_ref_run_layernorm(ip); break;
    case FC_OP_RMSNORM: st = fc_ref_run_rmsnorm(ip); break;
    case FC_OP_MATMUL: st = fc_ref_run_matmul(ip); break;
    case FC_OP_ATTENTION: st = fc_ref_run_attention(ip); break;
    case FC_OP_GEMM: st = fc_ref_run_gemm(ip); break;
    case FC_OP_RESHAPE: st = fc_ref_run_reshape(ip); break;
    case FC_OP_PERMUTE: st = fc_ref_run_permute(ip); break;
    case FC_OP_EXPAND: st = fc_ref_run_expand(ip); break;
    case FC_OP_SLICE: st = fc_ref_run_slice(ip); break;
    case FC_OP_CONCAT: st = fc_ref_run_concat(ip); break;
    case FC_OP_SPLIT: st = fc_ref_run_split(ip); break;
    case FC_OP_IOTA: st = fc_ref_run_iota(ip); break;
    case FC_OP_FULL: st = fc_ref_run_full(ip); break;
    case FC_OP_GATHER: st = fc_ref_run_gather(ip); break;
    case FC_OP_UPDATE_SLICE: st = fc_ref_run_update_slice(ip); break;
    case FC_OP_CACHE_ATTENTION: st = fc_ref_run_cache_attention(ip); break;
    case FC_OP_CONV: st = fc_ref_run_conv(ip); break;
    case FC_OP_CONV_TRANSPOSE: st = fc_ref_run_conv_transpose(ip); break;
    case FC_OP_MAX_POOL: case FC_OP_AVG_POOL: st = fc_ref_run_pool(ip); break;
    case FC_OP_GLOBAL_AVG_POOL: st = fc_ref_run_global_avg_pool(ip); break;
    case FC_OP_BATCH_NORM: st = fc_ref_run_batch_norm(ip); break;
    case FC_OP_PAD: st = fc_ref_run_pad(ip); break;
    case FC_OP_RESIZE: st = fc_ref_run_resize(ip); break;
    case FC_OP_CONV_CL: st = fc_ref_run_conv_cl(ip); break;
    case FC_OP_ALL_REDUCE: case FC_OP_ALL_GATHER: case FC_OP_REDUCE_SCATTER: st = fc_ref_run_collective(ip); break;
    case FC_OP_STRING_NORMALIZER: st = fc_ref_run_string_normalizer(ip); break;
    case FC_OP_COUNT: FC_UNREACHABLE("run_node: bad op");
    }
    if (st != FC_OK)
        return st;
    /* Round every result to its dtype: the one rounding per node. */
    for (int k = 0; k < n->nout; k++) {
        ibuf *b = result(ip, k);
        FC_ASSERT(b->data != NULL);
        if (fc_ref_exact(ip, n->op, n->out[k]->dtype) || n->out[k]->dtype == FC_STRING)
            continue;
        for (int64_t i = 0; i < b->numel; i++)
            b->data[i] = fc_round_to_dtype(b->data[i], n->out[k]->dtype);
    }
    return FC_OK;
}

/* Check input i against parameter i, binding the symbols in its type. */
static fc_status bind_input(interp *ip, int i, const fc_interp_tensor *t)
{
    const fc_value *p = ip->g->params[i];
    char name[128], ty[256], sh[256];
    fc_ref_value_name(p, name, sizeof name);
    fc_type_str(ip->g, p->dtype, p->rank, p->dims, ty, sizeof ty);
    if (t->dtype != p->dtype)
        return fc_ref_err(ip, FC_ERR_INPUT, "input %d (%s) is %s, but the parameter is %s", i, name,
                          (unsigned)t->dtype < FC_DTYPE_COUNT ? fc_dtype_name(t->dtype) : "a bad dtype", ty);
    if (t->rank != p->rank)
        return fc_ref_err(ip, FC_ERR_INPUT, "input %d (%s) has rank %d, but the parameter is %s", i, name, t->rank, ty);
    fc_ref_shape_str(t->rank, t->shape, sh, sizeof sh);
    for (int d = 0; d < p->rank; d++) {
        fc_dim pd = p->dims[d];
        int64_t size = t->shape[d];
        if (size < 0)
            return fc_ref_err(ip, FC_ERR_INPUT, "input %d (%s) has a negative dim in shape %s", i, name, sh);
        if (!fc_dim_is_sym(pd)) {
            if (pd != size)
                return fc_ref_err(ip, FC_ERR_INPUT, "input %d (%s) has shape %s, but the parameter is %s", i, name,
                                  sh, ty);
            continue;
        }
        int s = fc_dim_sym_index(pd);
        FC_ASSERT(s >= 0 && s < ip->g->nsyms);
        if (ip->sym[s] < 0) {
            ip->sym[s] = size;
            ip->sym_param[s] = i;
            ip->sym_dim[s] = d;
        } else if (ip->sym[s] != size) {
            char other[128];
            return fc_ref_err(ip, FC_ERR_INPUT,
                              "input %d (%s) has shape %s, so symbol %s = %lld, but input %d (%s) set %s = %lld "
                              "(dim %d)",
                              i, name, sh, sym_name(ip, pd), (long long)size, ip->sym_param[s],
                              fc_ref_value_name(ip->g->params[ip->sym_param[s]], other, sizeof other), sym_name(ip, pd),
                              (long long)ip->sym[s], ip->sym_dim[s]);
        }
    }
    fc_status st = fc_ref_alloc_buf(ip, p, t->rank, t->shape);
    if (st != FC_OK)
        return st;
    ibuf *b = &ip->val[p->id];
    if (b->numel > 0 && !t->data)
        return fc_ref_err(ip, FC_ERR_USAGE, "input %d (%s) has no data", i, name);
    if (p->dtype == FC_STRING) /* the element pointers, as they are */
        memcpy(b->data, t->data, sizeof(double) * (size_t)b->numel);
    else
        for (int64_t j = 0; j < b->numel; j++)
            b->data[j] = fc_round_to_dtype(t->data[j], p->dtype);
    return FC_OK;
}

/* Weak scalars are operands without a defining node: give each a rank-0
 * buffer holding its exact value (each use rounds it to its node's dtype). */
static fc_status load_weak_scalars(interp *ip)
{
    for (int i = 0; i < ip->g->nnodes; i++) {
        const fc_node *n = ip->g->nodes[i];
        for (int k = 0; !n->dead && k < n->nin; k++) {
            const fc_value *v = n->in[k];
            if (!known_value(ip, v) || !v->weak || ip->val[v->id].data)
                continue; /* a bad id is reported when the node runs */
            fc_status st = fc_ref_alloc_buf(ip, v, 0, NULL);
            if (st != FC_OK)
                return st;
            ip->val[v->id].data[0] = v->scalar;
        }
    }
    return FC_OK;
}

/* Checks shared by both entry points, before anything is allocated. */
static fc_status check_call(fc_graph *g, int nin, bool have_inputs, int nout, bool have_outputs)
{
    fc_context *ctx = g->ctx;
    if (fc_graph_status(g) != FC_OK) {
        /* Keep the builder's message: it says what went wrong first. */
        if (fc_last_error(ctx)[0] == '\0')
            fc_set_error(ctx, fc_graph_status(g), "reference: graph %s has an earlier error", g->name);
        return fc_graph_status(g);
    }
    if (!g->returned)
        return fc_set_error(ctx, FC_ERR_USAGE, "reference: graph %s has no return", g->name);
    if (nin != g->nparams || (nin > 0 && !have_inputs))
        return fc_set_error(ctx, FC_ERR_USAGE, "reference: graph %s takes %d inputs, not %d", g->name,
                            g->nparams, nin);
    if (nout != g->noutputs || (nout > 0 && !have_outputs))
        return fc_set_error(ctx, FC_ERR_USAGE, "reference: graph %s has %d outputs, not %d", g->name,
                            g->noutputs, nout);
    return FC_OK;
}

fc_status fc_interp_run_rounding(fc_graph *g, fc_ref_rounding rounding, const fc_interp_tensor *inputs, int nin,
                                 fc_interp_tensor *outputs, int nout)
{
    return fc_interp_run_ranked(g, rounding, NULL, 0, inputs, nin, outputs, nout);
}

fc_status fc_interp_run_ranked(fc_graph *g, fc_ref_rounding rounding, const struct fc_tp_group *tp, int rank,
                               const fc_interp_tensor *inputs, int nin, fc_interp_tensor *outputs, int nout)
{
    if (!g)
        return FC_ERR_USAGE;
    for (int i = 0; outputs && i < nout; i++)
        memset(&outputs[i], 0, sizeof outputs[i]);
    fc_status st = check_call(g, nin, inputs != NULL, nout, outputs != NULL);
    if (st != FC_OK)
        return st;

    interp ip = {.g = g, .ctx = g->ctx, .nval = g->next_value_id, .rounding = rounding, .tp = tp, .tp_rank = rank};
    ip.sym = fc_ref_alloc_zeroed(ip.ctx, g->nsyms, sizeof(int64_t));
    ip.sym_param = fc_ref_alloc_zeroed(ip.ctx, g->nsyms, sizeof(int));
    ip.sym_dim = fc_ref_alloc_zeroed(ip.ctx, g->nsyms, sizeof(int));
    ip.val = fc_ref_alloc_zeroed(ip.ctx, ip.nval, sizeof(ibuf));
    if (!ip.sym || !ip.sym_param || !ip.sym_dim || !ip.val) {
        st = nomem(&ip);
        goto done;
    }
    for (int s = 0; s < g->nsyms; s++)
        ip.sym[s] = ip.sym_param[s] = -1;

    for (int i = 0; i < nin && st == FC_OK; i++)
        st = bind_input(&ip, i, &inputs[i]);
    if (st == FC_OK)
        st = load_weak_scalars(&ip);
    for (int i = 0; i < g->nnodes && st == FC_OK; i++) {
        if (g->nodes[i]->dead)
            continue;
        ip.node = g->nodes[i];
        st = run_node(&ip);
    }
    ip.node = NULL;

    /* Copy the results out; a value may be returned twice, so copy. */
    for (int i = 0; i < nout && st == FC_OK; i++) {
        const fc_value *v = g->outputs[i];
        if (!known_value(&ip, v) || !ip.val[v->id].data) {
            st = fc_ref_err(&ip, FC_ERR_INPUT, "result %d of graph %s is never computed", i, g->name);
            break;
        }
        const ibuf *b = &ip.val[v->id];
        fc_interp_tensor *t = &outputs[i];
        t->dtype = v->dtype;
        t->rank = b->rank;
        memcpy(t->shape, b->shape, sizeof t->shape);
        /* fc_ctx_malloc is malloc with fault injection: released with free(). */
        if (v->dtype == FC_STRING) {
            if (!(t->data = fc_strings_pack(ip.ctx, (const char *const *)(const void *)b->data, b->numel))) {
                st = nomem(&ip);
                break;
            }
            continue;
        }
        t->data = fc_ref_alloc_zeroed(ip.ctx, b->numel, sizeof(double));
        if (!t->data) {
            st = nomem(&ip);
            break;
        }
        bool exact = rounding == FC_REF_EXACT && fc_dtype_is_float(v->dtype);
        for (int64_t j = 0; j < b->numel; j++)
            t->data[j] = exact ? b->data[j] : fc_round_to_dtype(b->data[j], v->dtype);
    }
    /* Inout parameters: the caller's buffer takes the new contents, only
     * after a run that succeeded (an error leaves the cache as it was). */
    for (int i = 0; i < g->nnodes && st == FC_OK; i++) {
        const fc_node *n = g->nodes[i];
        if (n->dead || n->op != FC_OP_UPDATE_SLICE || n->in[0]->param_index < 0)
            continue;
        const ibuf *b = &ip.val[n->out[0]->id];
        double *to = inputs[n->in[0]->param_index].data;
        for (int64_t j = 0; j < b->numel; j++)
            to[j] = b->data[j];
    }
    if (st != FC_OK)
        for (int i = 0; i < nout; i++)
            fc_interp_tensor_release(&outputs[i]);

done:
    for (int i = 0; ip.val && i < ip.nval; i++)
        fc_ctx_freemem(ip.ctx, ip.val[i].data);
    fc_ctx_freemem(ip.ctx, ip.val);
    fc_ctx_freemem(ip.ctx, ip.sym);
    fc_ctx_freemem(ip.ctx, ip.sym_param);
    fc_ctx_freemem(ip.ctx, ip.sym_dim);
    return st;
}

fc_status fc_interp_run(fc_graph *g, const fc_interp_tensor *inputs, int nin, fc_interp_tensor *outputs,
                        int nout)
{
    return fc_interp_run_rounding(g, FC_REF_DTYPE, inputs, nin, outputs, nout);
}

/* ================================================================ */
/* fc_run_reference: fc_tensor storage in and out.                   */
/* ================================================================ */

/* exact: every float value in float64, the outputs f64 tensors. */
fc_status fc_ref_run_tensors(fc_graph *g, const struct fc_tp_group *tp, int rank, const fc_tensor *inputs, int nin,
                             fc_tensor *outputs, int nout, bool exact)
{
    if (!g)
        return FC_ERR_USAGE;
    fc_context *ctx = g->ctx;
    for (int i = 0; outputs && i < nout; i++)
        memset(&outputs[i], 0, sizeof outputs[i]);
    fc_status st = check_call(g, nin, inputs != NULL, nout, outputs != NULL);
    if (st != FC_OK)
        return st;

    fc_interp_tensor *din = fc_ref_alloc_zeroed(ctx, nin, sizeof *din);
    fc_interp_tensor *dout = fc_ref_alloc_zeroed(ctx, nout, sizeof *dout);
    if (!din || !dout) {
        st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
        goto done;
    }

    /* Decode the inputs' storage into doubles. */
    for (int i = 0; i < nin && st == FC_OK; i++) {
        const fc_tensor *t = &inputs[i];
        int64_t n = fc_tensor_numel(t);
        if ((unsigned)t->dtype >= FC_DTYPE_COUNT)
            st = fc_set_error(ctx, FC_ERR_USAGE, "reference: input %d has a bad dtype", i);
        else if (n < 0)
            st = fc_set_error(ctx, FC_ERR_USAGE,
                              "reference: input %d has a bad shape (rank, negative dim or overflow)", i);
        else if (n > 0 && !t->data)
            st = fc_set_error(ctx, FC_ERR_USAGE, "reference: input %d has no data", i);
        if (st != FC_OK)
            break;
        din[i].dtype = t->dtype;
        din[i].rank = t->rank;
        memcpy(din[i].shape, t->shape, sizeof din[i].shape);
        din[i].data = fc_ref_alloc_zeroed(ctx, n, sizeof(double));
        if (!din[i].data) {
            st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
            break;
        }
        if (t->dtype == FC_STRING) { /* the caller's pointers, one per double slot */
            int64_t bad = fc_strings_first_null(t->data, n);
            if (bad >= 0) {
                st = fc_set_error(ctx, FC_ERR_USAGE, "reference: input %d: string element %lld is NULL", i,
                                  (long long)bad);
                break;
            }
            memcpy(din[i].data, t->data, sizeof(double) * (size_t)n);
            continue;
        }
        for (int64_t j = 0; j < n; j++)
            din[i].data[j] = fc_interp_load(t->dtype, t->data, j);
    }

    if (st == FC_OK)
        st = fc_interp_run_ranked(g, exact ? FC_REF_EXACT : FC_REF_DTYPE, tp, rank, din, nin, dout, nout);

    /* Inout parameters: their new contents go back to the caller's storage. */
    for (int i = 0; i < nin && st == FC_OK; i++)
        if (g->params[i]->inout)
            for (int64_t j = 0; j < fc_tensor_numel(&inputs[i]); j++)
                fc_interp_store(inputs[i].dtype, inputs[i].data, j, din[i].data[j]);

    /* Encode the results into each dtype's storage. fc_ctx_malloc is
     * malloc (with fault injection), so fc_tensor_release can free() it. */
    for (int i = 0; i < nout && st == FC_OK; i++) {
        fc_tensor *t = &outputs[i];
        int64_t n = fc_interp_tensor_numel(&dout[i]);
        t->dtype = exact && fc_dtype_is_float(dout[i].dtype) ? FC_F64 : dout[i].dtype;
        t->rank = dout[i].rank;
        memcpy(t->shape, dout[i].shape, sizeof t->shape);
        if (t->dtype == FC_STRING) { /* one block the caller frees: see fusec.h */
            if (!(t->data = fc_strings_pack(ctx, (const char *const *)(const void *)dout[i].data, n))) {
                st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
                break;
            }
            continue;
        }
        t->data = fc_ref_alloc_zeroed(ctx, n, fc_dtype_size(t->dtype));
        if (!t->data) {
            st = fc_set_error(ctx, FC_ERR_NOMEM, "reference: out of memory");
            break;
        }
        for (int64_t j = 0; j < n; j++)
            fc_interp_store(t->dtype, t->data, j, dout[i].data[j]);
    }
    if (st != FC_OK)
        for (int i = 0; i < nout; i++)
            fc_tensor_release(&outputs[i]);

done:
    for (int i = 0; din && i < nin; i++)
        fc_ctx_freemem(ctx, din[i].data);
    for (int i = 0; dout && i < nout; i++)
        fc_interp_tensor_release(&dout[i]);
    fc_ctx_freemem(ctx, din);
    fc_ctx_freemem(ctx, dout);
    return st;
}

fc_status fc_run_reference(fc_graph *g, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout)
{
    return fc_ref_run_tensors(g, NULL, 0, inputs, nin, outputs, nout, false);
}

fc_status fc_run_reference_exact(fc_graph *g, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout)
{
    return fc_ref_run_tensors(g, NULL, 0, inputs, nin, outputs, nout, true);
}
