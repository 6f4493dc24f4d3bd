/*
 * interp_impl.h - what the files of the reference interpreter share
 * (runtime/ref/interp*.c; internal to them).
 *
 *   interp.c              the interpreter's state, its errors and result
 *                         shapes, running a graph node by node, the entry
 *                         points (fc_interp_run, fc_run_reference)
 *   interp_tensor.c       elements (load, store), concrete shapes and
 *                         broadcasting, host tensors
 *   interp_elementwise.c  elementwise ops, reductions, normalizations
 *   interp_matmul.c       matmul, attention, gemm
 *   interp_views.c        shape ops, creation ops, gather
 *   interp_decode.c       update_slice, cache_attention (docs/DECODE.md)
 *   interp_conv.c         convolutions, pools, batch norm, pad, resize
 *   interp_string.c       string_normalizer, string values' storage
 *   interp_collective.c   all_reduce, all_gather, reduce_scatter (simulated
 *                         ranks: threads of one group; docs/PARALLEL.md)
 *
 * Each op's function reads its operands with operand(), computes its
 * result shape from their concrete shapes, sets it with fc_ref_set_result
 * (which checks it against the value's type) and fills the result in
 * float64. run_node (interp.c) then rounds every result to its dtype.
 */
#ifndef FC_RUNTIME_REF_INTERP_IMPL_H
#define FC_RUNTIME_REF_INTERP_IMPL_H

#include "interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- concrete shapes (interp_tensor.c) ---------------------------------- */

/* Product of shape[from..to), for shapes already known not to overflow. */
static inline int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++)
        n *= shape[i];
    return n;
}

/* Offset of the i-th element (row-major over shape) under strides. */
static inline int64_t offset_of(int64_t i, int rank, const int64_t *shape, const int64_t *strides)
{
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; d--) {
        off += (i % shape[d]) * strides[d];
        i /= shape[d];
    }
    return off;
}

/* Product of dims; false if it overflows int64. */
bool fc_ref_shape_numel(int rank, const int64_t *shape, int64_t *out);
/* "[2, 3]" into buf. */
const char *fc_ref_shape_str(int rank, const int64_t *shape, char *buf, size_t n);
/* Normalize a possibly negative axis against rank; false if out of range. */
bool fc_ref_norm_axis(int64_t axis, int rank, int *out);
/*
 * Element offsets that read an operand of shape in[0..inr) while walking a
 * result of shape out[0..outr), by NumPy broadcasting: dims align on the
 * right, a missing or size-1 dim is read with stride 0. The shapes must
 * already be known to broadcast.
 */
void fc_ref_bcast_strides(int inr, const int64_t *in, int outr, int64_t *strides);
/* Broadcast shapes a and b into out (rank max of both). False if a pair of
 * dims is neither equal nor 1. */
bool fc_ref_bcast_shape(int ar, const int64_t *a, int br, const int64_t *b, int *outr, int64_t *out);
/* Zeroed memory for n elements of size `size` (at least one byte, so that
 * an empty tensor still gets a non-NULL pointer). NULL on failure. */
void *fc_ref_alloc_zeroed(fc_context *ctx, int64_t n, size_t size);

/* ---- the interpreter state (interp.c) ----------------------------------- */

/* The concrete value of one fc_value. data is NULL until it is computed. */
typedef struct ibuf {
    int rank;
    int64_t shape[FC_MAX_RANK];
    int64_t numel;
    double *data;
} ibuf;

typedef struct interp {
    fc_graph *g;
    fc_context *ctx;
    int64_t *sym;     /* value of symbol i, or -1 while unbound */
    int *sym_param;   /* which input bound symbol i (-1: a result did) */
    int *sym_dim;     /* ...and which dim of it */
    ibuf *val;        /* by value id */
    int nval;
    const fc_node *node; /* the node being run, for messages */
    fc_ref_rounding rounding;
    const struct fc_tp_group *tp; /* the collectives' group, or NULL */
    int tp_rank;
} interp;

/* Whether a float value of dtype dt computed by op is left unrounded
 * (FC_REF_EXACT; the constants of iota and full round in both modes). */
static inline bool fc_ref_exact(const interp *ip, fc_op op, fc_dtype dt)
{
    return ip->rounding == FC_REF_EXACT && fc_dtype_is_float(dt) && op != FC_OP_IOTA && op != FC_OP_FULL;
}

/* "%name", or "%id" for a value without a name. */
const char *fc_ref_value_name(const fc_value *v, char *buf, size_t n);
/*
 * Record an error. While a node runs, the message names its op and first
 * result: "reference: matmul %y: inner dimensions differ (3 vs 4)".
 */
__attribute__((format(printf, 3, 4)))
fc_status fc_ref_err(interp *ip, fc_status st, const char *fmt, ...);
/* fc_ref_norm_axis, or false with FC_ERR_INPUT "axis .. is out of range" set. */
bool fc_ref_axis_ok(interp *ip, int64_t axis, int rank, int *out);
/* Give the buffer of value v a concrete shape and zeroed storage. */
fc_status fc_ref_alloc_buf(interp *ip, const fc_value *v, int rank, const int64_t *shape);
/*
 * Result k of the current node has the concrete shape `shape`, computed from
 * its operands. Unify it with the value's type (binding new symbols) and
 * allocate its buffer.
 */
fc_status fc_ref_set_result(interp *ip, int k, int rank, const int64_t *shape);

static inline fc_status nomem(interp *ip)
{
    return fc_ref_err(ip, FC_ERR_NOMEM, "out of memory");
}

/* A symbolic or static dim's concrete size, or -1 if not known yet. */
static inline int64_t resolve_dim(const interp *ip, fc_dim d)
{
    if (d >= 0)
        return d;
    if (fc_dim_is_sym(d)) {
        int s = fc_dim_sym_index(d);
        FC_ASSERT(s >= 0 && s < ip->g->nsyms);
        return ip->sym[s];
    }
    return -1; /* FC_DIM_INFER */
}

static inline const char *sym_name(const interp *ip, fc_dim d)
{
    const char *s = fc_sym_name(ip->g, d);
    return s ? s : "?";
}

/* The buffer of operand i of the current node (computed before, since nodes
 * are in topological order). */
static inline const ibuf *operand(const interp *ip, int i)
{
    const fc_value *v = ip->node->in[i];
    FC_ASSERT(v->id >= 0 && v->id < ip->nval);
    const ibuf *b = &ip->val[v->id];
    FC_ASSERT(b->data != NULL);
    return b;
}

static inline ibuf *result(const interp *ip, int k)
{
    return &ip->val[ip->node->out[k]->id];
}

/* The scalar semantics of every elementwise op, in float64: one
 * definition in ir/scalar.c, shared with constant folding. */
static inline double scalar_op(fc_op op, double a, double b, double c)
{
    return fc_scalar_eval(op, a, b, c);
}

/*
 * View x as [outer, len, inner] around `axis`: element (o, j, i) is at
 * (o * len + j) * inner + i. A scalar is one row of length 1.
 */
static inline void rows_at(const ibuf *x, int axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    if (x->rank == 0) {
        *outer = *len = *inner = 1;
        return;
    }
    *outer = prod(x->shape, 0, axis);
    *len = x->shape[axis];
    *inner = prod(x->shape, axis + 1, x->rank);
}

/* ---- the ops: each runs ip->node and sets its results ------------------- */

/* interp_elementwise.c */
fc_status fc_ref_run_elementwise(interp *ip);
fc_status fc_ref_run_reduce(interp *ip);
fc_status fc_ref_run_softmax(interp *ip);
fc_status fc_ref_run_layernorm(interp *ip);
fc_status fc_ref_run_rmsnorm(interp *ip);
/* interp_matmul.c */
fc_status fc_ref_run_matmul(interp *ip);
fc_status fc_ref_run_attention(interp *ip);
/* One query row of attention: p[j] = scale * qi . k_j, masked by mrow[j * mstep]
 * (additive, or boolean when mbool; mrow NULL: no mask), softmax over the nk
 * first keys, oi = p @ v; p is scratch of nk doubles. Shared by attention and
 * cache_attention so that the two sum in the same order. */
void fc_ref_attention_row(const double *qi, const double *km, const double *vm, int64_t nk, int64_t D, int64_t Dv,
                          double scale, const double *mrow, int64_t mstep, bool mbool, double *p, double *oi);
fc_status fc_ref_run_gemm(interp *ip);
/* interp_views.c */
fc_status fc_ref_run_reshape(interp *ip);
fc_status fc_ref_run_permute(interp *ip);
fc_status fc_ref_run_expand(interp *ip);
fc_status fc_ref_run_slice(interp *ip);
fc_status fc_ref_run_concat(interp *ip);
fc_status fc_ref_run_split(interp *ip);
fc_status fc_ref_run_iota(interp *ip);
fc_status fc_ref_run_full(interp *ip);
fc_status fc_ref_run_gather(interp *ip);
/* interp_decode.c */
fc_status fc_ref_run_update_slice(interp *ip);
fc_status fc_ref_run_cache_attention(interp *ip);
/* interp_collective.c */
fc_status fc_ref_run_collective(interp *ip);
/* interp_string.c: a string value's buffer holds one element pointer per
 * double slot (copied out with fc_strings_pack). */
fc_status fc_ref_run_string_normalizer(interp *ip);
/* interp_conv.c */
fc_status fc_ref_run_conv(interp *ip);
fc_status fc_ref_run_conv_cl(interp *ip);
fc_status fc_ref_run_conv_transpose(interp *ip);
fc_status fc_ref_run_pool(interp *ip);
fc_status fc_ref_run_global_avg_pool(interp *ip);
fc_status fc_ref_run_batch_norm(interp *ip);
fc_status fc_ref_run_pad(interp *ip);
fc_status fc_ref_run_resize(interp *ip);

#endif
